"""The web page's figures, in headless Chromium against a real `t3orch serve` (printed).

``python -m bench.web``:

* **thread list**: 200 threads in the store; the time from navigation start to the
  list on screen (``performance.mark`` after the first render with the snapshot),
  median and max over 5 loads.
* **event → screen**: a thread of 10,000 turn items open (the page holds the newest
  window, 200); stand-in runs queued on it commit messages, runs and deltas. For
  each event, the time from its arrival at a Python WebSocket client subscribed to
  the same thread (≈ its commit) to the page's next frame after applying it
  (wall clock on one machine), p50 / p99.

Needs Debian's chromium and chromium-driver, and selenium (the test extra).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio_websocket

from bench.store import build_detail_thread
from t3orch.state import prepare_state_dir
from tests.daemon.support import rpc
from tests.web.browser import chromium, daemon, free_port, login_url, wait_for


def by_css(driver: Any, css: str) -> list[Any]:
    return list(driver.find_elements("css selector", css))


def thread_list(root: Path) -> dict[str, float]:
    port = free_port()
    config = root / "list.toml"
    config.write_text(f"[daemon]\napi_port = {port}\n")
    state = root / "list-state"
    (root / "work").mkdir(exist_ok=True)
    loads: list[float] = []
    with daemon(state, config), chromium() as driver:
        for n in range(200):
            rpc(
                state,
                "thread.create",
                {"commandId": f"bench-{n}", "provider": "standin", "cwd": str(root / "work")},
            )
        driver.get(login_url(state))
        wait_for(lambda: by_css(driver, "body[data-threads-shown='200']"), what="200 threads")
        for _ in range(5):
            driver.get(f"http://127.0.0.1:{port}/?reload={time.monotonic_ns()}#/")
            wait_for(lambda: by_css(driver, "body[data-threads-shown='200']"), what="the list")
            loads.append(
                driver.execute_script(
                    "return performance.getEntriesByName('threads-shown')[0].startTime"
                )
            )
    return {"median_ms": statistics.median(loads), "max_ms": max(loads)}


async def _arrivals(port: int, token: str, thread_id: str, out: dict[int, float]) -> None:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{port}/", extra_headers=headers
    ) as ws:
        await ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "subscribe",
                    "params": {"topic": "threadDetail", "threadId": thread_id},
                }
            )
        )
        while True:
            try:
                msg = json.loads(await ws.get_message())
            except trio_websocket.ConnectionClosed:
                return  # the daemon stopped: the figures are in
            if msg.get("method") == "event":
                out.setdefault(msg["params"]["sequence"], time.time() * 1e3)


def event_to_screen(root: Path, items: int = 10_000, runs: int = 25) -> dict[str, float]:
    import threading

    port = free_port()
    config = root / "detail.toml"
    config.write_text(f"[daemon]\napi_port = {port}\n")
    state = root / "detail-state"
    db = prepare_state_dir(state, create=True)
    thread_id, _ = trio.run(build_detail_thread, db, items, 200, 50, "NORMAL")
    arrived: dict[int, float] = {}
    with daemon(state, config), chromium() as driver:
        token = (state / "api-token").read_text().strip()
        driver.get(login_url(state))
        wait_for(lambda: by_css(driver, "body[data-conn=live]"), what="live")
        driver.get(f"http://127.0.0.1:{port}/#/thread/{thread_id}")
        wait_for(lambda: len(by_css(driver, "#runs .item")) >= 100, within=60, what="the thread")
        driver.execute_script("window.__t3shown = []")
        listener = threading.Thread(
            target=lambda: trio.run(_arrivals, port, token, thread_id, arrived), daemon=True
        )
        listener.start()
        time.sleep(0.5)
        for n in range(runs):
            rpc(
                state,
                "run.send",
                {"commandId": f"bench-send-{n}", "threadId": thread_id, "text": f"go {n}"},
            )

        def settled() -> bool:
            detail = rpc(state, "view.read", {"topic": "threadDetail", "threadId": thread_id})
            return all(r["status"] == "completed" for r in detail["data"]["runs"][-runs:])

        wait_for(settled, within=300, what="the runs")
        time.sleep(1.0)
        shown = {int(s): float(t) for s, t in driver.execute_script("return window.__t3shown")}
    lags = sorted(shown[s] - arrived[s] for s in shown if s in arrived)
    return {
        "events": len(lags),
        "p50_ms": lags[len(lags) // 2],
        "p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
        "items_on_screen": 200,
    }


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="t3bw-", dir="/tmp"))
    try:
        listed = thread_list(root)
        print(
            f"thread list, 200 threads: page load → list on screen "
            f"median {listed['median_ms']:.0f} ms, max {listed['max_ms']:.0f} ms (5 loads)"
        )
        lag = event_to_screen(root)
        print(
            f"thread of 10,000 items open: committed event → on screen "
            f"p50 {lag['p50_ms']:.1f} ms, p99 {lag['p99_ms']:.1f} ms ({lag['events']} events)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
