"""A real PostgreSQL server for the tests: Debian's binaries, a temp dir, loopback only.

``pg_server`` (session-scoped) runs ``initdb`` + ``pg_ctl start`` in a temp dir,
listening on 127.0.0.1 on a free port with its socket in that dir, and stops it at
the end; the system's postgres service is never used. As root (CI), initdb and
postgres refuse to run, so both run as the ``postgres`` system user the Debian
package creates (``runuser``), with the temp dir handed to it. Without the
binaries the tests that need it skip with the reason (``scripts/test`` installs
``postgresql`` where it can, so CI never skips).

``pg_url`` is a fresh, empty database of that server for one test.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

#: Test servers trade durability for speed: the tests kill clients, never the server.
_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "64MB",
}


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL's binaries (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.define
class PgServer:
    bindir: Path
    root: Path
    port: int
    #: Run server binaries as this user (root cannot run them), or as ourselves.
    user: str | None
    _names: Iterator[int] = attrs.field(factory=itertools.count)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://t3orch@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        done = self._run(
            "initdb", "-D", str(self.data), "-U", "t3orch", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
        options = " ".join(
            [f"-c listen_addresses=127.0.0.1 -p {self.port}"]
            + [f"-c unix_socket_directories={self.root}"]
            + [f"-c {k}={v}" for k, v in _SETTINGS.items()]
        )
        done = self._run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
            "-l", str(self.root / "server.log"), "-o", options,
        )  # fmt: skip
        if done.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")

    def create_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"t{next(self._names)}_{os.getpid()}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)


def start_server() -> PgServer | str:
    """A running server, or why there is none (the reason to skip)."""
    bindir = find_bindir()
    if bindir is None:
        return "PostgreSQL is not installed (no initdb; scripts/test installs postgresql)"
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        user = "postgres"
    # In /tmp when the server runs as another user: $TMPDIR may sit in root's home,
    # which postgres cannot enter (and the socket path must stay short).
    root = Path(tempfile.mkdtemp(prefix="t3orch-pg-", dir="/tmp" if user else None))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PgServer(bindir, root, _free_port(), user)
    try:
        server.start()
    except BaseException:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    started = start_server()
    if isinstance(started, str):
        pytest.skip(started)
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(started.root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty database for one test."""
    return pg_server.create_database()
