"""sd_notify: a few lines on the datagram socket systemd hands us.

READY=1 goes out only once the store is open, reconciliation is done and the
API listens. Watchdog pings go out at half of ``WATCHDOG_USEC`` and only after
a round-trip through the event writer succeeds, so a wedged writer stops the
pings and systemd restarts the daemon.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping

import trio


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.address = env.get("NOTIFY_SOCKET")
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        self.watchdog_s: float | None = None
        if usec and (not pid or pid == str(os.getpid())):
            self.watchdog_s = int(usec) / 1_000_000

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *lines: str) -> bool:
        if not self.address:
            return False
        address = self.address
        if address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            try:
                sock.connect(address)
                sock.sendall("\n".join(lines).encode())
            except OSError:
                return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def stopping(self, status: str = "stopping") -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")

    async def watchdog(
        self,
        writer_alive: Callable[[], Awaitable[bool]],
        status: Callable[[], str],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        interval = (self.watchdog_s or 30.0) / 2
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(interval):
                if await writer_alive():
                    if self.watchdog_s:
                        self.notify("WATCHDOG=1", f"STATUS={status()}")
                    else:
                        self.status(status())
