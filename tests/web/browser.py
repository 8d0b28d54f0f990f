"""Debian's headless Chromium through its chromedriver, and a daemon the page talks to.

Selenium is pointed at ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``
explicitly, so Selenium Manager never looks for (or downloads) a browser.
``scripts/test`` installs both packages where they are missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.daemon.support import REPO, Served, serve

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

needs_chromium = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="Debian's chromium and chromium-driver are not installed (scripts/test installs them)",
)

T = TypeVar("T")


def artifacts_dir() -> Path:
    root = os.environ.get("T3ORCH_ARTIFACTS") or os.path.join(tempfile.gettempdir(), "t3orch-web")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def chromium(width: int = 1200, height: int = 900) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="t3web-chrome-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(fn: Callable[[], T | None], within: float = 20.0, what: str = "") -> T:
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
        except Exception as exc:  # a stale element while the page re-renders
            last = exc
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or fn}: {last!r}")


def console_errors(driver: Any, allow: tuple[str, ...] = ()) -> list[str]:
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and not any(a in e["message"] for a in allow)
    ]


def login_url(state_dir: Path) -> str:
    """What `t3orch web` prints."""
    out = subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", "web", "--state-dir", str(state_dir)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.strip().splitlines()[0]


@contextmanager
def daemon(state_dir: Path, config: Path) -> Iterator[Served]:
    with serve(state_dir, config) as served:
        served.wait_notify("READY=1")
        yield served


def stop(served: Served) -> None:
    served.proc.terminate()
    served.proc.wait(timeout=30)
