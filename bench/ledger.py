"""The sample ledger's costs (issue 52): what ledger(step, ids) costs a driver per step at 10^4 ids,
and the audit's check of 10^7 committed ids over 5 attempts (goal: under 2 s and under 1 GB).

    python -m bench.ledger [--ids-per-step 10000] [--total 10000000] [--attempts 5] [--json]

Both real: the first calls agent.driver_api.ledger in a driver process the way the agent starts it
(GYM_RUN_DIR, GYM_RANK), its flush thread appending to a real run directory; the second writes
each attempt's ledger-0.jsonl (the writer's line format, a checkpoint every 50 steps, each attempt
killed 20 steps after its last one) and the order file (its identity recorded as a run's spec.json
keeps it, so the check hashes the file again), then runs the audit's check in a fresh
process and reads its wall time and peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from schemas import DriverEnv, RunDir, names
from schemas.ledger_order import order_identity

REPO = Path(__file__).resolve().parents[1]

_COST = """
import json, statistics, sys, time
from agent.driver_api import ledger, checkpoint
n, steps = int(sys.argv[1]), int(sys.argv[2])
batches = [[f"sample-{s * n + i:09d}" for i in range(n)] for s in range(steps)]
times = []
for step, ids in enumerate(batches, 1):
    t = time.perf_counter()
    ledger(step, ids)
    times.append(time.perf_counter() - t)
t = time.perf_counter()
checkpoint(steps)
ck = time.perf_counter() - t
print(json.dumps({"median_us": statistics.median(times) * 1e6, "p99_us": sorted(times)[int(len(times) * .99)] * 1e6,
                  "checkpoint_ms": ck * 1e3}))
"""

_CHECK = """
import json, resource, sys, time
from audit._ledger import check_ledger, ledger_files
from audit.safedir import SafeDir
root, order, current = sys.argv[1], sys.argv[2], int(sys.argv[3])
recorded = json.loads(sys.argv[4])  # the order's identity when the run started: the file is hashed again
t = time.perf_counter()
with SafeDir(root) as safe:
    top = [p for p in __import__("os").listdir(root) if p.endswith(".jsonl")]
    files = ledger_files(safe, top, current, list(range(1, current + 1)))
    summary, findings = check_ledger(safe, files, order, recorded=recorded)
wall = time.perf_counter() - t
doc = summary.to_json()
# VmHWM: this process's own peak (ru_maxrss would carry the forking parent's over the exec)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
cpu = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": wall, "peak_mb": hwm / 1024, "cpu_seconds": cpu.ru_utime + cpu.ru_stime,
                  "codes": sorted({f.code for f in findings}), "replayed": doc["replayed"],
                  "skipped": doc["skipped"]["count"], "repeated": doc["repeated"]["count"],
                  "committed": sum(a["committed_ids"] for a in doc["attempts"])}))
"""


def step_cost(ids_per_step: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, RunDir.create(tmp, "bench", mode=0o750) as run:
        env = {**os.environ, DriverEnv.RUN_DIR: str(run.path), DriverEnv.RANK: "0", "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", _COST, str(ids_per_step), str(steps)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        size = (run.path / names.ledger(0)).stat().st_size
    doc: dict[str, Any] = json.loads(out.stdout)
    doc |= {"ids_per_step": ids_per_step, "steps": steps, "bytes_per_step": size // steps}
    return doc


def _line(kind: str, step: int, attempt: int, ids: list[str] | None = None) -> bytes:
    doc: dict[str, Any] = {"schema": "ledger", "schema_version": 1, "kind": kind, "step": step}
    if ids is not None:
        doc |= {"epoch": 0, "ids": ids}
    doc |= {"rank": 0, "attempt": attempt, "pid": 1000 + attempt, "at": "2026-12-04T18:00:00.000Z"}
    return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)


def write_run(root: Path, total: int, per_step: int, attempts: int, loader: str = "correct") -> tuple[Path, int]:
    """The order file and every attempt's ledger: attempts 1..N-1 archived, the last at the top.
    `loader`: "correct" resumes the data where the checkpoint was; "restart" starts each resumed
    attempt's data at the epoch's beginning; "skip" 10 steps of data past the checkpoint."""
    order = root / "order.txt"
    ids = [f"sample-{i:09d}" for i in range(total)]
    order.write_bytes("\n".join(ids).encode() + b"\n")
    steps = total // per_step
    share = steps // attempts
    start = 0  # the first step (0-based batch) each attempt trains on
    for a in range(1, attempts + 1):
        last = a == attempts
        folder = root if last else root / names.attempt_dir(a)
        folder.mkdir(parents=True, exist_ok=True)
        end_ckpt = steps if last else start + share  # the checkpoint the next attempt resumes from
        stop = steps if last else min(steps, end_ckpt + 20)  # killed 20 steps later: the replay
        shift = 0 if a == 1 or loader == "correct" else (-start if loader == "restart" else 10)
        with open(folder / names.ledger(0), "wb") as fh:
            for b in range(start, stop):
                d = b + shift
                if d >= steps:
                    break  # a loader that skipped ahead runs out of data before its steps
                fh.write(_line("step", b + 1, a, ids[d * per_step : (d + 1) * per_step]))
                if (b + 1) % 50 == 0 or b + 1 == end_ckpt:
                    fh.write(_line("checkpoint", b + 1, a))
        start = end_ckpt
    return order, attempts


def check_cost(total: int, per_step: int, attempts: int, loader: str = "correct") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        root.mkdir()
        order, current = write_run(root, total, per_step, attempts, loader)
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", _CHECK, str(root), str(order), str(current), json.dumps(order_identity(str(order)))],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        )
        process = time.perf_counter() - t
    doc: dict[str, Any] = json.loads(out.stdout)
    doc |= {"ids": total, "attempts": attempts, "ids_per_step": per_step, "process_seconds": process, "loader": loader}
    return doc


LOADERS = ("correct", "restart", "skip")


def run(
    ids_per_step: int, total: int, attempts: int, loaders: tuple[str, ...] = LOADERS, say: Any = print
) -> dict[str, Any]:
    cost = step_cost(ids_per_step, 200)
    say(
        f"  ledger({ids_per_step} ids): median {cost['median_us']:.0f} us per step, p99 {cost['p99_us']:.0f} us; "
        f"{cost['bytes_per_step'] / 1e3:.0f} kB a step; checkpoint() {cost['checkpoint_ms']:.1f} ms"
    )
    checks = []
    for loader in loaders:
        check = check_cost(total, ids_per_step, attempts, loader)
        say(
            f"  audit check, {loader} loader: {check['committed']} committed ids over {attempts} attempts in "
            f"{check['seconds']:.2f} s ({check['cpu_seconds']:.2f} s CPU, imports included), peak "
            f"{check['peak_mb']:.0f} MB; replayed {check['replayed']}, skipped {check['skipped']}, "
            f"repeated {check['repeated']}; {check['codes']}"
        )
        checks.append(check)
    return {"step_cost": cost, "checks": checks, "load": os.getloadavg(), "cpus": os.cpu_count()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids-per-step", type=int, default=10_000)
    ap.add_argument("--total", type=int, default=10_000_000)
    ap.add_argument("--attempts", type=int, default=5)
    ap.add_argument("--loaders", nargs="+", choices=LOADERS, default=list(LOADERS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cpus, {resource.getpagesize()} B pages")
    say = (lambda _s: None) if args.json else print
    out = run(args.ids_per_step, args.total, args.attempts, tuple(args.loaders), say=say)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
