"""Hang detection, measured (issue 34): what one `agent.driver_api.progress()` call costs; how late
a hang is called past progress_timeout and how soon after that every node's stacks are recorded
(3 nodes with Ray and a stuck actor; 16 agents without Ray); how soon a frozen node (its agent and
reaper SIGSTOPped) is known with heartbeat_timeout 120 s, at N = 16 and 128 agents.

    python -m bench --only hang                 # part of `make bench`
    python -m bench.hang [--frozen 16 128] [--json]

Goals: a progress() call <= 2 us; detection <= progress_timeout + 1 poll interval; every node's
stacks <= 10 s after detection; a frozen node detected <= beacon_timeout + 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import orjson
import psutil

from schemas import DriverEnv, names
from tests.harness import launch_local, small_spec, uid
from tests.harness.orphans import kill_all, run_processes

from .clusters import Ours, Settings

REPO = Path(__file__).resolve().parents[1]
RAY_DRIVER = REPO / "tests" / "data" / "ray_stuck_actor_driver.py"
SILENT = (
    'command = ["python", "-c", "import time\\nfrom agent import driver_api\\nfor i in range(3): '
    'driver_api.progress(i); time.sleep(0.2)\\ndef wait_for_peer():\\n    time.sleep(3600)\\nwait_for_peer()"]'
)
PROGRESS_TIMEOUT = 5.0
POLL = 0.5
BEACON_TIMEOUT = 10.0
GOAL_CALL_US = 2.0
GOAL_STACKS_S = 10.0


# -- one progress() call ----------------------------------------------------------------------


def progress_cost(calls: int = 1_000_000, repeat: int = 5) -> dict[str, Any]:
    """ns per call, best of `repeat` runs, on a real board (as a driver under the agent has it)."""
    from agent import driver_api
    from agent.proc import driver_local

    with tempfile.TemporaryDirectory() as d:
        board = os.path.join(d, "progress")
        driver_local.create_board(board)
        os.environ[DriverEnv.PROGRESS_FILE] = board
        driver_local._board = None
        driver_api._board = None
        try:
            driver_api.progress()
            progress = driver_api.progress
            bare = min(timeit.repeat("progress()", globals={"progress": progress}, number=calls, repeat=repeat))
            step = min(timeit.repeat("progress(7)", globals={"progress": progress}, number=calls, repeat=repeat))
            reader = driver_local.BoardReader(board)
            seen = reader.read()
            reader.close()
        finally:
            os.environ.pop(DriverEnv.PROGRESS_FILE, None)
            driver_local._board = None
            driver_api._board = None
    return {
        "progress_ns": round(bare / calls * 1e9, 1),
        "progress_step_ns": round(step / calls * 1e9, 1),
        "last_step_seen": seen.step,
        "goal_us": GOAL_CALL_US,
    }


# -- a hang, to every node's stacks -----------------------------------------------------------


def _read(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def hang_to_stacks(replicas: int, ray: bool, root: Path) -> dict[str, Any]:
    """Run `replicas` agents whose driver hangs; from the records: how late the hang was called and
    when every node's stacks-RANK.json was written after it (one host: one wall clock)."""
    driver = f'command = ["python", "{RAY_DRIVER}"]' if ray else SILENT
    driver += f"\nprogress_timeout = {PROGRESS_TIMEOUT}\ntrains = false"
    spec = small_spec(
        name="bench-hang",
        replicas=replicas,
        node_gpus=1 if not ray else 2,
        driver=driver,
        ray=ray,
        startup_timeout=240 + replicas,
        heartbeat_timeout=30,
        heartbeat_interval=1.0,
        poll_interval=POLL,
    )
    tmp = root / f"hang-{replicas}-{'ray' if ray else 'noray'}"
    tmp.mkdir(parents=True, exist_ok=True)
    run = launch_local(tmp, spec, uid("bench-hang", ""))
    code = run.wait(600)
    rd = run.run_dir
    fail = _read(rd / names.failure(0))
    detected = float(fail["wall_time"])
    written = {
        r: float(_read(rd / names.stacks(r))["written_at"]) for r in range(replicas) if (rd / names.stacks(r)).exists()
    }
    took = {r: float(_read(rd / names.stacks(r))["seconds"]) for r in written}
    processes = sum(len(_read(rd / names.stacks(r))["processes"]) for r in written)
    out = {
        "replicas": replicas,
        "ray": ray,
        "exit_code": code,
        "kind": fail["kind"],
        "progress_timeout": PROGRESS_TIMEOUT,
        "poll_interval": POLL,
        "late_s": round(float(fail["hang"]["idle_seconds"]) - PROGRESS_TIMEOUT, 3),
        "ranks_with_stacks": len(written),
        "processes": processes,
        "capture_max_s": round(max(took.values(), default=0.0), 3),
        "all_stacks_after_detection_s": round(max(written.values(), default=detected) - detected, 3),
        "goal_stacks_s": GOAL_STACKS_S,
    }
    kill_all(run_processes(rd))
    return out


# -- a frozen node ----------------------------------------------------------------------------


class Beaconed(Ours):
    """The coordination-only agents of `make bench`, with beacon_timeout set."""

    def __init__(self, n: int, root: Path, settings: Settings, beacon_timeout: float) -> None:
        super().__init__(n, root, settings)
        text = self.spec.read_text()
        self.spec.write_text(
            text.replace("[launch.coordination]\n", f"[launch.coordination]\nbeacon_timeout = {beacon_timeout}\n", 1)
        )


def _reaper_of(pid: int) -> int | None:
    try:
        return next((c.pid for c in psutil.Process(pid).children() if "agent.reaper" in c.cmdline()), None)
    except psutil.Error:
        return None


def _failure_times(run_dir: Path) -> dict[int, tuple[str, float]]:
    out = {}
    for leaf in os.listdir(run_dir / names.FAILURES_DIR):
        rank = names.rank_in(names.FAILURES_DIR, leaf)
        if rank is None:
            continue
        try:
            doc = _read(run_dir / names.FAILURES_DIR / leaf)
        except (OSError, ValueError):
            continue
        out[rank] = (str(doc["kind"]), float(doc["monotonic_time"]))
    return out


def frozen_node(n: int, root: Path, beacon_timeout: float = BEACON_TIMEOUT) -> dict[str, Any]:
    """N agents (heartbeat 2 s, poll 1 s, heartbeat_timeout 120 s): rank n//2's agent and reaper
    SIGSTOPped; when each other agent recorded its failure (one host: one monotonic clock)."""
    settings = Settings(heartbeat_interval=2.0, poll_interval=1.0, heartbeat_timeout=120.0)
    tmp = root / f"frozen-{n}"
    tmp.mkdir(parents=True, exist_ok=True)
    c = Beaconed(n, tmp, settings, beacon_timeout)
    victim = n // 2
    frozen: list[int] = []
    try:
        c.start()
        c.wait_ready(120 + 2 * n)
        time.sleep(3 * settings.heartbeat_interval)  # beacons flow both ways
        agent = c.procs[victim].pid
        reaper = _reaper_of(agent)
        frozen = [p for p in (reaper, agent) if p is not None]
        stopped = time.monotonic()
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        others = [r for r in range(n) if r != victim]
        end = stopped + beacon_timeout + 60
        times: dict[int, tuple[str, float]] = {}
        while time.monotonic() < end:
            times = _failure_times(c.run_dir)
            if all(r in times for r in others):
                break
            time.sleep(0.05)
        silent = [t - stopped for r, (k, t) in times.items() if k == "peer_silent" and r != victim]
        every = [t - stopped for r, (_k, t) in times.items() if r != victim]
        return {
            "agents": n,
            "beacon_timeout": beacon_timeout,
            "heartbeat_timeout": settings.heartbeat_timeout,
            "detected_s": round(min(silent), 3) if silent else None,
            "detectors": len(silent),
            "every_other_stopped_s": round(max(every), 3) if len(every) == len(others) else None,
            "stopped_p50_s": round(statistics.median(every), 3) if every else None,
            "goal_s": beacon_timeout + 1.0,
            "frozen_wrote_nothing": victim not in times,
        }
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        c.stop(grace=20)
        kill_all(run_processes(c.run_dir))


def run(frozen_sizes: list[int], say: Any = print) -> dict[str, Any]:
    out: dict[str, Any] = {}
    say("progress() on a real board:")
    out["progress"] = cost = progress_cost()
    say(
        f"  progress(): {cost['progress_ns']:.0f} ns, progress(step): {cost['progress_step_ns']:.0f} ns per call "
        f"(goal <= {GOAL_CALL_US:g} us)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-hang-", dir="/tmp") as d:
        root = Path(d)
        out["hang"] = []
        for replicas, ray in ((3, True), (16, False)):
            r = hang_to_stacks(replicas, ray, root)
            out["hang"].append(r)
            what = "with Ray (an actor stuck on one of three nodes)" if ray else "without Ray"
            say(
                f"  hang, {replicas} agents {what}: "
                f"called {r['late_s']:.2f}s past progress_timeout {PROGRESS_TIMEOUT:g}s (poll {POLL:g}s); "
                f"{r['processes']} processes' stacks on {r['ranks_with_stacks']}/{replicas} ranks, all written "
                f"{r['all_stacks_after_detection_s']:.2f}s after detection (longest capture {r['capture_max_s']:.2f}s)"
            )
        out["frozen"] = []
        for n in frozen_sizes:
            f = frozen_node(n, root)
            out["frozen"].append(f)
            say(
                f"  frozen node, N={n}: detected {f['detected_s']}s after SIGSTOP by {f['detectors']} watcher(s), "
                f"every other agent stopped by {f['every_other_stopped_s']}s (beacon_timeout {f['beacon_timeout']:g}s, "
                f"heartbeat_timeout {f['heartbeat_timeout']:g}s; goal <= {f['goal_s']:g}s)"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hang", description=__doc__.splitlines()[0])
    ap.add_argument("--frozen", type=int, nargs="*", default=[16, 128])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = run(args.frozen, say=(lambda _s: None) if args.json else print)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
