"""Browser auth: one-time login codes, the session cookie, and the Origin check.

``t3orch web`` asks the daemon (over the 0600 Unix socket) for a login code and
prints ``http://127.0.0.1:<port>/login?code=…``. Visiting it once, within
:data:`CODE_TTL_S`, sets an HttpOnly, SameSite=Strict cookie and redirects to a
clean URL. The cookie is ``<id>.<HMAC-SHA256(api token, id)>``: it needs no
state in the daemon, so it survives a daemon restart (the page reconnects by
cursor) and dies with the token (rotate ``api-token`` to log every browser out).

SameSite does not separate ports of one host (``127.0.0.1:8000`` is the same
*site* as the daemon), so the cookie alone would let a page served from another
local port open the API; every HTTP request and WebSocket handshake that carries
an ``Origin`` must carry the daemon's own, and the ``Host`` must be one of the
daemon's own names (a DNS-rebound name is refused). No CORS headers are ever sent.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterable
from http.cookies import CookieError, SimpleCookie

COOKIE_NAME = "t3orch_session"
#: A login code is good for one visit within this long.
CODE_TTL_S = 60.0
#: Codes outstanding at once; past it the oldest are dropped (each `t3orch web` makes one).
MAX_CODES = 64

Headers = Iterable[tuple[bytes, bytes]]


def header(headers: Headers, name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value.strip()
    return None


class WebAuth:
    def __init__(self, token: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = hashlib.sha256(b"t3orch-web-session\x00" + token.encode()).digest()
        self._clock = clock
        self._codes: dict[str, float] = {}
        #: ``host:port`` values a request may name in ``Host`` (set once bound).
        self.hosts: frozenset[str] = frozenset()
        self.port: int | None = None
        self.host = "127.0.0.1"

    def bound(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        names = {host, "127.0.0.1", "localhost", "[::1]"}
        if ":" in host and not host.startswith("["):
            names.add(f"[{host}]")
        self.hosts = frozenset(f"{name}:{port}" for name in names)

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- login codes ----------------------------------------------------------------

    def issue_code(self) -> str:
        now = self._clock()
        self._codes = {c: t for c, t in self._codes.items() if t > now}
        while len(self._codes) >= MAX_CODES:
            del self._codes[next(iter(self._codes))]
        code = secrets.token_urlsafe(24)
        self._codes[code] = now + CODE_TTL_S
        return code

    def redeem(self, code: str) -> str | None:
        """The cookie value for a good code (which is then spent), else None."""
        expires = self._codes.pop(code, None)
        if expires is None or expires <= self._clock():
            return None
        return self._sign(secrets.token_hex(16))

    # -- the cookie -----------------------------------------------------------------

    def _sign(self, session_id: str) -> str:
        mac = hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()
        return f"{session_id}.{mac}"

    def cookie_valid(self, headers: Headers) -> bool:
        raw = header(headers, b"cookie")
        if raw is None:
            return False
        try:
            jar = SimpleCookie(raw.decode("latin-1"))
        except CookieError:
            return False
        morsel = jar.get(COOKIE_NAME)
        if morsel is None:
            return False
        session_id, _, _mac = morsel.value.partition(".")
        return bool(session_id) and hmac.compare_digest(self._sign(session_id), morsel.value)

    def set_cookie(self, value: str) -> str:
        return f"{COOKIE_NAME}={value}; Path=/; HttpOnly; SameSite=Strict"

    # -- where a request comes from -------------------------------------------------

    def host_ok(self, headers: Headers) -> bool:
        host = header(headers, b"host")
        return host is not None and host.decode("latin-1").lower() in self.hosts

    def origin_ok(self, headers: Headers) -> bool:
        """No ``Origin`` (not a browser: a token is still needed), or the daemon's own."""
        origin = header(headers, b"origin")
        if origin is None:
            return True
        host = header(headers, b"host")
        return (
            host is not None
            and self.host_ok(headers)
            and origin.decode("latin-1").lower() == "http://" + host.decode("latin-1").lower()
        )

    def browser_ok(self, headers: Headers) -> bool:
        """A cookie counts only from a browser on the daemon's own origin."""
        return header(headers, b"origin") is not None and self.origin_ok(headers)
