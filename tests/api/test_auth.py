"""Auth: the WebSocket token on every method; the Unix socket's file mode; bind policy."""

from __future__ import annotations

import os
import stat

import pytest
import trio

from t3orch.api.auth import TokenError, load_or_create_token
from t3orch.api.methods import METHODS
from t3orch.api.runner import ApiBindRefused, serve_api
from t3orch.config import DaemonConfig
from t3orch.core import open_core
from t3orch.state import prepare_state_dir
from tests.api.support import cid, running_api, short_state_dir, ws_client
from tests.api.writes import new_thread


@pytest.mark.parametrize("token", [None, "0" * 64, "not-even-hex"])
async def test_every_method_needs_the_token(token: str | None) -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        head = api.core.reader.last_sequence()
        async with ws_client(api, token=token) as c:
            for method in [*METHODS, "no.such.method"]:
                params = {"commandId": cid(), "threadId": tid, "text": "x", "topic": "threadShell"}
                doc = await c.request(method, params)
                assert doc["error"]["code"] == -32001, (method, doc)
                assert "Authorization: Bearer" in doc["error"]["message"]
            assert not c.notes  # no stream was opened
        assert api.core.reader.last_sequence() == head
        async with ws_client(api) as c:  # the right token works on the same server
            assert (await c.call("daemon.status"))["api"]["subscriptions"] == 0


async def test_files_are_private() -> None:
    async with running_api() as api:
        for name in ("api-token", "api.sock"):
            mode = stat.S_IMODE(os.stat(api.state_dir / name).st_mode)
            assert mode == 0o600, (name, oct(mode))
        token = (api.state_dir / "api-token").read_text().strip()
        assert len(token) == 64 and int(token, 16) >= 0
    # The token survives restarts; the socket and port file do not outlive the server.
    assert not (api.state_dir / "api.sock").exists()


async def test_token_is_stable_and_a_readable_one_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = load_or_create_token(tmp_path)
    assert load_or_create_token(tmp_path) == first
    os.chmod(tmp_path / "api-token", 0o644)
    with pytest.raises(TokenError, match="readable by other users"):
        load_or_create_token(tmp_path)


async def test_non_loopback_bind_needs_explicit_config() -> None:
    async with short_state_dir() as sd:
        db = prepare_state_dir(sd, create=True)
        async with open_core(db) as core:
            from t3orch.api.operations import CoreOperations

            async with trio.open_nursery() as nursery:
                with pytest.raises(ApiBindRefused, match="api_allow_remote"):
                    await nursery.start(
                        serve_api, core, CoreOperations(core), DaemonConfig(api_host="0.0.0.0")
                    )


async def test_a_second_server_on_the_same_state_dir_is_refused() -> None:
    from t3orch.api.operations import CoreOperations
    from t3orch.api.transport import SocketPathError

    async with running_api() as api, trio.open_nursery() as nursery:
        with pytest.raises(SocketPathError, match="another t3orch daemon"):
            await nursery.start(serve_api, api.core, CoreOperations(api.core), DaemonConfig())
