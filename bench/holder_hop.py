"""The holder hop of a turn (issue 17): a request and its reply lines, direct and held.

Prints figures; it is not a timed test.

A small provider (Python, below) answers each line the daemon writes with ``--lines``
lines, each its own ``write`` (as Codex writes its frames), the first at once. Driven
``--rounds`` times through a child's pipes (``ChildProcess``) and through a holder
(``HeldProcess``), alternately, round by round, so the machine's load falls on both:

* **first line**: the daemon's ``send_line`` to the first reply line read (the
  ``turn/start`` → its response hop), median and p90 in µs;
* **all lines**: the same to the last of the round's lines;
* **per round, the holder's cost**: CPU (``/proc/<pid>/schedstat``) and its syscalls and
  bytes read/written (``/proc/<pid>/io``: ``syscr``, ``syscw``, ``rchar``, ``wchar``),
  and the socket reads the daemon made for the round's lines.

Run: ``python bench/holder_hop.py [--rounds 300] [--lines 20] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.ownership import this_process  # noqa: E402
from adapters.process import open_child_process  # noqa: E402
from adapters.transport import LaunchSpec, ProviderProcess  # noqa: E402
from supervisor.holder.client import HeldProcess, attach, start_holder  # noqa: E402

#: Answers each stdin line ``<n>`` with n lines of a Codex delta's size, one write each.
PROVIDER = r"""
import os, sys
pad = ('{"method":"item/agentMessage/delta","params":'
       '{"threadId":"t","turnId":"u","itemId":"m","delta":"word %d "}}\n')
for line in sys.stdin.buffer:
    for i in range(int(line)):
        os.write(1, (pad % i).encode())
"""


def _spec() -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-c", PROVIDER], env=dict(os.environ), cwd="/tmp")


def _proc_io(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = int(value)
    with open(f"/proc/{pid}/schedstat") as f:
        out["cpu_ns"] = int(f.read().split()[0])
    return out


class _CountingReads:
    """Counts the daemon's socket reads of a held process (wraps its stream)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.reads = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        self.reads += 1
        data: bytes = await self._stream.receive_some(max_bytes)
        return data


async def _round(process: ProviderProcess, lines: int) -> tuple[float, float]:
    start = time.perf_counter()
    await process.send_line(str(lines).encode())
    got = 0
    first = 0.0
    while got < lines:
        batch = await process.receive_lines()
        if not got:
            first = time.perf_counter() - start
        got += len(batch)
    return first, time.perf_counter() - start


def _stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"median_us": statistics.median(s) * 1e6, "p90_us": s[int(len(s) * 0.9)] * 1e6}


async def _run(rounds: int, lines: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="t3hop", dir="/tmp"))
    owner = this_process().token()
    firsts: dict[str, list[float]] = {"direct": [], "held": []}
    alls: dict[str, list[float]] = {"direct": [], "held": []}
    async with open_child_process(_spec()) as child, trio.open_nursery() as nursery:
        paths = await start_holder(root / "held", _spec(), grace_s=30, owner=owner)
        held: HeldProcess = await attach(paths, 0)
        counter = _CountingReads(held._reader._stream)
        held._reader._stream = counter  # type: ignore[assignment]
        await nursery.start(held.serve)
        state = paths.read_state()
        assert state is not None
        for _ in range(20):  # warm both
            await _round(child, lines)
            await _round(held, lines)
        counter.reads = 0
        before = _proc_io(state.holder_pid)
        for _ in range(rounds):
            for name, process in (("direct", child), ("held", held)):
                first, every = await _round(process, lines)
                firsts[name].append(first)
                alls[name].append(every)
        after = _proc_io(state.holder_pid)
        daemon_reads = counter.reads
        await held.close_stdin()
        await held.wait()
        nursery.cancel_scope.cancel()
    holder = {k: (after[k] - before[k]) / rounds for k in after}
    return {
        "rounds": rounds,
        "lines_per_round": lines,
        "first_line": {k: _stats(v) for k, v in firsts.items()},
        "all_lines": {k: _stats(v) for k, v in alls.items()},
        "holder_per_round": {
            "cpu_us": holder["cpu_ns"] / 1e3,
            "read_syscalls": holder["syscr"],
            "write_syscalls": holder["syscw"],
            "bytes_read": holder["rchar"],
            "bytes_written": holder["wchar"],
        },
        "daemon_socket_reads_per_round": daemon_reads / rounds,
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--lines", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = trio.run(_run, args.rounds, args.lines)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['rounds']} rounds of a request and {out['lines_per_round']} reply lines")
    for what in ("first_line", "all_lines"):
        d, h = out[what]["direct"], out[what]["held"]
        print(
            f"{what:10}: direct {d['median_us']:7.0f} µs (p90 {d['p90_us']:6.0f}), held "
            f"{h['median_us']:7.0f} µs (p90 {h['p90_us']:6.0f}): "
            f"+{h['median_us'] - d['median_us']:.0f} µs"
        )
    hp = out["holder_per_round"]
    print(
        f"the holder per round: {hp['cpu_us']:.0f} µs CPU, {hp['read_syscalls']:.1f} reads "
        f"({hp['bytes_read']:.0f} bytes), {hp['write_syscalls']:.1f} writes "
        f"({hp['bytes_written']:.0f} bytes); the daemon's socket reads per round: "
        f"{out['daemon_socket_reads_per_round']:.1f}"
    )
    print("load average (1/5/15 min): " + " ".join(f"{x:.2f}" for x in out["load_average"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
