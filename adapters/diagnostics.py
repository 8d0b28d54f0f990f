"""Raw provider frames as evidence: bounded, rotating JSONL files per provider session.

:class:`RotatingRawLog` implements :class:`~adapters.protocol.RawFrameSink` for
both adapters. Every frame, in either direction, becomes one
:class:`~t3orch.domain.raw.RawProviderEvent` line (``id, provider,
providerSessionId, sequence, direction, messageKind, method, jsonRpcId, payload,
observedAt``) in ``<dir>/<providerSessionId>.jsonl``; when that file would grow
past ``max_bytes`` it is rotated to ``.1`` (``.1`` to ``.2`` ...), keeping
``backup_count`` old files. Raw frames never go to SQLite (lessons §1).

Secrets are redacted before anything is written: values under keys that name a
credential (authorization, ``*token``, ``*api_key``/``apiKey``, ``*secret``,
``*password``, cookies) at any depth, ``Bearer …`` strings, and env-style
``SOMETHING_API_KEY=value`` text. A frame in which none of those can be
(``suspect``) is stored as its original bytes, unparsed: that is the common case
(text deltas, completed items) and it keeps the log cheap.

The sink is synchronous and buffered (``flush_interval_s``); call
:meth:`RotatingRawLog.close` (or use it as a context manager) to flush.

The provider's stderr goes beside the frames, redacted line by line, to
``<dir>/<providerSessionId>.stderr`` (:meth:`RotatingRawLog.stderr`; one
rotated copy), so ``t3orch logs`` can show it.

These files are diagnostics, never the record: a write that fails (a full disk,
an I/O error) is said once, in the daemon's log and through ``on_failure`` (the
session turns it into a ``raw_log_unwritable`` diagnostic), and the session's
files are not written again; :meth:`RotatingRawLog.record` keeps numbering
frames, so the canonical events are the same whether or not their frames could
be kept. All file opens go through :func:`open_log_file`, the filesystem seam.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from t3orch.clock import WallClock, iso
from t3orch.domain.raw import RawProviderEvent
from t3orch.domain.vocab import ProviderKind
from t3orch.ids import ProviderSessionId, RawEventId

log = logging.getLogger(__name__)

REDACTED = "[REDACTED]"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_BACKUP_COUNT = 5
#: How much of an undecodable line is kept (it may be huge).
UNPARSED_HEAD_CHARS = 4096

Direction = Literal["incoming", "outgoing"]
MessageKind = Literal["request", "response", "notification", "error"]

_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_ENV_SECRET = re.compile(
    r"\b([A-Za-z0-9_]*(?:API_KEY|APIKEY|TOKEN|SECRET|PASSWORD)[A-Za-z0-9_]*\s*[=:]\s*)"
    r"([\"']?)[^\s\"',}]+"
)
_SENSITIVE_EXACT = frozenset({"authorization", "proxyauthorization", "cookie", "setcookie"})
_SENSITIVE_SUFFIXES = ("token", "apikey", "secret", "password", "passwd")

# The pre-filter (``suspect``) runs on every frame, on the event loop, so it looks for
# what ``redact`` would change and nothing else, with byte searches rather than one
# case-insensitive regex: that regex cost ~10 ms on a 120 KB ``item/completed``.
#: Keys as ``sensitive_key`` sees them: the end of a lower-cased name, separators removed.
_SENSITIVE_ENDS = tuple(name.encode() for name in (*_SENSITIVE_SUFFIXES, "authorization", "cookie"))
#: A sensitive key contains one of these (lower-cased); most frames contain none.
_KEY_WORDS = (b"token", b"key", b"secret", b"pass", b"authorization", b"cookie")
#: ``_ENV_SECRET`` is case-sensitive: it needs one of these, as written.
_ENV_WORDS = (b"TOKEN", b"SECRET", b"PASSWORD", b"API_KEY", b"APIKEY")
#: The end of a JSON key: its closing quote and colon.
_KEY_END = re.compile(rb'"\s*:')
#: Enough of a key before its quote to hold a suffix and its separators.
_KEY_TAIL = 40


@functools.lru_cache(maxsize=4096)
def sensitive_key(key: str) -> bool:
    """Whether a key names a credential (``inputTokens`` and ``tokenUsage`` do not)."""
    name = key.lower().replace("_", "").replace("-", "")
    return name in _SENSITIVE_EXACT or name.endswith(_SENSITIVE_SUFFIXES)


def redact_text(text: str) -> str:
    if "=" in text or ":" in text:
        text = _ENV_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


#: Terminal colours (Codex's tracing output has them): they would split a secret's name
#: from its ``=`` and hide it from the rules.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def redact_stderr(data: bytes) -> str:
    """Provider stderr as text without terminal colours, redacted as :func:`redact_text`
    does (give it whole lines: a line cut before a secret's name hides it from the rules)."""
    return redact_text(_ANSI.sub("", data.decode("utf-8", "replace")))


def open_log_file(path: Path, mode: str) -> IO[bytes]:
    """Every diagnostics file is opened here: the seam tests fake a full disk with."""
    return open(path, mode)


def redact(value: Any) -> Any:
    """A copy of a JSON value with every secret replaced by ``[REDACTED]``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if sensitive_key(str(key)) and isinstance(item, str | dict | list):
                out[key] = REDACTED
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def suspect(line: bytes) -> bool:
    """Whether ``redact`` could change this raw JSON line; a clean one is stored as is.

    True when a key names a credential as ``sensitive_key`` has it (``"accessToken":``,
    ``"x-api-key":``; not ``"contentTokenCount":`` or ``"tokenUsage":``), when text could
    hold an env-style secret (``GITHUB_TOKEN=``), or ``bearer`` appears. A key written
    with JSON escapes for its letters is not recognised (no encoder writes those).
    """
    for word in _ENV_WORDS:
        if word in line:
            return True
    low = line.lower()
    if b"bearer" in low:
        return True
    found = [at for at in map(low.find, _KEY_WORDS) if at >= 0]
    if not found:
        return False
    # A credential key holds one of the words, so its end comes after the first of them:
    # the keys before it (all of a delta's, when the word is in its text) need no look.
    for match in _KEY_END.finditer(low, min(found)):
        end = match.start()
        name = low[max(0, end - _KEY_TAIL) : end].replace(b"_", b"").replace(b"-", b"")
        if name.endswith(_SENSITIVE_ENDS):
            return True
    return False


class _Sub(msgspec.Struct):
    subtype: str | None = None
    request_id: str | int | None = None


class _Envelope(msgspec.Struct):
    """Enough of a Codex JSON-RPC frame or a Claude stream-json frame to classify it."""

    id: Any = UNSET
    method: str | UnsetType = UNSET
    result: msgspec.Raw = msgspec.Raw(b"")
    error: msgspec.Raw = msgspec.Raw(b"")
    type: str | UnsetType = UNSET
    request_id: str | int | None = None
    request: _Sub | None = None
    response: _Sub | None = None


_envelope = msgspec.json.Decoder(_Envelope)


def classify(envelope: _Envelope) -> tuple[MessageKind, str | None, str | int | None]:
    """``(messageKind, method, jsonRpcId)`` of a decoded frame of either provider."""
    rpc_id = envelope.id if isinstance(envelope.id, str | int) else None
    if not isinstance(envelope.method, UnsetType):
        return ("request" if envelope.id is not UNSET else "notification"), envelope.method, rpc_id
    if envelope.id is not UNSET and (envelope.result or envelope.error):
        return ("response" if envelope.result else "error"), None, rpc_id
    kind = envelope.type if isinstance(envelope.type, str) else None
    if kind == "control_request":
        subtype = envelope.request.subtype if envelope.request else None
        return "request", subtype, envelope.request_id
    if kind == "control_response":
        response = envelope.response or _Sub()
        message_kind: MessageKind = "error" if response.subtype == "error" else "response"
        return message_kind, None, response.request_id
    return "notification", kind, None


class RotatingRawLog:
    """A :class:`~adapters.protocol.RawFrameSink` writing rotating JSONL files."""

    def __init__(
        self,
        directory: str | Path,
        provider: ProviderKind,
        provider_session_id: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        backup_count: int = DEFAULT_BACKUP_COUNT,
        clock: WallClock | None = None,
        flush_interval_s: float = 0.5,
    ) -> None:
        if max_bytes < 1 or backup_count < 0:
            raise ValueError("max_bytes must be positive and backup_count >= 0")
        if not provider_session_id or "/" in provider_session_id or provider_session_id[0] == ".":
            raise ValueError(f"unusable provider session id {provider_session_id!r}")
        self.directory = Path(directory)
        self.provider = provider
        self.session_id = ProviderSessionId(provider_session_id)
        self.max_bytes = max_bytes
        self.backup_count = backup_count
        self._clock = clock
        self._flush_interval = flush_interval_s
        self.path = self.directory / f"{provider_session_id}.jsonl"
        self.stderr_path = self.directory / f"{provider_session_id}.stderr"
        #: Told once, with a one-line message, when the files cannot be written.
        self.on_failure: Callable[[str], None] | None = None
        #: Why the files are no longer written (None while they are).
        self.failed: str | None = None
        #: While it says True, incoming frames are a reattach's replay of a holder's
        #: journal (an earlier daemon recorded them here already): neither numbered nor
        #: written again.
        self.replaying: Callable[[], bool] | None = None
        self._file: IO[bytes] | None = None
        self._size = 0
        self._stderr_file: IO[bytes] | None = None
        self._stderr_size = 0
        self._stderr_partial = b""
        # A restarted daemon continues the session's sequence, so raw ids stay unique.
        self.sequence = _last_sequence(self.path, self.backup_count)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = open_log_file(self.path, "ab")
            self._size = self._file.tell()
        except OSError as exc:
            self._fail(exc)
        self._last_flush = time.monotonic()
        self._encoder = msgspec.json.Encoder()
        # observedAt has millisecond resolution; its date and time of day are formatted
        # once a second, and each line only writes its milliseconds after them.
        self._stamp_second = -1
        self._stamp_prefix = ""

    def __enter__(self) -> RotatingRawLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, direction: Direction, line: bytes) -> str:
        if direction == "incoming" and self.replaying is not None and self.replaying():
            return RawEventId(f"raw_{self.session_id}_{self.sequence}")
        self.sequence += 1
        raw_id = RawEventId(f"raw_{self.session_id}_{self.sequence}")
        if self.failed is not None:
            return raw_id  # numbered as ever, so the canonical events do not change
        payload: Any
        try:
            envelope = _envelope.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            kind: MessageKind = "error"
            method: str | None = None
            rpc_id: str | int | None = None
            text = bytes(line[:UNPARSED_HEAD_CHARS]).decode("utf-8", "replace")
            payload = {"unparsed": redact_text(text), "length": len(line)}
        else:
            kind, method, rpc_id = classify(envelope)
            # Clean lines (the common case: text deltas) are stored unparsed.
            payload = redact(msgspec.json.decode(line)) if suspect(line) else msgspec.Raw(line)
        event = RawProviderEvent(
            id=raw_id,
            provider=self.provider,
            provider_session_id=self.session_id,
            sequence=self.sequence,
            direction=direction,
            message_kind=kind,
            method=method,
            json_rpc_id=rpc_id,
            payload=payload,
            observed_at=self._observed_at(),
        )
        self._write(self._encoder.encode(event) + b"\n")
        return raw_id

    def _observed_at(self) -> str:
        if self._clock is not None:
            return iso(self._clock())
        second, ms = divmod(time.time_ns() // 1_000_000, 1000)
        if second != self._stamp_second:
            # iso's text up to its milliseconds: "2026-12-02T05:30:01" of ".000Z".
            start = iso(datetime.fromtimestamp(second, UTC))
            self._stamp_second, self._stamp_prefix = second, start[: -len(".000Z")]
        return f"{self._stamp_prefix}.{ms:03d}Z"

    def _write(self, data: bytes) -> None:
        try:
            if self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            if self._file is None:
                return
            self._file.write(data)
            self._size += len(data)
            now = time.monotonic()
            if now - self._last_flush >= self._flush_interval:
                self._file.flush()
                self._last_flush = now
        except OSError as exc:
            self._fail(exc)

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.backup_count > 0:
            for index in range(self.backup_count - 1, 0, -1):
                older = self._rotated(index)
                if older.exists():
                    os.replace(older, self._rotated(index + 1))
            os.replace(self.path, self._rotated(1))
        self._file = open_log_file(self.path, "wb")
        self._size = 0

    def stderr(self, chunk: bytes) -> None:
        """More of the provider's stderr: complete lines are redacted and written now."""
        if self.failed is not None:
            return
        data = self._stderr_partial + chunk
        complete, newline, self._stderr_partial = data.rpartition(b"\n")
        if len(self._stderr_partial) > UNPARSED_HEAD_CHARS:
            # A line that never ends is written in pieces, not held without bound.
            complete, newline, self._stderr_partial = data, b"\n", b""
        if not newline:
            return
        self._write_stderr(redact_stderr(complete + b"\n").encode())

    def _write_stderr(self, data: bytes) -> None:
        try:
            if self._stderr_file is None:
                self._stderr_file = open_log_file(self.stderr_path, "ab")
                self._stderr_size = self._stderr_file.tell()
            if self._stderr_size and self._stderr_size + len(data) > self.max_bytes:
                self._stderr_file.close()
                os.replace(
                    self.stderr_path, self.stderr_path.with_name(self.stderr_path.name + ".1")
                )
                self._stderr_file = open_log_file(self.stderr_path, "wb")
                self._stderr_size = 0
            self._stderr_file.write(data)
            # Little and rare, and read live by ``t3orch logs -f``: unbuffered.
            self._stderr_file.flush()
            self._stderr_size += len(data)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        """The files cannot be written: say so once, stop writing, keep the daemon running."""
        if self.failed is not None:
            return
        why = exc.strerror or str(exc)
        self.failed = (
            f"raw log {self.directory}/{self.session_id}.*: cannot write ({why}); "
            "this session's frames and stderr are no longer kept"
        )
        log.warning("%s", self.failed)
        for file in (self._file, self._stderr_file):
            if file is not None:
                # Closing flushes what is buffered, which fails the same way.
                with contextlib.suppress(OSError):
                    file.close()
        self._file = self._stderr_file = None
        if self.on_failure is not None:
            self.on_failure(self.failed)

    def _rotated(self, index: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{index}")

    def files(self) -> list[Path]:
        """The session's files, oldest first."""
        rotated = [self._rotated(i) for i in range(self.backup_count, 0, -1)]
        return [p for p in rotated if p.exists()] + [self.path]

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as exc:
                self._fail(exc)
            self._last_flush = time.monotonic()

    def close(self) -> None:
        if self._stderr_partial and self.failed is None:
            self._stderr_partial, rest = b"", self._stderr_partial
            self.stderr(rest + b"\n")
        self.flush()
        for file in (self._file, self._stderr_file):
            if file is not None:
                with contextlib.suppress(OSError):
                    file.close()
        self._file = self._stderr_file = None


def read_raw_log(path: str | Path) -> list[RawProviderEvent]:
    """The records of one raw log file (for tests and tooling)."""
    decoder = msgspec.json.Decoder(RawProviderEvent)
    data = Path(path).read_bytes()
    return [decoder.decode(line) for line in data.splitlines() if line.strip()]


class _Sequence(msgspec.Struct):
    sequence: int = 0


def _last_sequence(path: Path, backup_count: int) -> int:
    candidates = [path] + [path.with_name(f"{path.name}.{i}") for i in range(1, backup_count + 1)]
    for candidate in candidates:
        last = _last_line(candidate)
        if last:
            try:
                return msgspec.json.decode(last, type=_Sequence).sequence
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # a torn last line (crash mid-write): try an older file
    return 0


def _last_line(path: Path, chunk: int = 64 * 1024) -> bytes:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            end = file.tell()
            file.seek(max(0, end - chunk))
            lines = [line for line in file.read().splitlines() if line.strip()]
    except OSError:  # none yet, or unreadable (then it cannot be written either)
        return b""
    return lines[-1] if lines else b""


__all__ = [
    "REDACTED",
    "RotatingRawLog",
    "classify",
    "open_log_file",
    "read_raw_log",
    "redact",
    "redact_stderr",
    "redact_text",
    "sensitive_key",
]
