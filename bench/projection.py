"""Projection to thousands of agents: the REAL liveness code of many agents in a few processes.

Each worker process runs `agent.coord.liveness.Liveness` threads (the agent's own class, unmodified,
through its public API: construct, start(), start_watching(), stop()) for a slice of the ranks,
every one with its own RunDir handle on one real run directory, so every heartbeat write, ring
read and failures/ listing is a real filesystem operation counted by the real RunDir. inotify is
off (`local_events=False`), as it is in effect across NFS hosts, so the real code takes its
polling path: the bound a multi-host cluster has. The anchor's loop
(bench/anchor_agent.AnchorNode) is driven the same way, one heartbeat and one glob thread per node.

Time is dilated by `scale` (heartbeat 2 s x scale, poll 1 s x scale) so thousands of agents fit
on two shared cores; operations are counted per heartbeat interval and propagation is reported
in poll intervals, both independent of the scale.

    python -m bench.projection --ours 256 1024 4096 --anchor 64 128 256 --scale 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import procstat

FP = "b" * 64


# -- worker side ---------------------------------------------------------------------------------


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _OursSlice:
    def __init__(self, path: Path, ranks: range, n: int, hb: float, poll: float, timeout: float) -> None:
        from agent.coord.liveness import Liveness
        from agent.ground.failure import FailureSignal
        from schemas import Phase, RunDir, Writer

        self.agents = []
        for r in ranks:
            sig = FailureSignal()
            live = Liveness(
                RunDir.open(path),
                Writer(FP, r, f"sim{r}"),
                r,
                n,
                heartbeat_interval=hb,
                heartbeat_timeout=timeout,
                poll_interval=poll,
                signal=sig,
                phase=lambda: str(Phase.DRIVER),
                local_events=False,  # no inotify across hosts
            )
            self.agents.append((r, live, sig))
        # Agents start spread over one heartbeat interval, as real ones do, so their polls are
        # not in phase (in phase, every agent would find a record exactly one poll late).
        for _, live, _ in self.agents:
            live.start()
            live.start_watching()
            time.sleep(hb / len(self.agents))

    def sample(self) -> list[tuple[int, int, int]]:
        return [(r, live.seq, sum(live.run_dir.ops.values())) for r, live, _ in self.agents]

    def trips(self) -> list[tuple[int, float, str]]:
        return [(r, s.failure.monotonic_time, s.failure.kind) for r, _, s in self.agents if s.failure is not None]

    def stop(self) -> None:
        for _, live, _ in self.agents:
            live.stop()


class _AnchorSlice:
    def __init__(self, path: Path, ranks: range, n: int, hb: float, poll: float, timeout: float) -> None:
        from .anchor_agent import AnchorNode

        self.nodes = [AnchorNode(path, r, n, stale=timeout, missing=1e9) for r in ranks]
        self.stop_event = threading.Event()

        def beats(node: AnchorNode) -> None:
            while node.failure is None and not self.stop_event.is_set():
                node.beat_and_check()
                self.stop_event.wait(hb)

        def globs(node: AnchorNode) -> None:
            while node.failure is None and not self.stop_event.is_set():
                node.check_failed_files()
                self.stop_event.wait(poll)

        for node in self.nodes:  # spread over one heartbeat interval, as for ours
            for fn in (beats, globs):
                threading.Thread(target=fn, args=(node,), daemon=True).start()
            time.sleep(hb / len(self.nodes))

    def sample(self) -> list[tuple[int, int, int]]:
        return [(nd.rank, nd.seq, sum(nd.ops.values())) for nd in self.nodes]

    def trips(self) -> list[tuple[int, float, str]]:
        return [(nd.rank, nd.failed_at[1], nd.failure[0][:40]) for nd in self.nodes if nd.failed_at and nd.failure]

    def stop(self) -> None:
        self.stop_event.set()


def worker(args: argparse.Namespace) -> int:
    _raise_fd_limit()
    threading.stack_size(256 * 1024)
    cls = _OursSlice if args.protocol == "ours" else _AnchorSlice
    sl = cls(Path(args.dir), range(args.lo, args.hi), args.n, args.hb, args.poll, args.timeout)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "sample":
            print(json.dumps({"sample": sl.sample()}), flush=True)
        elif cmd == "trips":
            print(json.dumps({"trips": sl.trips()}), flush=True)
        elif cmd == "stop":
            break
    sl.stop()
    return 0


# -- coordinator side ----------------------------------------------------------------------------


class _Worker:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, cmd: str, timeout: float = 120.0) -> dict:
        assert self.proc.stdin and self.proc.stdout
        if cmd:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError(f"projection worker did not answer {cmd or 'start'!r} in {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"projection worker exited (code {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        try:
            assert self.proc.stdin
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def run(protocol: str, n: int, *, scale: float, procs: int, root: Path, window_beats: int = 3) -> dict:
    hb, poll = 2.0 * scale, 1.0 * scale
    timeout = 60 * hb  # the default ratio (120 s / 2 s)
    with tempfile.TemporaryDirectory(prefix=f"gym-proj-{protocol}-", dir=root) as tmp:
        if protocol == "ours":
            from schemas import RunDir

            run_dir = RunDir.create(tmp, "proj", mode=0o750)
            path = run_dir.path
        else:
            path = Path(tmp) / "anchor"
            path.mkdir()
        bounds = [n * i // procs for i in range(procs + 1)]
        workers = []
        try:
            for lo, hi in zip(bounds, bounds[1:], strict=False):
                argv = [sys.executable, "-m", "bench.projection", "worker", "--protocol", protocol, "--dir", str(path)]
                argv += ["--lo", str(lo), "--hi", str(hi), "--n", str(n), "--hb", str(hb), "--poll", str(poll)]
                workers.append(_Worker([*argv, "--timeout", str(timeout)]))
            for w in workers:
                w.ask("", timeout=300)
            time.sleep(2 * hb)  # every ring successor has beaten at least once
            s0 = {r: (seq, ops) for w in workers for r, seq, ops in w.ask("sample")["sample"]}
            cpu0, t0 = sum(procstat.cpu_seconds(w.proc.pid) or 0.0 for w in workers), time.monotonic()
            time.sleep(window_beats * hb)
            s1 = {r: (seq, ops) for w in workers for r, seq, ops in w.ask("sample")["sample"]}
            cpu1, t1 = sum(procstat.cpu_seconds(w.proc.pid) or 0.0 for w in workers), time.monotonic()
            beats, per_agent = [], []
            for r, (seq1, ops1) in s1.items():
                seq0, ops0 = s0[r]
                if seq1 > seq0:
                    per_agent.append((ops1 - ops0) / (seq1 - seq0))
                beats.append(seq1 - seq0)
            total = sum(per_agent)
            false_trips = [t for w in workers for t in w.ask("trips")["trips"]]

            victim = n // 2
            t_write = time.monotonic()
            if protocol == "ours":
                from agent.coord.failure_record import write_failure_record
                from agent.ground.failure import Failure
                from schemas import FailureKind, Phase, Writer

                # The victim's own SIGTERM record, written the way its lifecycle writes it.
                sigterm = Failure(
                    kind=FailureKind.SIGNAL, cause="received SIGTERM", phase=str(Phase.DRIVER), monotonic_time=t_write
                )
                if not write_failure_record(
                    run_dir, Writer(FP, victim, f"sim{victim}"), victim, sigterm, str(Phase.DRIVER)
                ):
                    raise OSError(f"could not write rank {victim}'s failure record in {path}")
            else:
                (path / f"failed-{victim}.json").write_text(json.dumps({"error": "received SIGTERM"}))
            deadline = time.monotonic() + 4 * poll + 30
            trips: list = []
            while time.monotonic() < deadline:
                trips = [t for w in workers for t in w.ask("trips")["trips"] if t[0] != victim]
                if len(trips) >= n - 1:
                    break
                time.sleep(min(1.0, poll / 4))
            detect = sorted(t[1] - t_write for t in trips)
        finally:
            for w in workers:
                w.close()
            if protocol == "ours":
                run_dir.close()
    steady_s = t1 - t0
    return {
        "protocol": protocol,
        "n": n,
        "scale": scale,
        "heartbeat_interval_s": hb,
        "poll_interval_s": poll,
        "processes": procs,
        "ops_per_interval": total,
        "ops_per_agent": total / n,
        # The typical agent's: one agent starved at the window's edge (few beats, its polls going on)
        # moves the mean, not this.
        "ops_per_agent_median": statistics.median(per_agent) if per_agent else None,
        "min_beats_in_window": min(beats),
        "expected_beats_in_window": window_beats,
        "cpu_fraction_of_one_core": (cpu1 - cpu0) / steady_s,
        "false_failures": len(false_trips),
        "tripped": len(detect),
        "detect_p50_polls": detect[len(detect) // 2] / poll if detect else None,
        "detect_max_polls": detect[-1] / poll if detect else None,
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "worker":
        ap = argparse.ArgumentParser()
        for k in ("--protocol", "--dir"):
            ap.add_argument(k, required=True)
        for k in ("--lo", "--hi", "--n"):
            ap.add_argument(k, type=int, required=True)
        for k in ("--hb", "--poll", "--timeout"):
            ap.add_argument(k, type=float, required=True)
        return worker(ap.parse_args(argv[1:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", type=int, nargs="*", default=[256, 1024])
    ap.add_argument("--anchor", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--scale", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args(argv)
    for protocol, sizes in (("ours", args.ours), ("anchor", args.anchor)):
        for n in sizes:
            print(json.dumps(run(protocol, n, scale=args.scale, procs=args.procs, root=args.root)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
