"""A command carried to the daemon that owns its thread, over that daemon's API.

One WebSocket connection per forwarded command, with the owner's token from the
registry: commands are rare next to events, and a connection kept open would have
to notice the owner's restarts. The reply is the owner's exactly (its
``{result, sequence}``, or its rejection), so a client cannot tell a forwarded
command from a local one; the command id goes along, so a retry is a lookup there.
"""

from __future__ import annotations

from typing import Any

import msgspec
import trio
import trio_websocket

from t3orch.service import CommandResult
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import DaemonRecord

#: A forwarded command answers as fast as a local one; past this the owner is stuck.
FORWARD_TIMEOUT_S = 30.0
_MAX_REPLY = 16 * 1024 * 1024


def _unreachable(owner: DaemonRecord, why: str) -> CommandRejected:
    return CommandRejected(
        "owner_unreachable",
        f"the thread's owner, the daemon on {owner.host} ({owner.daemon_id}, {owner.api_url}), "
        f"did not take the command: {why}",
    )


async def forward(owner: DaemonRecord, method: str, params: dict[str, Any]) -> CommandResult:
    """``method`` on ``owner``'s API; its rejection is raised as ours."""
    if not owner.api_url:
        raise _unreachable(owner, "it has not said where its API listens yet")
    frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = [(b"authorization", f"Bearer {owner.token}".encode())]
    try:
        with trio.fail_after(FORWARD_TIMEOUT_S):
            async with trio_websocket.open_websocket_url(
                owner.api_url + "/", extra_headers=headers, max_message_size=_MAX_REPLY
            ) as ws:
                await ws.send_message(msgspec.json.encode(frame).decode())
                while True:
                    reply = msgspec.json.decode(await ws.get_message())
                    if isinstance(reply, dict) and reply.get("id") == 1:
                        break
    except trio.TooSlowError:
        raise _unreachable(owner, f"no answer within {FORWARD_TIMEOUT_S:g}s") from None
    except (OSError, trio_websocket.HandshakeError, trio_websocket.ConnectionClosed) as exc:
        raise _unreachable(owner, str(exc) or type(exc).__name__) from None
    if "error" in reply:
        error = reply["error"]
        data = error.get("data") if isinstance(error, dict) else None
        if isinstance(data, dict) and "code" in data:
            raise CommandRejected(str(data["code"]), str(data.get("message", "")))
        raise _unreachable(owner, str(error.get("message", error)))
    result = reply["result"]
    return CommandResult(result.get("result"), int(result.get("sequence", 0)))
