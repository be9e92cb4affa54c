"""The anchor protocol's coordination loop, re-implemented for side-by-side benchmarks.

Behaviour follows the published description of open-instruct's MILES cluster agent (the system
this project's agent replaces), written from that description, not from its code:
- a heartbeat thread, every `heartbeat` seconds, writes `heartbeat-RANK.json` {time, rank} with the
  host's WALL clock and then reads EVERY peer's heartbeat file; a peer is failed when
  `time.time() - peer.time > stale` (wall clocks of two hosts compared), or when its file is still
  missing `missing` seconds after start; an exception in that thread ends the thread;
- the main loop globs `failed-*.json` in the run directory every `glob_every` seconds and fails on
  the first one it finds (an unordered glob);
- SIGTERM/SIGINT are failures; a failure writes `failed-RANK.json` {error}, stops the local
  process group (TERM, 15 s, KILL) and exits 1.
Everything lives in one flat directory, as in the anchor.

Bench instrumentation only (not in the anchor): the heartbeat also carries `seq` and this
process's own counts of reads, writes and listings (`fs_ops`), the failure record carries the
detecting moment (`wall_time`, `monotonic_time`) and `reacting_to`. GYM_TEST_CLOCK_SKEW_S shifts
this process's wall clock, the same test hook gym-agent honours (agent/ground/clock.py).

    python -m bench.anchor_agent --dir RUN_DIR --rank R --replicas N [--stale 120]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from schemas import names

SKEW = float(os.environ.get("GYM_TEST_CLOCK_SKEW_S", "0") or 0)


def wall() -> float:
    return time.time() + SKEW


class AnchorNode:
    """One node's state and steps; the process wrapper and the in-process projection both drive it."""

    def __init__(self, run_dir: Path, rank: int, count: int, *, stale: float, missing: float) -> None:
        self.dir = run_dir
        self.rank = rank
        self.count = count
        self.stale = stale
        self.missing = missing
        self.started = wall()
        self.seq = 0
        # One key per thread (the heartbeat thread reads and writes, the main loop lists), so
        # no increment is lost to a race between threads.
        self.ops = {"read": 0, "write": 0, "list": 0}
        self.failure: tuple[str, dict | None] | None = None
        self.failed_at: tuple[float, float] | None = None

    def _fail(self, error: str, reacting_to: dict | None = None) -> None:
        if self.failure is None:
            self.failure = (error, reacting_to)
            self.failed_at = (wall(), time.monotonic())

    def beat_and_check(self) -> None:
        """One heartbeat interval: write our heartbeat, then read every peer's."""
        self.seq += 1
        doc = {"time": wall(), "rank": self.rank, "seq": self.seq, "fs_ops": dict(self.ops)}
        # The anchor keeps one flat directory; its heartbeat files carry the same names as ours.
        leaf = names.leaf(names.heartbeat(self.rank))
        path = self.dir / leaf
        tmp = self.dir / f".{leaf}.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        self.ops["write"] += 1
        now = wall()
        for peer in range(self.count):
            if peer == self.rank:
                continue
            self.ops["read"] += 1
            try:
                with open(self.dir / names.leaf(names.heartbeat(peer))) as fh:
                    theirs = json.load(fh)  # a partial file raises: the anchor's thread dies
            except FileNotFoundError:
                if now - self.started > self.missing:
                    self._fail(f"rank {peer}'s heartbeat is missing after {self.missing:g}s")
                continue
            age = now - float(theirs["time"])
            if age > self.stale:
                self._fail(
                    f"stale heartbeat: rank {peer}'s heartbeat is {age:.1f}s old (stale after {self.stale:g}s)",
                    {"rank": peer, "kind": "stale"},
                )

    def check_failed_files(self) -> None:
        """One main-loop pass: glob the run directory for failure files."""
        found = glob.glob(str(self.dir / "failed-*.json"))
        self.ops["list"] += 1  # counted once done, as schemas.RunDir counts a read
        for path in found:
            name = os.path.basename(path)
            if name == f"failed-{self.rank}.json":
                continue
            self._fail(f"peer failure file {name}", {"rank": int(name[len("failed-") : -len(".json")]), "kind": "peer"})
            return  # the first one of an unordered glob is the one reported

    def write_failure(self) -> None:
        assert self.failure is not None and self.failed_at is not None
        error, reacting_to = self.failure
        doc = {
            "error": error,
            "rank": self.rank,
            "reacting_to": reacting_to,
            "wall_time": self.failed_at[0],
            "monotonic_time": self.failed_at[1],
            "written_at": wall(),
        }
        (self.dir / f"failed-{self.rank}.json").write_text(json.dumps(doc))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="anchor-agent")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--replicas", type=int, required=True)
    ap.add_argument("--heartbeat", type=float, default=2.0)
    ap.add_argument("--stale", type=float, default=120.0)
    ap.add_argument("--missing", type=float, default=1200.0)
    ap.add_argument("--glob-every", type=float, default=1.0)
    ap.add_argument("--grace", type=float, default=15.0)
    args = ap.parse_args(argv)
    run_dir = Path(args.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    node = AnchorNode(run_dir, args.rank, args.replicas, stale=args.stale, missing=args.missing)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        node._fail(f"received {signal.Signals(signum).name}")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def heartbeat_loop() -> None:
        while not stop.is_set() and node.failure is None:
            node.beat_and_check()  # no try/except: one bad read ends this thread, as in the anchor
            if node.failure is not None:
                stop.set()  # wake the main loop now
            stop.wait(args.heartbeat)

    # The driver (a sleeping stand-in) runs on rank 0 in its own session, like the anchor's head.
    child = None
    if args.rank == 0:
        child = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    threading.Thread(target=heartbeat_loop, name="heartbeat", daemon=True).start()
    while not stop.is_set() and node.failure is None:
        node.check_failed_files()
        stop.wait(args.glob_every)
    node.write_failure()
    if child is not None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
            child.wait(timeout=args.grace)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        except ProcessLookupError:
            pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
