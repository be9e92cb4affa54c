"""The liveness thread on a real run directory, with peers simulated by writing their files."""

from __future__ import annotations

import time
from pathlib import Path

from agent.failure import FailureSignal
from agent.liveness import Liveness, watched_peers
from schemas import RunDir, Writer, names

FP = "f" * 64


def make(tmp_path: Path, rank: int = 0, count: int = 3, timeout: float = 1.0) -> tuple[RunDir, Liveness, FailureSignal]:
    run = RunDir.create(tmp_path, "live")
    signal = FailureSignal()
    live = Liveness(
        run,
        Writer(FP, rank, "me"),
        rank,
        count,
        heartbeat_interval=0.1,
        heartbeat_timeout=timeout,
        poll_interval=0.1,
        signal=signal,
        phase=lambda: "driver",
    )
    return run, live, signal


def beat(run: RunDir, rank: int, seq: int, skew: float = 0.0) -> None:
    run.write_artifact(
        names.heartbeat(rank),
        "heartbeat",
        Writer(FP, rank, f"p{rank}", clock_offset=skew),
        {"seq": seq, "phase": "driver"},
    )


def test_ring_watches_a_constant_number_of_peers() -> None:
    assert watched_peers(0, 1) == ()
    assert watched_peers(1, 2) == (0,)
    assert watched_peers(127, 128) == (0, 1)
    assert all(len(watched_peers(r, 500)) == 2 for r in range(500))
    watchers: dict[int, int] = {}
    for r in range(64):
        for p in watched_peers(r, 64):
            watchers[p] = watchers.get(p, 0) + 1
    assert set(watchers.values()) == {2}  # every rank is watched by exactly two others


def test_a_corrupt_read_does_not_fail_but_silence_does(tmp_path: Path) -> None:
    run, live, signal = make(tmp_path, timeout=1.0)
    live.start()
    live.start_watching()
    try:
        t0 = time.monotonic()
        seq = 0
        while time.monotonic() - t0 < 1.5:  # peers 1 and 2 beat, with a skewed wall clock and one torn file
            seq += 1
            beat(run, 1, seq, skew=3600.0)
            beat(run, 2, seq, skew=-3600.0)
            if seq == 5:
                (run.path / names.heartbeat(2)).write_bytes(b'{"seq": ')
            time.sleep(0.05)
        assert not signal.is_set(), signal.failure
        t_silent = time.monotonic()  # now peer 2 stops beating; peer 1 goes on
        while not signal.is_set() and time.monotonic() - t_silent < 5:
            seq += 1
            beat(run, 1, seq)
            time.sleep(0.05)
        took = time.monotonic() - t_silent
        failure = signal.failure
        assert failure is not None and failure.kind == "peer_silent" and failure.reacting_to["rank"] == 2
        # Never before the timeout (no false failure); the upper bound is loose because latency
        # is measured by `make bench`, not here, and a loaded CI host delays threads.
        assert 0.9 <= took <= 4.0, took
    finally:
        live.stop()


def test_a_peer_failure_record_is_seen_within_a_poll(tmp_path: Path) -> None:
    run, live, signal = make(tmp_path, timeout=60)
    live.start()
    try:
        time.sleep(0.2)
        run.write_artifact(
            names.failure(2),
            "failure",
            Writer(FP, 2, "p2"),
            {
                "kind": "driver_exit",
                "cause": "boom",
                "phase": "driver",
                "wall_time": 1.0,
                "monotonic_time": 1.0,
                "reacting_to": None,
            },
        )
        assert signal.wait(3.0), "a peer's failure record was never seen"  # latency: `make bench`
        f = signal.failure
        assert (
            f is not None
            and f.kind == "peer_failure"
            and f.reacting_to == {"rank": 2, "incarnation": "p2", "kind": "driver_exit"}
        )
    finally:
        live.stop()


def test_records_of_another_run_are_ignored(tmp_path: Path) -> None:
    run, live, signal = make(tmp_path, timeout=60)
    run.write_artifact(
        names.failure(1),
        "failure",
        Writer("e" * 64, 1, "old"),
        {
            "kind": "signal",
            "cause": "x",
            "phase": "driver",
            "wall_time": 1.0,
            "monotonic_time": 1.0,
            "reacting_to": None,
        },
    )
    live.start()
    try:
        assert not signal.wait(0.5)
    finally:
        live.stop()


def test_heartbeats_count_filesystem_operations(tmp_path: Path) -> None:
    run, live, _ = make(tmp_path, timeout=60)
    live.start()
    try:
        time.sleep(0.6)
    finally:
        live.stop()
    doc = run.read_json(names.heartbeat(0))
    assert doc is not None and doc["seq"] >= 3
    assert doc["fs_ops"]["write"] >= 2 and doc["fs_ops"]["list"] >= 2
