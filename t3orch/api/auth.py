"""The API token: 32 random bytes, hex, in a 0600 file in the state dir.

WebSocket clients present it as ``Authorization: Bearer <token>`` on the
handshake. A header, not a first ``auth`` frame: a web page cannot set headers
on a WebSocket, so a browser tab on this machine cannot drive the daemon even
though the port is on loopback. The Unix socket needs no token: its 0600 file
mode (in a 0700 state dir) already limits it to this user.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

TOKEN_FILE = "api-token"


class TokenError(Exception):
    """The token file cannot be read, created or trusted."""


def load_or_create_token(state_dir: Path) -> str:
    path = state_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise TokenError(f"cannot create {path}: {exc.strerror}") from None
    token = secrets.token_hex(32)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        raise TokenError(f"cannot write {path}: {exc.strerror}") from None
    return token


def _read(path: Path) -> str:
    try:
        st = path.stat()
        text = path.read_text().strip()
    except OSError as exc:
        raise TokenError(f"cannot read {path}: {exc.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        # Anyone else who could read it could drive the daemon: refuse, do not guess.
        raise TokenError(
            f"{path} is readable by other users (mode {stat.S_IMODE(st.st_mode):04o}); "
            "chmod 600 it or delete it to have a new token made"
        )
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise TokenError(f"{path} does not hold a t3orch token (64 hex digits)")
    return text


def read_token(state_dir: Path) -> str:
    """For clients: the token of the daemon serving ``state_dir``."""
    return _read(state_dir / TOKEN_FILE)


def bearer_matches(headers: Iterable[tuple[bytes, bytes]], token: str) -> bool:
    expected = f"Bearer {token}".encode()
    for name, value in headers:
        if name.lower() == b"authorization":
            # Constant-time: the comparison must not leak how much of a guess was right.
            return hmac.compare_digest(value.strip(), expected)
    return False
