"""Coordination benchmark, gym-agent beside the anchor protocol, in one run on one machine.

    python -m bench.coordination --sizes 8 32 128 [--systems ours anchor]

For each N and each protocol, N coordination-only agents run as real processes (gym-agent: no Ray,
no judge, a sleeping driver; anchor: bench/anchor_agent.py) with heartbeat 2 s and poll/glob 1 s:
- FS ops/interval: every agent's self-counted reads, writes and listings per heartbeat interval
  (delta of the counts in its own heartbeats over a steady window, divided by its sequence delta),
  summed over the cluster; a sample of agents is also counted from outside with strace;
- propagation: SIGTERM to one agent; from the SIGTERM to each other agent tripping (p50, max), to
  the last other agent's record becoming visible, and to the last agent's exit;
- false failures under a +/-1 h wall clock on one agent (a separate, smaller run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import fstrace
from .clusters import SYSTEMS, Cluster, Settings


def _ops_per_interval(h0: dict[int, dict], h1: dict[int, dict]) -> tuple[float, int]:
    """Sum over agents of (ops delta / heartbeat delta); and how many agents contributed."""
    total, agents = 0.0, 0
    for r, b in h1.items():
        a = h0.get(r)
        if not a or int(b["seq"]) <= int(a["seq"]):
            continue
        ops = sum(b["fs_ops"].values()) - sum(a["fs_ops"].values())
        total += ops / (int(b["seq"]) - int(a["seq"]))
        agents += 1
    return total, agents


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def steady_then_kill(
    system: str,
    n: int,
    settings: Settings,
    window: float,
    trace: int,
    log: Callable[[str], None] = print,
) -> dict:
    """Steady window (self and strace counts), then SIGTERM to the middle agent."""
    with tempfile.TemporaryDirectory(prefix=f"gym-bench-{system}-") as tmp:
        cluster: Cluster = SYSTEMS[system](n, Path(tmp), settings)
        cluster.start()
        try:
            if not cluster.wait_ready(120 + 2 * n):
                raise RuntimeError(f"{system} N={n}: a failure before the steady state: {cluster.records()}")
            time.sleep(2 * settings.heartbeat_interval)  # start-up reads drain out of the window
            tracers = []
            if trace and fstrace.available():
                step = max(1, n // trace)
                for r in list(range(0, n, step))[:trace]:
                    t = fstrace.Tracer(cluster.procs[r].pid, r, cluster.run_dir, Path(tmp) / f"strace-{r}")
                    t.start()
                    tracers.append(t)
                time.sleep(1.0)  # strace attaches
            h0 = cluster.heartbeats()
            time.sleep(window)
            h1 = cluster.heartbeats()
            for t in tracers:
                t.stop()
            ops, agents = _ops_per_interval(h0, h1)
            false_before = {r: rec.cause for r, rec in cluster.records().items()}
            comparisons = [t.compare() for t in tracers]

            victim = n // 2
            fault_wall = time.time()
            cluster.procs[victim].send_signal(15)
            end = time.monotonic() + 60
            while victim not in cluster.records():
                if time.monotonic() > end:
                    raise RuntimeError(f"{system} N={n}: the victim never wrote its failure record")
                time.sleep(0.005)
            # Times count from the SIGTERM: with the doorbell peers trip before the victim's own
            # record is visible, so that record is no longer the start of the propagation.
            victim_visible = cluster.records()[victim].published_wall - fault_wall
            last_exit = cluster.wait_exit(120 + n)
            recs = cluster.records()
            seen = [rec.tripped_wall - fault_wall for r, rec in recs.items() if r != victim]
            published = [rec.published_wall - fault_wall for r, rec in recs.items() if r != victim]
            missing = sorted(set(range(n)) - set(recs))
        finally:
            cluster.stop()
    result = {
        "system": system,
        "n": n,
        "ops_per_interval": ops,
        "ops_per_agent": ops / max(1, agents),
        "agents_counted": agents,
        "strace": [c.to_json() for c in comparisons],
        "false_failures_steady": false_before,
        "detect_p50_s": statistics.median(seen) if seen else None,
        "detect_max_s": max(seen) if seen else None,
        "detect_p99_s": _pct(seen, 0.99) if seen else None,
        "record_p50_s": statistics.median(published) if published else None,
        "record_max_s": max(published) if published else None,
        "last_exit_s": last_exit - fault_wall,
        "victim_record_s": victim_visible,
        "agents_without_record": missing,
    }
    log(
        f"  {system:9} N={n:<5} ops/interval {ops:9.1f}  detect p50 {result['detect_p50_s']:.3f}s "
        f"max {result['detect_max_s']:.3f}s  last exit {result['last_exit_s']:.2f}s"
        + "".join(f"  strace {c.strace_total} vs self {c.self_total}" for c in comparisons)
    )
    return result


def skewed(system: str, n: int, skew_s: float, settings: Settings, window: float) -> dict:
    """N agents, one with its wall clock moved by skew_s, no fault injected, for `window` seconds."""
    with tempfile.TemporaryDirectory(prefix=f"gym-bench-skew-{system}-") as tmp:
        cluster = SYSTEMS[system](n, Path(tmp), settings, skew={1: skew_s})
        cluster.start()
        try:
            try:
                cluster.wait_ready(120 + 2 * n)
            except RuntimeError:
                pass
            end = time.monotonic() + window
            while time.monotonic() < end:
                time.sleep(0.5)
            recs = cluster.records()
        finally:
            cluster.stop()
    own = {r: rec.cause for r, rec in recs.items() if rec.why == "own"}
    return {
        "system": system,
        "n": n,
        "skewed_rank": 1,
        "skew_s": skew_s,
        "window_s": window,
        "false_failures": len(own),
        "agents_failed": len(recs),
        "causes": dict(list(own.items())[:3]),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--systems", nargs="+", default=["ours", "anchor"], choices=sorted(SYSTEMS))
    ap.add_argument("--window", type=float, default=12.0)
    ap.add_argument("--trace", type=int, default=2, help="agents per run counted with strace too")
    ap.add_argument("--skew-n", type=int, default=8)
    args = ap.parse_args()
    s = Settings()
    for n in args.sizes:
        for system in args.systems:
            steady_then_kill(system, n, s, args.window, args.trace)
    for system in args.systems:
        for skew in (3600.0, -3600.0):
            print(skewed(system, args.skew_n, skew, Settings(heartbeat_timeout=10.0), 25.0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
