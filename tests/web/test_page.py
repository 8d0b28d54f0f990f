"""The web page in a real headless Chromium, against a real `t3orch serve`.

Logged in through the URL `t3orch web` prints; threads created, messages sent and
approvals answered by clicking, on the stand-in provider and on real Codex against
the loopback fake model; two tabs; a daemon restart the page must catch up with;
a page from another origin that must not get in. Screenshots go to
``$T3ORCH_ARTIFACTS`` (default ``$TMPDIR/t3orch-web``).
"""

from __future__ import annotations

import collections
import http.server
import itertools
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fixtures.fakes.codex_home import make_work_dir
from t3orch.cli.environment import config_toml, provider_environment
from t3orch.config import discover_codex
from tests.daemon.support import REPO, rpc
from tests.web.browser import (
    artifacts_dir,
    chromium,
    console_errors,
    daemon,
    free_port,
    login_url,
    needs_chromium,
    stop,
    wait_for,
)

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # The daemon's Unix socket path must stay under 107 bytes.
    d = Path(tempfile.mkdtemp(prefix="t3web-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def by_css(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def log_in(driver: Any, state_dir: Path, port: int) -> None:
    url = login_url(state_dir)
    assert url.startswith(f"http://127.0.0.1:{port}/login?code="), url
    driver.get(url)
    # Redirected to the clean URL, the code gone from the address bar.
    wait_for(lambda: driver.current_url == f"http://127.0.0.1:{port}/", what="the redirect")
    wait_for(lambda: by_css(driver, "body[data-conn=live]"), what="a live connection")


def create_thread(driver: Any, provider: str, cwd: Path, title: str) -> str:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    wait_for(lambda: by_css(driver, "#new-cwd"), what="the new-thread form")
    Select(by_css(driver, "#new-provider")[0]).select_by_value(provider)
    cwd_box = by_css(driver, "#new-cwd")[0]
    cwd_box.clear()
    cwd_box.send_keys(str(cwd))
    # Keyboard only: Enter in the form submits it.
    by_css(driver, "#new-title")[0].send_keys(title, Keys.ENTER)
    wait_for(lambda: "#/thread/" in driver.current_url, what="the thread view")
    thread_id = str(driver.current_url.rsplit("/", 1)[1])
    wait_for(lambda: by_css(driver, "#composer-text"), what="the composer")
    return thread_id


def send(driver: Any, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = by_css(driver, "#composer-text")[0]
    box.send_keys(text)
    box.send_keys(Keys.CONTROL, Keys.ENTER)


@contextmanager
def codex_page(short_tmp: Path) -> Iterator[tuple[Any, Path, Path]]:
    """A daemon with real Codex against the fake, and a browser logged in to it:
    (driver, state dir, work dir)."""
    port = free_port()
    work = make_work_dir(short_tmp / "work")
    state = short_tmp / "state"
    with provider_environment(work, short_tmp / "homes", ["codex"]) as (cfg, _):
        config = short_tmp / "t3orch.toml"
        config.write_text(f"[daemon]\napi_port = {port}\n" + config_toml(cfg))
        with daemon(state, config), chromium() as driver:
            log_in(driver, state, port)
            yield driver, state, work


def texts(driver: Any, kind: str) -> list[str]:
    return [str(e.text) for e in by_css(driver, f".item.{kind} .text")]


def assert_screen_matches_store(driver: Any, state_dir: Path, thread_id: str) -> None:
    """Every item the store holds is on screen exactly once, with the stored text.

    Compared until they agree (within 10 s): an item committed between the store read and
    the screen read is on screen a notification later, and a screen that never catches up
    fails with the difference."""
    deadline = time.monotonic() + 10
    while True:
        try:
            _screen_matches_store(driver, state_dir, thread_id)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _screen_matches_store(driver: Any, state_dir: Path, thread_id: str) -> None:
    detail = rpc(state_dir, "view.read", {"topic": "threadDetail", "threadId": thread_id})["data"]
    stored = {i["id"]: i for i in detail["visibleTurnItems"]}
    every = {i["id"]: i for i in detail["turnItems"]} | stored
    shown = driver.execute_script(
        "return [...document.querySelectorAll('#runs .item')]"
        ".filter((e) => !e.parentElement.closest('.children')).map((e) => e.dataset.item)"
    )
    dupes = [i for i, n in collections.Counter(shown).items() if n > 1]
    assert not dupes, f"items shown twice: {dupes}"
    assert set(shown) == set(stored), set(shown) ^ set(stored)
    # Nothing rendered from a missing value (outside the provider's own output).
    words = str(
        driver.execute_script(
            "const m = document.querySelector('main').cloneNode(true);"
            "m.querySelectorAll('pre').forEach((p) => p.remove()); return m.innerText"
        )
    ).split()
    assert not {"null", "undefined", "NaN", "[object"} & set(words), words
    for el in by_css(driver, ".item.assistant_message"):
        item = every[str(el.get_attribute("data-item"))]
        text = str(el.find_element("css selector", ".text").text)
        assert text.strip() == item["text"].strip(), (text, item["text"])


def test_log_in_create_a_standin_thread_and_see_the_streamed_reply(short_tmp: Path) -> None:
    port = free_port()
    config = short_tmp / "t3orch.toml"
    config.write_text(f'[daemon]\napi_port = {port}\nhost_name = "web-box"\n')
    work = short_tmp / "work"
    work.mkdir()
    state = short_tmp / "state"
    shots = artifacts_dir()
    with daemon(state, config), chromium() as driver:
        log_in(driver, state, port)
        thread_id = create_thread(driver, "standin", work, "web standin")
        send(driver, "hello")
        wait_for(
            lambda: any("ack: hello" in t for t in texts(driver, "assistant_message")),
            what="the stand-in's reply",
        )
        wait_for(lambda: by_css(driver, ".run .badge.completed"), what="the run completed")
        assert_screen_matches_store(driver, state, thread_id)
        assert texts(driver, "user_message") == ["hello"]
        driver.save_screenshot(str(shots / "thread-view.png"))
        # Keyboard reachable: Tab from the top visits every control of the view.
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        visited = set()
        for _ in range(20):
            ActionChains(driver).send_keys(Keys.TAB).perform()
            visited.add(driver.execute_script("return document.activeElement.id"))
        assert {"fork", "switch-provider", "switch", "composer-text", "send"} <= visited
        driver.get(f"http://127.0.0.1:{port}/#/")
        row = wait_for(lambda: by_css(driver, f"tr[data-thread='{thread_id}']"), what="list row")
        assert "standin" in row[0].text and "completed" in row[0].text
        wait_for(
            lambda: "tokens" in by_css(driver, f"tr[data-thread='{thread_id}']")[0].text,
            what="the thread's usage",
        )
        # The host that runs it (the fleet's view; a fleet of one here).
        assert "web-box" in by_css(driver, f"tr[data-thread='{thread_id}']")[0].text
        driver.save_screenshot(str(shots / "thread-list.png"))
        driver.get(f"http://127.0.0.1:{port}/#/sessions")
        session = wait_for(lambda: by_css(driver, "#sessions tr[data-session]"), what="sessions")
        assert "standin" in session[0].text
        # Phone width: nothing wider than the screen.
        driver.set_window_size(390, 844)
        driver.get(f"http://127.0.0.1:{port}/#/thread/{thread_id}")
        wait_for(lambda: texts(driver, "assistant_message"), what="the thread at phone width")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
        driver.save_screenshot(str(shots / "thread-view-phone.png"))
        assert console_errors(driver) == []
    print(f"screenshots in {shots}")


@pytest.mark.real_codex
@pytest.mark.skipif(discover_codex() is None, reason="codex not installed: scripts/install-codex")
def test_fork_and_switch_provider_buttons(short_tmp: Path) -> None:
    port = free_port()
    config = short_tmp / "t3orch.toml"
    config.write_text(f"[daemon]\napi_port = {port}\n")
    work = short_tmp / "work"
    work.mkdir()
    state = short_tmp / "state"
    with daemon(state, config), chromium() as driver:
        log_in(driver, state, port)
        source = create_thread(driver, "standin", work, "web source")
        send(driver, "hello")
        wait_for(lambda: by_css(driver, ".run .badge.completed"), what="the run completed")
        by_css(driver, "#fork")[0].click()
        wait_for(lambda: source not in driver.current_url, what="the fork's view")
        fork = str(driver.current_url.rsplit("/", 1)[1])
        # The fork shows what it inherited, then the marker naming its source.
        wait_for(lambda: by_css(driver, ".item.fork"), what="the fork marker")
        assert_screen_matches_store(driver, state, fork)
        # Once the execution graph is read, every item is placed again: still once each.
        wait_for(
            lambda: driver.execute_script("return document.body.dataset.graph") == fork,
            what="the fork's view rendered with its graph",
        )
        assert texts(driver, "user_message") == ["hello"]
        assert source in by_css(driver, ".item.fork")[0].text
        assert_screen_matches_store(driver, state, fork)
        # Switch the fork's later runs to another provider: the store says so.
        from selenium.webdriver.support.ui import Select

        Select(by_css(driver, "#switch-provider")[0]).select_by_value("codex")
        by_css(driver, "#switch")[0].click()
        wait_for(
            lambda: "Later runs use codex" in driver.find_element("css selector", ".composer").text,
            what="the switch confirmed",
        )
        shell = rpc(state, "view.read", {"topic": "threadShell"})["data"]["threads"]
        (entry,) = [e for e in shell if e["thread"]["id"] == fork]
        assert entry["thread"]["defaultProvider"] == "codex"
        assert console_errors(driver) == []


@pytest.mark.real_codex
@pytest.mark.skipif(discover_codex() is None, reason="codex not installed: scripts/install-codex")
def test_steer_and_interrupt_a_working_run(short_tmp: Path) -> None:
    with codex_page(short_tmp) as (driver, state, work):
        thread_id = create_thread(driver, "codex", work, "web steer")
        # A command that outlives the test: the run stays working until interrupted.
        send(driver, "RUN_SHELL: sleep 57")
        steer = wait_for(
            lambda: [b for b in by_css(driver, "#steer") if b.is_displayed()],
            within=60,
            what="a working run's steer button",
        )
        wait_for(lambda: by_css(driver, ".item.command_execution"), what="the command")
        by_css(driver, "#composer-text")[0].send_keys("and also this")
        steer[0].click()
        wait_for(
            lambda: "and also this" in texts(driver, "user_message"),
            what="the steering message",
        )
        by_css(driver, "#interrupt")[0].click()
        wait_for(lambda: by_css(driver, ".run .badge.interrupted"), within=30, what="interrupted")
        wait_for(lambda: not by_css(driver, "#interrupt")[0].is_displayed(), what="idle")
        detail = rpc(state, "view.read", {"topic": "threadDetail", "threadId": thread_id})
        assert [r["status"] for r in detail["data"]["runs"]] == ["interrupted"]
        assert_screen_matches_store(driver, state, thread_id)
        assert console_errors(driver) == []


@pytest.mark.real_codex
@pytest.mark.skipif(discover_codex() is None, reason="codex not installed: scripts/install-codex")
def test_real_codex_file_change_diff_and_text_streaming_in(short_tmp: Path) -> None:
    with codex_page(short_tmp) as (driver, state, work):
        thread_id = create_thread(driver, "codex", work, "web patch")
        send(driver, "PATCH: notes.txt hello-from-the-web")
        change = wait_for(
            lambda: by_css(driver, ".item.file_change"), within=60, what="the file change"
        )
        assert "notes.txt" in change[0].text
        wait_for(
            lambda: "+hello-from-the-web" in by_css(driver, ".item.file_change pre .add")[0].text,
            what="the diff",
        )
        wait_for(lambda: by_css(driver, ".run .badge.completed"), what="run 1 done")
        # A slow reply: its text is on screen piece by piece, before the run ends.
        before = len(texts(driver, "assistant_message"))
        send(driver, "SLOW")
        seen: list[str] = []

        def grown() -> bool:
            now = texts(driver, "assistant_message")[before:]
            if now and now[0] and (not seen or now[0] != seen[-1]):
                seen.append(now[0])
            return len(seen) >= 3

        wait_for(grown, within=60, what="the reply growing")
        assert all(b.startswith(a) for a, b in itertools.pairwise(seen)), seen
        assert not by_css(driver, ".run:last-child .badge.completed")
        by_css(driver, "#interrupt")[0].click()
        wait_for(lambda: by_css(driver, ".run .badge.interrupted"), what="interrupted")
        assert_screen_matches_store(driver, state, thread_id)
        # A real subagent: its own work nested under it.
        send(driver, "SPAWN_AGENT: say hi from the child")
        wait_for(
            lambda: by_css(driver, ".item.subagent .children .item"),
            within=60,
            what="the subagent's own items nested under it",
        )
        wait_for(
            lambda: any("subagent finished" in t for t in texts(driver, "assistant_message")),
            within=60,
            what="the parent's final text",
        )
        assert_screen_matches_store(driver, state, thread_id)
        driver.set_window_size(1100, 2400)
        driver.save_screenshot(str(artifacts_dir() / "thread-view-codex-tools.png"))
        assert console_errors(driver) == []


@pytest.mark.real_codex
@pytest.mark.skipif(discover_codex() is None, reason="codex not installed: scripts/install-codex")
def test_real_codex_text_is_on_screen_as_it_streams_not_as_it_commits(short_tmp: Path) -> None:
    with codex_page(short_tmp) as (driver, _, work):
        create_thread(driver, "codex", work, "web live text")
        # Every length the newest reply's text had on screen, as the page drew it.
        driver.execute_script(
            "window.__lens = [];"
            "new MutationObserver(() => {"
            "  const els = document.querySelectorAll('.item.assistant_message .text');"
            "  if (els.length) window.__lens.push(els[els.length - 1].textContent.length);"
            "}).observe(document.body, {subtree: true, childList: true, characterData: true});"
        )
        # 100 words at 50 Hz: 2 s, which the log stores in about 9 deltas.
        send(driver, "STREAM: 100 50")
        wait_for(lambda: by_css(driver, ".run .badge.completed"), within=60, what="done")
        lens = driver.execute_script("return window.__lens")
        final = texts(driver, "assistant_message")[-1]
        assert final.strip() == "".join(f"word{i} " for i in range(100)).strip()
        steps = sorted(set(lens))
        assert len(steps) >= 25, steps
        assert console_errors(driver) == []


def test_a_failed_run_says_why(short_tmp: Path) -> None:
    port = free_port()
    script = short_tmp / "fake-codex"
    script.write_text('#!/bin/sh\necho "fatal: no API key configured" >&2\nexit 1\n')
    script.chmod(0o755)
    config = short_tmp / "t3orch.toml"
    config.write_text(
        f"[daemon]\napi_port = {port}\n[providers.codex]\ncommand = [{json.dumps(str(script))}]\n"
    )
    work = short_tmp / "work"
    work.mkdir()
    state = short_tmp / "state"
    with daemon(state, config), chromium() as driver:
        log_in(driver, state, port)
        create_thread(driver, "codex", work, "web failing")
        send(driver, "hello")
        why = wait_for(
            lambda: [e for e in by_css(driver, ".run .why") if e.is_displayed()],
            within=30,
            what="why the run failed",
        )
        assert "fatal: no API key configured" in why[0].text
        assert "exited with code 1" in why[0].text
        assert by_css(driver, ".run .badge.failed")
        driver.get(f"http://127.0.0.1:{port}/#/sessions")
        row = wait_for(lambda: by_css(driver, "#sessions tr[data-session]"), what="the session")
        assert "error" in row[0].text and "fatal: no API key configured" in row[0].text
        assert console_errors(driver) == []


def test_a_long_thread_opens_with_its_newest_items_and_pages_in_older_ones(
    short_tmp: Path,
) -> None:
    import trio

    from bench.store import build_detail_thread
    from t3orch.state import prepare_state_dir

    port = free_port()
    config = short_tmp / "t3orch.toml"
    config.write_text(f"[daemon]\napi_port = {port}\n")
    state = short_tmp / "state"
    db = prepare_state_dir(state, create=True)
    thread_id, _ = trio.run(build_detail_thread, db, 450, 100, 50, "NORMAL")
    with daemon(state, config), chromium() as driver:
        log_in(driver, state, port)
        driver.get(f"http://127.0.0.1:{port}/#/thread/{thread_id}")

        def shown() -> int:
            return len(by_css(driver, "#runs .item"))

        wait_for(lambda: shown() == 200, what="the newest 200 items")
        by_css(driver, "#older")[0].click()
        wait_for(lambda: shown() == 400, what="200 older ones")
        by_css(driver, "#older")[0].click()
        wait_for(lambda: shown() == 450, what="the rest")
        assert not by_css(driver, "#older")[0].is_displayed()
        assert_screen_matches_store_all(driver, state, thread_id)
        assert console_errors(driver) == []


def assert_screen_matches_store_all(driver: Any, state_dir: Path, thread_id: str) -> None:
    """Every item of the thread on screen once, in the store's order."""
    ids: list[str] = []
    before = None
    while True:
        params: dict[str, Any] = {"topic": "threadDetail", "threadId": thread_id}
        if before is not None:
            params["beforePosition"] = before
        data = rpc(state_dir, "view.read", params)["data"]
        ids = [i["id"] for i in data["visibleTurnItems"]] + ids
        before = data["olderBeforePosition"]
        if before is None:
            break
    shown = [str(e.get_attribute("data-item")) for e in by_css(driver, "#runs .item")]
    assert shown == ids


def test_a_subagents_work_is_nested_under_it(short_tmp: Path) -> None:
    port = free_port()
    config = short_tmp / "t3orch.toml"
    transcript = REPO / "fixtures" / "standin" / "codex_subagent.ndjson"
    config.write_text(
        f"[daemon]\napi_port = {port}\n"
        f"[providers.standin]\ntranscript = {json.dumps(str(transcript))}\n"
    )
    work = short_tmp / "work"
    work.mkdir()
    state = short_tmp / "state"
    with daemon(state, config), chromium() as driver:
        log_in(driver, state, port)
        thread_id = create_thread(driver, "standin", work, "web subagent")
        send(driver, "hello")
        # Read inside the waits: the subagent's item is drawn anew as its run goes on, so
        # an element found a moment before may be gone (stale) when its text is read.
        nested = ".item.subagent .children .item.assistant_message .text"
        wait_for(
            lambda: [str(e.text) for e in by_css(driver, nested)][:1] == ["tests pass"],
            what="the subagent's reply 'tests pass' nested under it",
        )
        wait_for(
            lambda: "run the tests" in by_css(driver, ".item.subagent")[0].text,
            what="the subagent's task on its item",
        )
        wait_for(lambda: by_css(driver, ".run .badge.completed"), what="the run completed")
        # The provider's hidden echo of the message is not shown; the reply is.
        assert texts(driver, "user_message") == ["hello"]
        assert "ack: hello" in texts(driver, "assistant_message")
        assert_screen_matches_store(driver, state, thread_id)
        # The same after a reload (from the snapshot, not the live stream).
        driver.refresh()
        wait_for(
            lambda: by_css(driver, ".item.subagent .children .item.assistant_message"),
            what="nested after a reload",
        )
        assert_screen_matches_store(driver, state, thread_id)
        assert console_errors(driver) == []


def test_real_codex_approve_by_click_second_tab_and_daemon_restart(short_tmp: Path) -> None:
    port = free_port()
    work = make_work_dir(short_tmp / "work")
    state = short_tmp / "state"
    with provider_environment(work, short_tmp / "homes", ["codex"]) as (cfg, kinds):
        assert kinds == ["codex"]
        config = short_tmp / "t3orch.toml"
        config.write_text(f"[daemon]\napi_port = {port}\n" + config_toml(cfg))
        with chromium() as driver:
            with daemon(state, config) as served:
                log_in(driver, state, port)
                thread_id = create_thread(driver, "codex", work, "web codex")
                send(driver, "hello there")
                wait_for(
                    lambda: "ack: hello there" in texts(driver, "assistant_message"),
                    within=60,
                    what="codex's streamed reply",
                )
                wait_for(lambda: by_css(driver, ".run .badge.completed"), what="run 1 done")
                send(driver, "ESCALATE RUN_SHELL: echo web-approved-output")
                first = driver.current_window_handle
                wait_for(
                    lambda: by_css(driver, ".item.approval_request button[data-decision=accept]"),
                    within=60,
                    what="the approval request",
                )
                offered = [
                    b.get_attribute("data-decision")
                    for b in by_css(driver, ".item.approval_request button")
                ]
                assert offered == ["accept", "acceptForSession", "decline", "cancel"]
                # A second tab on the same thread sees the same request pending.
                driver.switch_to.new_window("tab")
                second = driver.current_window_handle
                # Prominent everywhere: the thread list shows it with its answers.
                driver.get(f"http://127.0.0.1:{port}/#/")
                banner = wait_for(
                    lambda: by_css(driver, "#pending .request button[data-decision=accept]"),
                    what="the request above the thread list",
                )
                assert banner
                assert "echo web-approved-output" in by_css(driver, "#pending .request")[0].text
                assert "1 waiting" in by_css(driver, f"tr[data-thread='{thread_id}']")[0].text
                by_css(driver, "#pending .request a")[0].click()
                wait_for(
                    lambda: by_css(driver, ".item.approval_request button[data-decision=accept]"),
                    what="the request in the second tab",
                )
                driver.switch_to.window(first)
                by_css(driver, ".item.approval_request button[data-decision=accept]")[0].click()
                wait_for(
                    lambda: any(
                        "web-approved-output" in str(e.text)
                        for e in by_css(driver, ".item.command_execution pre")
                    ),
                    within=60,
                    what="the approved command's output",
                )
                wait_for(
                    lambda: "Answered: accept" in by_css(driver, ".item.approval_request")[0].text,
                    what="'answered' in the tab that clicked",
                )
                driver.switch_to.window(second)
                wait_for(
                    lambda: (
                        "Already answered: accept"
                        in by_css(driver, ".item.approval_request")[0].text
                    ),
                    what="'already answered' in the second tab",
                )
                assert not by_css(driver, ".item.approval_request button")
                wait_for(
                    lambda: len(by_css(driver, ".run .badge.completed")) == 2, what="run 2 done"
                )
                driver.set_window_size(1100, 1350)
                driver.save_screenshot(str(artifacts_dir() / "thread-view-codex.png"))
                assert console_errors(driver) == []
                driver.close()
                driver.switch_to.window(first)
                stop(served)
            wait_for(lambda: by_css(driver, "body[data-conn=down]"), what="the page notices")
            with daemon(state, config):
                # Committed while the page may still be reconnecting: it must catch up.
                rpc(
                    state,
                    "run.send",
                    {"commandId": "web-restart-1", "threadId": thread_id, "text": "after restart"},
                )
                wait_for(lambda: by_css(driver, "body[data-conn=live]"), what="reconnected")
                wait_for(
                    lambda: texts(driver, "assistant_message").count("ack: after restart") == 1,
                    within=60,
                    what="the reply sent after the restart",
                )
                wait_for(
                    lambda: len(by_css(driver, ".run .badge.completed")) == 3, what="run 3 done"
                )
                assert texts(driver, "user_message") == [
                    "hello there",
                    "ESCALATE RUN_SHELL: echo web-approved-output",
                    "after restart",
                ]
                assert texts(driver, "assistant_message").count("ack: hello there") == 1
                assert_screen_matches_store(driver, state, thread_id)
                # Only the reconnect attempts while the daemon was down may have failed.
                assert console_errors(driver, allow=("ERR_CONNECTION_REFUSED",)) == []


class _EvilPage(http.server.BaseHTTPRequestHandler):
    port = 0

    def do_GET(self) -> None:
        body = f"""<!doctype html><html><head><link rel="icon" href="data:,"></head><body>
<pre id="out">running</pre><script>
const out = document.getElementById("out");
const ws = new WebSocket("ws://127.0.0.1:{self.port}/");
let opened = false;
ws.onopen = () => {{ opened = true;
  ws.send(JSON.stringify({{jsonrpc: "2.0", id: 1, method: "view.read",
                          params: {{topic: "threadShell"}}}})); }};
ws.onmessage = (m) => {{ out.textContent = "READ " + m.data; }};
ws.onclose = () => {{ if (!opened) out.textContent = "REFUSED"; }};
fetch("http://127.0.0.1:{self.port}/app.js").then(
  (r) => r.text().then((t) => {{ out.dataset.fetch = "READ"; }}),
  () => {{ out.dataset.fetch = "BLOCKED"; }});
</script></body></html>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_page_from_another_origin_cannot_open_the_api(short_tmp: Path) -> None:
    port = free_port()
    config = short_tmp / "t3orch.toml"
    config.write_text(f"[daemon]\napi_port = {port}\n")
    state = short_tmp / "state"
    handler = type("Evil", (_EvilPage,), {"port": port})
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with daemon(state, config), chromium() as driver:
            # Not logged in: the page says how, and reads nothing.
            driver.get(f"http://127.0.0.1:{port}/")
            wait_for(lambda: by_css(driver, "body[data-conn=unauthorized]"), what="refused")
            assert "t3orch web" in driver.find_element("css selector", "main").text
            assert not by_css(driver, "#threads")
            # Logged in: the browser holds the session cookie, and would send it.
            url = login_url(state)
            driver.get(url)
            wait_for(lambda: by_css(driver, "body[data-conn=live]"), what="logged in")
            # The code is spent: visiting it again (another browser) logs nobody in.
            with chromium() as other:
                other.get(url)
                assert "not valid" in other.find_element("css selector", "h1").text
                other.get(f"http://127.0.0.1:{port}/")
                wait_for(lambda: by_css(other, "body[data-conn=unauthorized]"), what="refused")
            driver.get(f"http://127.0.0.1:{evil.server_address[1]}/")
            out = wait_for(
                lambda: [e for e in by_css(driver, "#out") if e.text != "running"],
                what="the other origin's attempt",
            )[0]
            assert out.text == "REFUSED"
            wait_for(lambda: out.get_attribute("data-fetch"), what="the fetch")
            assert out.get_attribute("data-fetch") == "BLOCKED"
    finally:
        evil.shutdown()
        evil.server_close()
