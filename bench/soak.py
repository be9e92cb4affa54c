"""Soak: N coordination-only gym-agents (default 256) idle for a while with no false failure,
then SIGTERM to one: every other agent's failure record within 1 s (p100), all exited in 10 s.

    make soak                                   # 256 agents, 10 minutes
    python -m bench.soak --agents 256 --duration 60 [--json FILE]

Agents are real `gym-agent` processes (each with its reaper) with default liveness settings
(heartbeat 2 s, poll 1 s; heartbeat_timeout 60 s). They are started in batches; before each
batch the free memory is checked and the start stops (and says so) if fewer than
`--reserve-mb` would remain, because this machine is shared. Over 20 s of the soak the CPU and
memory (RSS and PSS) of a sample of idle agents and of their reapers are read from /proc (goals:
each sampled agent <= 0.2 % of a core, agent + reaper <= 50 MB RSS). A record's time is when it
became visible (its file's ctime, set by the publishing rename), from the victim's record.
Exit 0 when every goal held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from schemas import names

from . import procstat
from .clusters import Ours, Settings

GOAL_RECORD_P100_S = 1.0
GOAL_ALL_EXITED_S = 10.0
GOAL_IDLE_CPU = 0.002  # of one core, per idle agent
GOAL_IDLE_RSS_MB = 50.0  # agent + reaper


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")


@contextlib.contextmanager
def inotify_instances(need: int, say=print) -> Iterator[int]:
    """Each agent watches failures/ with one inotify instance; the per-user default (128) is fewer
    than 256 agents on one host, and an agent without one finds records by polling (up to
    poll_interval later). As root, raise the limit for the soak and put it back afterwards."""
    try:
        old = int(INOTIFY_INSTANCES.read_text())
    except (OSError, ValueError):
        yield -1
        return
    if old >= need or os.geteuid() != 0:
        yield old
        return
    INOTIFY_INSTANCES.write_text(str(need))
    say(f"fs.inotify.max_user_instances {old} -> {need} for the soak (restored afterwards)")
    try:
        yield need
    finally:
        INOTIFY_INSTANCES.write_text(str(old))


def polling_agents(run_dir: Path, n: int) -> int:
    """How many agents logged that they had no inotify watch (they find records by polling)."""
    count = 0
    for rank in range(n):
        log = run_dir / names.agent_log(rank)
        try:
            if "finding failure records by listing" in log.read_text(errors="replace"):
                count += 1
        except OSError:
            continue
    return count


def soak(n: int, duration: float, *, reserve_mb: float, batch: int, say=print) -> dict:
    result: dict = {"agents_requested": n, "duration_s": duration, "machine": procstat.machine()}
    with tempfile.TemporaryDirectory(prefix="gym-soak-") as tmp, inotify_instances(2 * n + 128, say) as limit:
        result["inotify_max_user_instances"] = limit
        cluster = Ours(n, Path(tmp), Settings(heartbeat_timeout=60.0))
        t_start = time.monotonic()
        try:
            per_pair_mb = None
            for r in range(n):
                if r % batch == 0 and r:
                    avail = procstat.mem_available_mb()
                    if per_pair_mb is None:
                        time.sleep(5.0)  # let the first batch import everything before measuring
                        pairs = [(p, procstat.reaper_of(p)) for p in cluster.pids()]
                        rss = [
                            procstat.memory_kb(a).get("pss", 0) + procstat.memory_kb(b or -1).get("pss", 0)
                            for a, b in pairs
                        ]
                        per_pair_mb = statistics.mean(rss) / 1024 if rss else 60.0
                        avail = procstat.mem_available_mb()
                    if avail - batch * per_pair_mb < reserve_mb:
                        result["stopped_starting"] = (
                            f"only {avail:.0f} MB available after {r} agents (~{per_pair_mb:.0f} MB PSS per agent "
                            f"+ reaper); not starting more to keep {reserve_mb:.0f} MB for the other users"
                        )
                        say(result["stopped_starting"])
                        break
                cluster.start_one(r)
            if len(cluster.procs) < n:
                return _partial(cluster, result, say)
            ready = cluster.wait_ready(120 + 2 * n)
            result["startup_s"] = time.monotonic() - t_start
            say(f"{n} agents in the driver phase after {result['startup_s']:.0f}s")
            if not ready:
                result["false_failures"] = {r: rec.cause for r, rec in cluster.records().items()}
                return result
            # Idle cost of a sample of agents and their reapers, inside the soak.
            sample = cluster.pids()[:: max(1, n // 16)]
            reapers = [p for p in (procstat.reaper_of(a) for a in sample) if p]
            measure = min(20.0, max(5.0, duration / 2))
            agents_cpu = procstat.idle_cost(sample, measure)
            reapers_cpu = procstat.idle_cost(reapers, 2.0) if reapers else {}
            mem_a = [procstat.memory_kb(p) for p in sample]
            mem_r = [procstat.memory_kb(p) for p in reapers]
            result["idle"] = {
                "sampled_agents": len(sample),
                "agent_cpu_fraction_of_core": agents_cpu,
                "reaper_cpu_fraction_of_core": reapers_cpu,
                "agent_rss_mb": statistics.mean(m.get("rss", 0) for m in mem_a) / 1024,
                "agent_pss_mb": statistics.mean(m.get("pss", 0) for m in mem_a) / 1024,
                "reaper_rss_mb": statistics.mean(m.get("rss", 0) for m in mem_r) / 1024 if mem_r else None,
                "reaper_pss_mb": statistics.mean(m.get("pss", 0) for m in mem_r) / 1024 if mem_r else None,
                "measured_over_s": measure,
            }
            idle = result["idle"]
            rss_pair = idle["agent_rss_mb"] + (idle["reaper_rss_mb"] or 0.0)
            result["idle_goals"] = {
                "agent_cpu_max_le_0.2%": agents_cpu["max"] <= GOAL_IDLE_CPU,
                "agent_plus_reaper_rss_le_50MB": rss_pair <= GOAL_IDLE_RSS_MB,
            }
            say(f"idle: {json.dumps(result['idle'])}")
            end = t_start + result["startup_s"] + duration
            while time.monotonic() < end:
                recs = cluster.records()
                if recs:
                    break
                time.sleep(min(5.0, max(0.1, end - time.monotonic())))
            recs = cluster.records()
            result["false_failures"] = {r: rec.cause for r, rec in recs.items()}
            result["soaked_s"] = time.monotonic() - t_start - result["startup_s"]
            say(f"soaked {result['soaked_s']:.0f}s: {len(recs)} false failure(s)")
            result["agents_polling_without_inotify"] = polling_agents(cluster.run_dir, n)
            if recs:
                return result
            victim = n // 2
            cluster.procs[victim].send_signal(signal.SIGTERM)
            t_sig = time.time()
            deadline = time.monotonic() + 60
            while victim not in cluster.records():
                if time.monotonic() > deadline:
                    raise RuntimeError("the victim never wrote its failure record")
                time.sleep(0.005)
            victim_rec = cluster.records()[victim]
            written = victim_rec.written_wall
            last_exit = cluster.wait_exit(300)
            recs = cluster.records()
            others = [rec for r, rec in recs.items() if r != victim]
            # "detect": when each agent tripped; "record": when its failure record became visible
            # (the file's ctime, set by the rename), both from the victim's record becoming visible.
            detect = sorted(rec.tripped_wall - victim_rec.published_wall for rec in others)
            published = sorted(rec.published_wall - victim_rec.published_wall for rec in others)
            result["propagation"] = {
                "victim": victim,
                "victim_record_after_sigterm_s": victim_rec.published_wall - t_sig,
                "records": len(others),
                "detect_p50_s": statistics.median(detect) if detect else None,
                "detect_p100_s": detect[-1] if detect else None,
                "record_p50_s": statistics.median(published) if published else None,
                "record_p99_s": published[int(0.99 * (len(published) - 1))] if published else None,
                "record_p100_s": published[-1] if published else None,
                "records_within_1s": sum(1 for d in published if d <= GOAL_RECORD_P100_S),
                "all_exited_s": last_exit - victim_rec.published_wall,
                "victim_stamp_to_visible_s": victim_rec.published_wall - written,
            }
            p = result["propagation"]
            result["goals_met"] = bool(
                all(result["idle_goals"].values())
                and p["records"] == n - 1
                and p["record_p100_s"] is not None
                and p["record_p100_s"] <= GOAL_RECORD_P100_S
                and p["all_exited_s"] <= GOAL_ALL_EXITED_S
            )
            say(f"propagation: {json.dumps(p)}")
        finally:
            cluster.stop()
    return result


def _partial(cluster: Ours, result: dict, say) -> dict:
    """Too few agents fit: report the per-agent cost measured on the ones that run."""
    result["agents_started"] = len(cluster.procs)
    try:
        cluster.wait_ready(120 + 2 * len(cluster.procs))
    except RuntimeError:
        pass
    sample = cluster.pids()[:16]
    reapers = [p for p in (procstat.reaper_of(a) for a in sample) if p]
    result["idle"] = {
        "agent_cpu_fraction_of_core": procstat.idle_cost(sample, 20.0),
        "agent_pss_mb": statistics.mean(procstat.memory_kb(p).get("pss", 0) for p in sample) / 1024,
        "reaper_pss_mb": statistics.mean(procstat.memory_kb(p).get("pss", 0) for p in reapers) / 1024
        if reapers
        else None,
    }
    result["goals_met"] = False
    say(json.dumps(result["idle"]))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=int(os.environ.get("SOAK_AGENTS", 256)))
    ap.add_argument("--duration", type=float, default=float(os.environ.get("SOAK_DURATION", 600)))
    ap.add_argument("--reserve-mb", type=float, default=4096)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json", default="bench-out/soak.json")
    args = ap.parse_args()
    m = procstat.machine()
    print(f"machine: {procstat.describe(m)}")
    r = soak(args.agents, args.duration, reserve_mb=args.reserve_mb, batch=args.batch)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(r, indent=2, default=str))
    print(f"goals met: {r.get('goals_met')}  (results in {args.json})")
    return 0 if r.get("goals_met") else 1


if __name__ == "__main__":
    sys.exit(main())
