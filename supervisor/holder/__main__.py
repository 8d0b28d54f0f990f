"""``python -m supervisor.holder --dir HELD_DIR``: hold one provider runtime.

The daemon starts this in a session of its own; it forks at once and the
intermediate exits, so the holder is nobody's child but init's (or the nearest
subreaper's): the daemon's death sends it no signal, and a daemon that reattaches
later has no child to reap. The holder reads its spec (JSON) from stdin — the
provider's environment holds its keys, so it is written to no file —, starts the
provider and writes one JSON line on stdout (its state, or why the provider did
not start), then stdout is closed. Its log goes to ``HELD_DIR/holder.log``.
Exit status: 0, or 1 when the provider could not be started.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] != "--dir":
        sys.stderr.write("usage: python -m supervisor.holder --dir HELD_DIR\n")
        sys.exit(2)
    if os.fork() != 0:
        os._exit(0)
    os.setsid()

    import logging
    from pathlib import Path

    import msgspec
    import trio

    from supervisor.holder.layout import HeldPaths, HeldSpec
    from supervisor.holder.server import hold

    paths = HeldPaths(Path(sys.argv[2]))
    logging.basicConfig(
        filename=paths.log,
        level=logging.INFO,
        format=f"%(asctime)s holder {paths.holder_id} pid {os.getpid()}: %(message)s",
    )
    spec = msgspec.json.decode(sys.stdin.buffer.read(), type=HeldSpec)
    ready = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        code = trio.run(hold, paths, spec, ready)
    except BaseException:
        logging.exception("the holder failed")
        raise
    sys.exit(code)


if __name__ == "__main__":
    main()
