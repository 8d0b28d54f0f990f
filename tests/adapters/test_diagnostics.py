"""The shared raw-frame log: records, classification, redaction, rotation, restart."""

from __future__ import annotations

import errno
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import diagnostics
from adapters.diagnostics import (
    REDACTED,
    RotatingRawLog,
    read_raw_log,
    redact,
    redact_text,
    sensitive_key,
)
from adapters.replay import replay_events
from t3orch.clock import iso

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "codex"
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def open_log(tmp_path: Path, **kwargs: object) -> RotatingRawLog:
    return RotatingRawLog(tmp_path / "raw", "codex", "pss_test", clock=lambda: NOW, **kwargs)  # type: ignore[arg-type]


def records(log: RotatingRawLog) -> list[dict[str, object]]:
    log.flush()
    return [
        json.loads(line)
        for path in log.files()
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_record_fields_follow_the_seed(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        first = log.record("outgoing", b'{"id":1,"method":"initialize","params":{}}')
        second = log.record("incoming", b'{"id":1,"result":{"userAgent":"x"}}')
        (one, two) = records(log)
    assert first != second and first.startswith("raw_")
    assert one == {
        "id": first,
        "provider": "codex",
        "providerSessionId": "pss_test",
        "sequence": 1,
        "direction": "outgoing",
        "messageKind": "request",
        "method": "initialize",
        "jsonRpcId": 1,
        "payload": {"id": 1, "method": "initialize", "params": {}},
        "observedAt": "2026-11-30T12:00:00.000Z",
    }
    assert (two["sequence"], two["messageKind"], two["direction"]) == (2, "response", "incoming")


@pytest.mark.parametrize(
    ("line", "kind", "method", "rpc_id"),
    [
        (
            b'{"method":"turn/started","params":{},"emittedAtMs":1}',
            "notification",
            "turn/started",
            None,
        ),
        (b'{"id":0,"method":"item/tool/call","params":{}}', "request", "item/tool/call", 0),
        (b'{"id":"a","error":{"code":-1,"message":"m"}}', "error", None, "a"),
        (
            b'{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool"}}',
            "request",
            "can_use_tool",
            "r1",
        ),
        (
            b'{"type":"control_response","response":{"subtype":"success","request_id":"r1"}}',
            "response",
            None,
            "r1",
        ),
        (b'{"type":"assistant","message":{}}', "notification", "assistant", None),
        (b"not json at all", "error", None, None),
    ],
)
def test_classification(
    tmp_path: Path, line: bytes, kind: str, method: str | None, rpc_id: object
) -> None:
    with open_log(tmp_path) as log:
        log.record("incoming", line)
        (record,) = records(log)
    assert (record["messageKind"], record["method"], record["jsonRpcId"]) == (kind, method, rpc_id)


def test_secrets_are_redacted_at_any_depth(tmp_path: Path) -> None:
    frame = {
        "id": 3,
        "method": "thread/start",
        "params": {
            "config": {
                "model_providers": {"mock": {"env_key": "MOCK_API_KEY", "api_key": "sk-live-1"}}
            },
            "headers": {"Authorization": "Bearer sk-abc.def", "x-api-key": "k"},
            "env": {"OPENAI_API_KEY": "sk-2", "PATH": "/usr/bin"},
            "auth": {
                "accessToken": "at",
                "refresh_token": "rt",
                "password": "pw",
                "clientSecret": "cs",
            },
            "note": "ran with Bearer abc123 and ANTHROPIC_API_KEY=sk-3 set",
            "tokenUsage": {"inputTokens": 5, "totalTokens": 7},
            "list": [{"token": "t"}],
        },
    }
    with open_log(tmp_path) as log:
        log.record("outgoing", json.dumps(frame).encode())
        (record,) = records(log)
    text = json.dumps(record)
    for secret in (
        "sk-live-1",
        "sk-abc",
        "sk-2",
        "sk-3",
        '"at"',
        '"rt"',
        '"pw"',
        '"cs"',
        "abc123",
        '"t"',
    ):
        assert secret not in text, secret
    params = record["payload"]["params"]  # type: ignore[index]
    assert params["env"] == {"OPENAI_API_KEY": REDACTED, "PATH": "/usr/bin"}
    assert params["config"]["model_providers"]["mock"]["env_key"] == "MOCK_API_KEY"
    assert params["tokenUsage"] == {"inputTokens": 5, "totalTokens": 7}


def test_malformed_lines_are_redacted_too(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.record("incoming", b"oops Authorization: Bearer sekrit {{{")
        (record,) = records(log)
    assert record["messageKind"] == "error"
    assert "sekrit" not in json.dumps(record)


def test_redaction_helpers() -> None:
    assert sensitive_key("apiKey") and sensitive_key("OPENAI_API_KEY") and sensitive_key("idToken")
    assert not sensitive_key("inputTokens") and not sensitive_key("tokenUsage")
    assert not sensitive_key("env_key")
    assert redact_text("Authorization: Bearer x.y") == f"Authorization: Bearer {REDACTED}"
    assert redact_text("export MY_SECRET='hush'") == f"export MY_SECRET='{REDACTED}'"
    assert redact({"a": [{"password": 1}]}) == {"a": [{"password": 1}]}  # numbers are no secret


def test_rotation_is_bounded(tmp_path: Path) -> None:
    line = (
        b'{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"'
        + b"x" * 200
        + b'"}}'
    )
    with open_log(tmp_path, max_bytes=2000, backup_count=2) as log:
        for _ in range(100):
            log.record("incoming", line)
        files = log.files()
        kept = records(log)
    assert [p.name for p in files] == ["pss_test.jsonl.2", "pss_test.jsonl.1", "pss_test.jsonl"]
    assert all(p.stat().st_size <= 2000 for p in files)
    sequences = [r["sequence"] for r in kept]
    assert sequences == sorted(sequences) and sequences[-1] == 100
    assert len(list((tmp_path / "raw").iterdir())) == 3


def test_sequence_continues_after_a_restart(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.record("incoming", b'{"method":"a"}')
        log.record("incoming", b'{"method":"b"}')
    with open_log(tmp_path) as log:
        raw_id = log.record("incoming", b'{"method":"c"}')
        assert [r["sequence"] for r in records(log)] == [1, 2, 3]
    assert raw_id.endswith("_3")


def test_bad_session_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        RotatingRawLog(tmp_path, "codex", "../escape")


async def test_replay_writes_both_directions_and_events_point_at_them(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        with trio.fail_after(30):
            events = await replay_events("codex", FIXTURES / "approval_accept.ndjson", raw=log)
        log.close()
        stored = read_raw_log(log.path)
    ids = {r.id for r in stored}
    assert {r.direction for r in stored} == {"incoming", "outgoing"}
    assert all(e.raw_event_id in ids for e in events if e.raw_event_id is not None)
    answer = [r for r in stored if r.direction == "outgoing" and r.message_kind == "response"]
    assert len(answer) == 1 and answer[0].payload == {"id": 0, "result": {"decision": "accept"}}


def test_suspect_prefilter_skips_usage_counters_but_not_credentials() -> None:
    from adapters.diagnostics import suspect

    assert not suspect(b'{"method":"item/completed","params":{"contentTokenCount":12}}')
    assert not suspect(b'{"usage":{"inputTokens":3,"outputTokens":4}}')
    assert suspect(b'{"params":{"accessToken":"abc"}}')
    assert suspect(b'{"env":"GITHUB_TOKEN=abc"}')
    assert suspect(b'{"headers":{"Authorization":"Bearer abc"}}')


# Key names and how ``sensitive_key`` judges them: the pre-filter must agree exactly.
KEYS = [
    "accessToken",
    "access_token",
    "token",
    "refreshToken",
    "apiKey",
    "api_key",
    "x-api-key",
    "OPENAI_API_KEY",
    "clientSecret",
    "password",
    "passwd",
    "db_password",
    "Authorization",
    "proxy-authorization",
    "Cookie",
    "Set-Cookie",
    "contentTokenCount",
    "tokenUsage",
    "inputTokens",
    "maxOutputTokens",
    "tokenizer",
    "keyboard",
    "passage",
    "cookieJar",
    "secretsManager",
    "text",
]


@pytest.mark.parametrize("key", KEYS)
def test_suspect_flags_exactly_the_keys_that_name_a_credential(key: str) -> None:
    from adapters.diagnostics import suspect

    line = json.dumps({"params": {"item": [{key: "value"}]}}, separators=(",", ":")).encode()
    assert suspect(line) == sensitive_key(key)
    spaced = json.dumps({"params": {key: "value"}}).encode()  # ": " after the key
    assert suspect(spaced) == sensitive_key(key)
    # Words of credential keys in text, before and after the key, change nothing.
    for params in ({"delta": "the key to pass a token", key: "v"}, {key: "v", "delta": "passes"}):
        assert suspect(json.dumps({"params": params}).encode()) == sensitive_key(key)


TEXTS = [
    "plain words",
    "GITHUB_TOKEN=ghp_abc",
    "export OPENAI_API_KEY='sk-1'",
    "DB_PASSWORD: hunter2",
    "Authorization: Bearer abc.def",
    "bearer\tabc",
    "the secret password is in the cookie jar",
    "contentTokenCount tokenUsage inputTokens",
    "a key=value pair",
    'quoted "token": inside text',
]


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.sampled_from(TEXTS) | st.integers() | st.none(),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_a_line_the_prefilter_passes_has_nothing_to_redact(value: object) -> None:
    from adapters.diagnostics import suspect

    for line in (json.dumps(value).encode(), json.dumps(value, separators=(",", ":")).encode()):
        if not suspect(line):
            assert redact(json.loads(line)) == json.loads(line)


def test_a_large_completed_item_is_stored_as_is_and_its_secrets_still_redacted(
    tmp_path: Path,
) -> None:
    from adapters.diagnostics import suspect

    prose = "the secret password for the cookie, " * 3000  # words, not credentials
    item = {"type": "agentMessage", "id": "msg_1", "text": prose}
    params = {"threadId": "t", "turnId": "u", "item": item, "contentTokenCount": 5}
    clean = json.dumps({"method": "item/completed", "params": params}).encode()
    assert not suspect(clean)
    leaked = json.dumps(
        {"method": "item/completed", "params": {**params, "item": {**item, "apiKey": "sk-1"}}}
    ).encode()
    env = clean.replace(b"the secret", b"GITHUB_TOKEN=ghp_1 the secret", 1)
    with open_log(tmp_path) as log:
        for line in (clean, leaked, env):
            log.record("incoming", line)
        clean_rec, leaked_rec, env_rec = records(log)
    assert clean_rec["payload"] == json.loads(clean)
    assert leaked_rec["payload"]["params"]["item"]["apiKey"] == REDACTED
    assert "ghp_1" not in json.dumps(env_rec["payload"])


class _FullDisk:
    """A file on a full disk: every write fails with ENOSPC."""

    def __init__(self) -> None:
        self.closed = False

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def test_a_full_disk_is_said_once_and_frames_keep_their_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("adapters.diagnostics.open_log_file", lambda path, mode: _FullDisk())
    told: list[str] = []
    log = open_log(tmp_path)
    log.on_failure = told.append
    ids = [log.record("incoming", b'{"method":"x","params":{}}') for _ in range(3)]
    log.stderr(b"a line\n")
    log.flush()
    log.close()
    assert ids == [f"raw_pss_test_{n}" for n in (1, 2, 3)]
    assert len(told) == 1 and "No space left on device" in told[0]
    assert log.failed == told[0]
    warned = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"


def test_a_disk_that_fills_later_keeps_what_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_log(tmp_path, flush_interval_s=0) as log:
        log.record("incoming", b'{"method":"first","params":{}}')
        monkeypatch.setattr("adapters.diagnostics.open_log_file", lambda path, mode: _FullDisk())
        assert log._file is not None
        log._file.close()
        log._file = _FullDisk()  # type: ignore[assignment]  # the disk is full from here
        log.record("incoming", b'{"method":"second","params":{}}')
        assert log.failed is not None
        third = log.record("incoming", b'{"method":"third","params":{}}')
    assert third.endswith("_3")
    assert [r.method for r in read_raw_log(log.path)] == ["first"]


def test_stderr_goes_beside_the_frames_redacted_line_by_line(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.stderr(b"starting\nOPENAI_API_KEY=sk-se")
        log.stderr(b"cret1234\nAuthorization: Bearer abc.def\nno newline at the end\n")
        # Codex colours its tracing fields: the colours go, or they would hide the name.
        log.stderr(b"\x1b[3mGITHUB_TOKEN\x1b[0m\x1b[2m=\x1b[0mghp_abc rest\n")
        log.stderr(b"no newline at the end")
    text = log.stderr_path.read_text()
    assert text == (
        "starting\nOPENAI_API_KEY=[REDACTED]\nAuthorization: Bearer [REDACTED]\n"
        "no newline at the end\nGITHUB_TOKEN=[REDACTED] rest\nno newline at the end\n"
    )
    assert "sk-secret" not in text and "ghp_abc" not in text


def test_a_raw_dir_that_cannot_be_made_is_a_failure_said_not_raised(tmp_path: Path) -> None:
    (tmp_path / "raw").write_text("a file where the directory should be")
    log = open_log(tmp_path)
    assert log.failed is not None and "cannot write" in log.failed
    assert log.record("incoming", b"{}") == "raw_pss_test_1"
    log.stderr(b"x\n")
    log.close()


def test_observed_at_formats_each_second_once_and_each_line_its_milliseconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the system clock, a line's stamp costs its milliseconds only (issue 17: the
    date and time of day were formatted per line, the raw log's largest cost)."""
    start = int(datetime(2026, 12, 2, 5, 59, 58, tzinfo=UTC).timestamp()) * 1000
    times = [start + 7 * i for i in range(430)]  # 3.01 s: 4 seconds, 430 milliseconds
    now = iter(times)
    monkeypatch.setattr(diagnostics.time, "time_ns", lambda: next(now) * 1_000_000)
    formatted: list[datetime] = []

    def counted(moment: datetime) -> str:
        formatted.append(moment)
        return iso(moment)

    monkeypatch.setattr(diagnostics, "iso", counted)
    with RotatingRawLog(tmp_path / "raw", "codex", "pss_test") as log:
        for i in range(len(times)):
            log.record("incoming", b'{"method":"item/agentMessage/delta","params":{"n":%d}}' % i)
        stamps = [r["observedAt"] for r in records(log)]
    assert len(formatted) == 4
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert stamps == [iso(epoch + timedelta(milliseconds=ms)) for ms in times]
