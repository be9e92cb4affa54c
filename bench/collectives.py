"""The collective trace, measured (issue 49): what PyTorch's Flight Recorder costs per step of the
real trainer's step (3 gloo ranks, TORCH_FR_BUFFER_SIZE=2000 against 0, alternating rounds in one
bench run so the machine's load falls on both alike), and how long a node takes to collect every
rank's trace through the hook agent.driver_api arms (agent/stacks/collectives.py) with the ranks
stuck in a collective, at 3 and 16 ranks on this host.

    python -m bench --only collectives          # part of `make bench`
    python -m bench.collectives [--ranks 3 16] [--rounds 3] [--steps 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.proc import collective_hook
from agent.stacks import collectives
from agent.stacks._targets import describe
from schemas import DriverEnv

REPO = Path(__file__).resolve().parents[1]
RANK = Path(__file__).with_name("_fr_rank.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(world: int, steps: int, mode: str, buffer: str, folder: str) -> list[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR", "GYM_"))}
    env.update(
        {
            collective_hook.BUFFER_ENV: buffer,
            DriverEnv.COLLECTIVE_TRACE: "1",
            DriverEnv.STACK_DUMP_DIR: folder,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO),
        }
    )
    port = _port()
    cmd = [sys.executable, str(RANK)]
    return [
        subprocess.Popen(
            [*cmd, str(r), str(world), str(port), str(steps), mode],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the stuck ranks' tracebacks when they are killed
            text=True,
        )
        for r in range(world)
    ]


def _ms_per_step(procs: list[subprocess.Popen[str]]) -> float:
    """The slowest rank's figure (every rank waits for it in each all_reduce)."""
    ms = []
    for p in procs:
        assert p.stdout is not None
        ms.append(float(json.loads(p.stdout.readline())["ms_per_step"]))
    return max(ms)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def step_cost(rounds: int, steps: int, say: Callable[[str], None]) -> dict[str, Any]:
    """ms per trainer step with the recorder on and off, alternating rounds."""
    on: list[float] = []
    off: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gfr") as folder:
        for i in range(rounds):
            for buffer, into in (("2000", on), ("0", off)) if i % 2 == 0 else (("0", off), ("2000", on)):
                procs = _start(3, steps, "steps", buffer, folder)
                try:
                    into.append(_ms_per_step(procs))
                finally:
                    _stop(procs)
                say(f"  round {i + 1}: recorder {'on ' if buffer != '0' else 'off'} {into[-1]:.3f} ms/step")
    out = {"steps": steps, "rounds": rounds, "on_ms": on, "off_ms": off}
    out["on_median_ms"], out["off_median_ms"] = statistics.median(on), statistics.median(off)
    out["cost_us_per_step"] = round(1000 * (out["on_median_ms"] - out["off_median_ms"]), 1)
    return out


def collection(world: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Every rank stuck (rank 1 skipped the last all_reduce); one collect over all of them."""
    with tempfile.TemporaryDirectory(prefix="gfr") as folder:
        procs = _start(world, 5, "hang", "2000", folder)
        try:
            for p in procs:
                assert p.stdout is not None
                p.stdout.readline()  # its step figure
                assert p.stdout.readline().strip() == "stuck"
            time.sleep(1.0)  # every rank inside (or past) its last step
            targets = [describe(p.pid, "ray_worker") for p in procs]
            first = collectives.collect(targets, dump_dir=folder, timeout=30, reason="hang")
            again = collectives.collect(targets, dump_dir=folder, timeout=30, reason="hang")
        finally:
            _stop(procs)
    assert first is not None and again is not None
    got = sum(1 for p in first["processes"] if p["entries"])
    out = {"ranks": world, "answered": got, "first_s": first["seconds"], "again_s": again["seconds"]}
    say(f"  {world} ranks: {got} answered, collected in {first['seconds']:.3f} s (again {again['seconds']:.3f} s)")
    return out


def run(ranks: list[int], rounds: int, steps: int, say: Callable[[str], None] = print) -> dict[str, Any]:
    cost = step_cost(rounds, steps, say)
    say(
        f"  recorder cost: {cost['cost_us_per_step']:+.1f} us per step (median on {cost['on_median_ms']:.3f} ms, "
        f"off {cost['off_median_ms']:.3f} ms; 2 all_reduces per step)"
    )
    return {"step_cost": cost, "collection": [collection(n, say) for n in ranks]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[3, 16])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args.ranks, args.rounds, args.steps, say=(lambda _s: None) if args.json else print)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
