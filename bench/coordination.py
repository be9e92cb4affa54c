"""Coordination benchmark: failure propagation latency and shared-filesystem operations per
heartbeat interval, for N coordination-only agents (no Ray, no judge, a sleeping driver).

    make bench            # N = 8, 32, 128
    python -m bench.coordination --sizes 8 32

Each agent is a real `gym-agent` process on 127.0.0.(2+i), with default liveness settings
(heartbeat every 2 s, poll every 1 s). Operations are the agents' own counts of reads, writes
and directory listings on the run directory, sampled from their heartbeats over a steady window.
Propagation: one agent gets SIGTERM; from its failure record's write to the last agent's exit.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from schemas import names

SPEC = """
name = "bench"
[launch]
gpus_per_replica = 1
node_gpus = 1
[launch.coordination]
startup_timeout = {startup}
heartbeat_timeout = 60
heartbeat_interval = {hb}
poll_interval = {poll}
teardown_grace = 2.0
[trainer]
nodes = 1
gpus_per_node = 1
[inference]
gpus = {rollout}
[driver]
command = ["python", "-c", "import time; time.sleep(3600)"]
[ray]
enabled = false
"""


def _heartbeats(run_dir: Path, n: int) -> dict[int, dict]:
    out = {}
    for r in range(n):
        try:
            out[r] = orjson.loads((run_dir / names.heartbeat(r)).read_bytes())
        except (OSError, ValueError):
            pass
    return out


def _total_ops(hbs: dict[int, dict]) -> int:
    return sum(sum(h.get("fs_ops", {}).values()) for h in hbs.values())


def bench(n: int, hb: float, poll: float, window: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="gym-bench-"))
    spec = tmp / "bench.toml"
    spec.write_text(SPEC.format(startup=120 + n, hb=hb, poll=poll, rollout=n - 1))
    uuid = f"bench-{n}-{os.getpid()}"
    first = ipaddress.ip_address("127.0.0.2")
    procs = []
    for r in range(n):
        argv = [
            sys.executable,
            "-m",
            "agent.cli",
            "--uuid",
            uuid,
            "--config",
            str(spec),
            "--output-root",
            str(tmp / "out"),
            "--rank",
            str(r),
            "--replicas",
            str(n),
            "--address",
            str(first + r),
        ]
        procs.append(
            subprocess.Popen(
                argv,
                env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    run_dir = tmp / "out" / "cluster" / uuid
    try:
        end = time.monotonic() + 120 + n
        while time.monotonic() < end:
            hbs = _heartbeats(run_dir, n)
            if len(hbs) == n and all(h.get("phase") == "driver" for h in hbs.values()):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"N={n}: agents did not all reach the driver phase")
        time.sleep(2 * hb)  # let rendezvous reads drain out of the window
        h0, t0 = _total_ops(_heartbeats(run_dir, n)), time.monotonic()
        time.sleep(window)
        h1, t1 = _total_ops(_heartbeats(run_dir, n)), time.monotonic()
        ops_per_interval = (h1 - h0) / ((t1 - t0) / hb)

        victim = procs[n // 2]
        victim.send_signal(signal.SIGTERM)
        fail_file = run_dir / names.failure(n // 2)
        while not fail_file.exists():
            time.sleep(0.005)
        written = orjson.loads(fail_file.read_bytes())["written_at"]
        for p in procs:
            p.wait(timeout=120)
        last_exit = time.time()
        seen = []
        for r in range(n):
            f = run_dir / names.failure(r)
            if r != n // 2 and f.exists():
                seen.append(orjson.loads(f.read_bytes())["wall_time"] - written)
        return {
            "n": n,
            "ops_per_interval": ops_per_interval,
            "ops_per_agent": ops_per_interval / n,
            "detect_max_s": max(seen),
            "detect_median_s": sorted(seen)[len(seen) // 2],
            "last_exit_s": last_exit - written,
            "exit_codes_nonzero": sum(p.returncode != 0 for p in procs),
        }
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--heartbeat-interval", type=float, default=2.0)
    ap.add_argument("--poll-interval", type=float, default=1.0)
    ap.add_argument("--window", type=float, default=10.0)
    args = ap.parse_args()
    print(
        f"heartbeat_interval {args.heartbeat_interval:g}s, poll_interval {args.poll_interval:g}s, "
        f"{os.cpu_count()} cores"
    )
    print(f"{'N':>5} {'FS ops/interval':>16} {'per agent':>10} {'detect max':>11} {'detect p50':>11} {'last exit':>10}")
    for n in args.sizes:
        r = bench(n, args.heartbeat_interval, args.poll_interval, args.window)
        print(
            f"{r['n']:>5} {r['ops_per_interval']:>16.1f} {r['ops_per_agent']:>10.2f} {r['detect_max_s']:>10.3f}s "
            f"{r['detect_median_s']:>10.3f}s {r['last_exit_s']:>9.2f}s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
