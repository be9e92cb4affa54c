"""The liveness thread on a real run directory, with peers simulated by writing their files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent.coord.doorbell_msg import Notice, NoticeType
from agent.coord.liveness import Liveness, watched_peers
from agent.ground.failure import FailureSignal
from schemas import RunDir, Writer, names

FP = "f" * 64


def make(tmp_path: Path, rank: int = 0, count: int = 3, timeout: float = 1.0) -> tuple[RunDir, Liveness, FailureSignal]:
    run = RunDir.create(tmp_path, "live", mode=0o750)
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


# --- the same rules on a fake clock: tick() without the thread ---------------------------------


class FakeClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_ticked(
    tmp_path: Path,
    timeout: float = 10.0,
    fs_stall_timeout: float | None = None,
    *,
    poll: float = 0.5,
    beacon_timeout: float = 0.0,
) -> tuple[RunDir, Liveness, FailureSignal, FakeClock]:
    run = RunDir.create(tmp_path, "ticked", mode=0o750)
    signal = FailureSignal()
    clock = FakeClock()
    live = Liveness(
        run,
        Writer(FP, 0, "me"),
        0,
        3,
        heartbeat_interval=1.0,
        heartbeat_timeout=timeout,
        poll_interval=poll,
        signal=signal,
        phase=lambda: "driver",
        now=clock,
        fs_stall_timeout=fs_stall_timeout,
        beacon_timeout=beacon_timeout,
    )
    return run, live, signal, clock


def alive(sender: int, hb_seq: int, fs_busy: float = 0.0) -> Notice:
    return Notice(
        type=NoticeType.ALIVE,
        run="ticked",
        attempt=1,
        sender=sender,
        incarnation=f"p{sender}",
        seq=hb_seq,
        sent_at=0.0,
        hb_seq=hb_seq,
        fs_busy=fs_busy,
    )


def test_a_peer_alive_on_the_doorbell_is_ridden_out_then_fails_as_fs_stall(tmp_path: Path) -> None:
    """Peer 2's heartbeat file stops changing (its mount hangs) while its beacons arrive: no
    peer_silent; past fs_stall_timeout + heartbeat_timeout the run fails as fs_stall naming it.
    Peer 1 stops both: silent as ever."""
    run, live, signal, clock = make_ticked(tmp_path, timeout=10.0, fs_stall_timeout=30.0)
    live.set_beacons(True)
    live.start_watching()
    t0 = clock.t
    beat(run, 1, 1)
    beat(run, 2, 1)
    for t in range(60):
        beat(run, 1, t + 2)
        live.notice_received(alive(1, t))
        live.notice_received(alive(2, t, fs_busy=float(t)))
        live.tick()
        if signal.is_set():
            break
        clock.t += 1.0
    failure = signal.failure
    assert failure is not None and failure.kind == "fs_stall", failure
    assert failure.peers == (2,) and "rank 2 answers on the doorbell" in failure.cause
    assert 40.0 < clock.t - t0 <= 46.0, clock.t - t0  # 30 s + 10 s, seen at the next read (every 5 s)

    run2, live2, signal2, clock2 = make_ticked(tmp_path / "b", timeout=10.0, fs_stall_timeout=30.0)
    live2.set_beacons(True)
    live2.start_watching()
    for t in range(30):  # peer 1 beats and rings; peer 2 does neither after the first second
        beat(run2, 1, t + 1)
        live2.notice_received(alive(1, t))
        if t == 0:
            beat(run2, 2, 1)
            live2.notice_received(alive(2, t))
        live2.tick()
        if signal2.is_set():
            break
        clock2.t += 1.0
    failure = signal2.failure
    assert failure is not None and failure.kind == "peer_silent" and failure.reacting_to["rank"] == 2


def test_while_beacons_arrive_the_files_are_only_the_backstop(tmp_path: Path) -> None:
    """Steady state, 20 heartbeat intervals: without beacons every poll lists failures/ and every
    interval reads both peers; with them one listing per interval and a read per timeout / 2."""

    def ops(beacons: bool, where: Path) -> dict[str, int]:
        ours, live, signal, clock = make_ticked(where, timeout=10.0)
        run = RunDir.open(ours.path)  # the peers' writes: not counted as this agent's operations
        live.set_beacons(beacons)
        live.start_watching()
        for t in range(3):
            beat(run, 1, t + 1)
            beat(run, 2, t + 1)
            live.notice_received(alive(1, t))
            live.notice_received(alive(2, t))
            live.tick()
            clock.t += 0.5
        before = dict(ours.ops)
        for t in range(40):  # 20 s on a 0.5 s step: every poll interval
            if t % 2 == 0:
                beat(run, 1, t + 10)
                beat(run, 2, t + 10)
                live.notice_received(alive(1, t))
                live.notice_received(alive(2, t))
            live.tick(news=False)
            clock.t += 0.5
        assert not signal.is_set(), signal.failure
        return {k: ours.ops[k] - before.get(k, 0) for k in ("read", "write", "list")}

    files_only = ops(False, tmp_path / "a")
    carried = ops(True, tmp_path / "b")
    assert files_only["write"] == carried["write"] == 20  # one heartbeat per interval either way
    assert files_only["list"] == 40 and files_only["read"] == 40
    assert carried["list"] == 20
    assert 6 <= carried["read"] <= 10  # each peer once per 5 s
    assert sum(carried.values()) / 20 <= 4.0


def test_silence_fails_exactly_after_the_timeout_on_the_observers_clock(tmp_path: Path) -> None:
    run, live, signal, clock = make_ticked(tmp_path, timeout=10.0)
    live.start_watching()
    for seq in range(1, 31):  # 30 s: both peers beat, with wall clocks an hour apart; one torn file
        beat(run, 1, seq, skew=3600.0)
        beat(run, 2, seq, skew=-3600.0)
        if seq == 5:
            (run.path / names.heartbeat(2)).write_bytes(b'{"seq": ')
        live.tick()
        clock.t += 1.0
    assert not signal.is_set(), signal.failure
    last_change = clock.t - 1.0  # the tick that last saw peer 2's sequence move
    seq = 30
    while clock.t - last_change <= 10.0:  # peer 2 is silent now; peer 1 goes on
        seq += 1
        beat(run, 1, seq)
        live.tick()
        assert not signal.is_set(), f"failed early, {clock.t - last_change:.0f}s after the last change"
        clock.t += 1.0
    live.tick()
    failure = signal.failure
    assert failure is not None and failure.kind == "peer_silent" and failure.reacting_to["rank"] == 2
    assert failure.peers == (2,)


def test_no_silence_failure_before_watching_or_after_stop_watching(tmp_path: Path) -> None:
    _, live, signal, clock = make_ticked(tmp_path, timeout=2.0)
    for _ in range(10):  # nobody beats, but rendezvous is not over: the startup deadline rules
        live.tick()
        clock.t += 1.0
    assert not signal.is_set()
    live.start_watching()
    live.stop_watching()  # every replica acknowledged: peers may exit
    for _ in range(10):
        live.tick()
        clock.t += 1.0
    assert not signal.is_set()


def test_tick_beats_once_per_interval_and_finds_failure_records(tmp_path: Path) -> None:
    run, live, signal, clock = make_ticked(tmp_path)
    assert live.tick() == 0.5  # beat now; next look at failures after one poll interval
    assert live.tick() == 0.5 and live.seq == 1  # no second beat within the interval
    clock.t += 1.0
    live.tick()
    assert live.seq == 2 and run.read_json(names.heartbeat(0))["seq"] == 2
    (run.path / names.FAILURES_DIR / names.temp_name(names.leaf(names.failure(1)), "0" * 12)).write_text("{")
    run.write_artifact(
        names.failure(0),
        Writer(FP, 0, "me"),
        {
            "kind": "signal",
            "cause": "ours",
            "phase": "driver",
            "wall_time": 1.0,
            "monotonic_time": 1.0,
            "reacting_to": None,
        },
    )
    live.tick()
    assert not signal.is_set()  # our own record and a temp file are no peer failure
    run.write_artifact(
        names.failure(2),
        Writer(FP, 2, "p2"),
        {
            "kind": "judge",
            "cause": "x",
            "phase": "driver",
            "wall_time": 1.0,
            "monotonic_time": 1.0,
            "reacting_to": None,
        },
    )
    live.tick()
    f = signal.failure
    assert (
        f is not None
        and f.kind == "peer_failure"
        and f.reacting_to == {"rank": 2, "incarnation": "p2", "kind": "judge"}
    )


def test_a_reaction_listed_first_is_followed_to_the_failure_it_names(tmp_path: Path) -> None:
    """In a fast wave rank 1's reaction to rank 2 can be listed before rank 2's own record
    (names sort by rank): the record we write must name rank 2's failure, not rank 1's reaction."""
    run, live, signal, _clock = make_ticked(tmp_path)
    live.count = 4
    base = {"phase": "driver", "wall_time": 1.0, "monotonic_time": 1.0, "reacting_to": None}
    run.write_artifact(names.failure(3), Writer(FP, 3, "p3"), {**base, "kind": "judge_health", "cause": "root"})
    run.write_artifact(
        names.failure(1),
        Writer(FP, 1, "p1"),
        {
            **base,
            "kind": "peer_failure",
            "cause": "rank 3 failed",
            "reacting_to": {"rank": 3, "incarnation": "p3", "kind": "judge_health"},
            "peers": [3],
        },
    )
    live.tick()
    f = signal.failure
    assert f is not None and f.reacting_to == {"rank": 3, "incarnation": "p3", "kind": "judge_health"}
    assert f.cause == "rank 3 failed (judge_health): root" and f.peers == (3,)


def test_a_reaction_whose_target_is_not_visible_yet_is_taken_at_its_word(tmp_path: Path) -> None:
    """Rank 0 reacted to rank 1 (heard on the doorbell), and rank 1's record (its reaper's) is not
    written yet: our record names rank 1's failure as rank 0's record quotes it, not rank 0's reaction."""
    run, live, signal, _clock = make_ticked(tmp_path)
    run.write_artifact(
        names.failure(2),
        Writer(FP, 2, "p2"),
        {
            "phase": "driver",
            "wall_time": 1.0,
            "monotonic_time": 1.0,
            "kind": "peer_failure",
            "cause": "rank 1 failed (agent_died): agent process 7 of rank 1 died",
            "reacting_to": {"rank": 1, "incarnation": "p1", "kind": "agent_died"},
            "peers": [1],
        },
    )
    live.tick()
    f = signal.failure
    assert f is not None and f.reacting_to == {"rank": 1, "incarnation": "p1", "kind": "agent_died"}
    assert f.cause == "rank 1 failed (agent_died): agent process 7 of rank 1 died" and f.peers == (1,)


def test_a_damaged_peer_record_is_still_a_peer_failure(tmp_path: Path) -> None:
    """A peer's record with values of the wrong type (torn, hand-edited, a bug of another version)
    still stops this agent as that peer's failure; the watcher never dies on reading it."""
    run, live, signal, _clock = make_ticked(tmp_path)
    damaged = {"fingerprint": FP, "incarnation": "p2", "kind": "peer_failure", "cause": 7, "reacting_to": "rank 1"}
    (run.path / names.failure(2)).write_text(json.dumps(damaged))  # beside the schema: written raw
    live.tick()
    f = signal.failure
    assert f is not None and f.kind == "peer_failure" and f.peers == (2,)
    assert f.reacting_to == {"rank": 2, "incarnation": "p2", "kind": "peer_failure"}
    assert f.cause == "rank 2 failed (peer_failure): (no cause recorded)"
