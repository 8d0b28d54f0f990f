"""Plain HTTP on the WebSocket port: the page, its static files, and the login redirect.

One request per connection (``Connection: close``), GET and HEAD only, a bounded
request head. Every response forbids framing and sniffing, sets a CSP that lets
the page talk only to its own origin, and carries no CORS header: a page from
another origin can neither embed nor read anything here.
"""

from __future__ import annotations

import importlib.resources
import logging
from urllib.parse import parse_qs, urlsplit

import trio

from t3orch.web.session import WebAuth

log = logging.getLogger(__name__)

#: A request head (request line and headers) longer than this is refused.
MAX_HEAD_BYTES = 16 * 1024

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def _static_files() -> dict[str, bytes]:
    root = importlib.resources.files("t3orch.web") / "static"
    return {
        entry.name: entry.read_bytes()
        for entry in root.iterdir()
        if entry.is_file() and any(entry.name.endswith(ext) for ext in _TYPES)
    }


class Request:
    def __init__(self, method: str, target: str, headers: list[tuple[bytes, bytes]]) -> None:
        self.method = method
        self.target = target
        self.headers = headers


def parse_head(head: bytes) -> Request | None:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return None
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            return None
        headers.append((name.strip(), value.strip()))
    return Request(parts[0].decode("latin-1"), parts[1].decode("latin-1"), headers)


class PageServer:
    def __init__(self, web: WebAuth) -> None:
        self.web = web
        self.files = _static_files()

    async def handle(self, stream: trio.SocketStream) -> None:
        """Answers the one request waiting on ``stream`` (its head is unread)."""
        head = await _read_head(stream)
        request = parse_head(head) if head is not None else None
        if request is None:
            await _send(stream, 400, "text/plain", b"bad request\n")
            return
        status, ctype, body, extra = self.route(request)
        if request.method == "HEAD":
            body = b""
        await _send(stream, status, ctype, body, extra, self._csp())

    def _csp(self) -> str:
        return (
            "default-src 'self'; img-src 'self' data:; "
            f"connect-src 'self' ws://{self.web.origin.removeprefix('http://')}; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
        )

    def route(self, req: Request) -> tuple[int, str, bytes, list[str]]:
        text = "text/plain; charset=utf-8"
        if not self.web.host_ok(req.headers):
            return 421, text, b"unknown Host: use the URL `t3orch web` prints\n", []
        if not self.web.origin_ok(req.headers):
            return 403, text, b"cross-origin requests are refused\n", []
        if req.method not in ("GET", "HEAD"):
            return 405, text, b"only GET\n", ["Allow: GET, HEAD"]
        url = urlsplit(req.target)
        if url.path == "/login":
            code = parse_qs(url.query).get("code", [""])[0]
            cookie = self.web.redeem(code)
            if cookie is None:
                expired = self.files.get("expired.html", b"login code expired or already used\n")
                return 403, _TYPES[".html"], expired, []
            return 303, text, b"", ["Location: /", f"Set-Cookie: {self.web.set_cookie(cookie)}"]
        name = "index.html" if url.path in ("/", "/index.html") else url.path.removeprefix("/")
        body = self.files.get(name) if "/" not in name else None
        if body is None:
            return 404, text, b"not found\n", []
        ctype = next(t for ext, t in _TYPES.items() if name.endswith(ext))
        return 200, ctype, body, []


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            return None
        try:
            data = await stream.receive_some(4096)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        if not data:
            return None
        buf += data
    return bytes(buf[: buf.index(b"\r\n\r\n")])


_REASONS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    421: "Misdirected Request",
}


async def _send(
    stream: trio.SocketStream,
    status: int,
    ctype: str,
    body: bytes,
    extra: list[str] | None = None,
    csp: str | None = None,
) -> None:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {ctype}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "X-Content-Type-Options: nosniff",
        "X-Frame-Options: DENY",
        "Referrer-Policy: no-referrer",
        "Cross-Origin-Resource-Policy: same-origin",
        "Connection: close",
        *([f"Content-Security-Policy: {csp}"] if csp else []),
        *(extra or []),
    ]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
