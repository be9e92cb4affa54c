"""A frozen peer is known in beacon_timeout, not heartbeat_timeout: its doorbell beacons AND its
heartbeat file stop. Either signal alone keeps it alive. The rules on a fake clock (tick() without
the thread); the real frozen node (agent and reaper SIGSTOPped) is tests/test_frozen_node_e2e.py."""

from __future__ import annotations

from pathlib import Path

from agent.coord.liveness import Liveness
from agent.ground.failure import FailureSignal
from schemas import RunDir
from tests.test_liveness import FakeClock, alive, beat, make_ticked

HB_TIMEOUT = 120.0
BEACON_TIMEOUT = 5.0
POLL = 0.5


def make(tmp_path: Path, beacon_timeout: float = BEACON_TIMEOUT) -> tuple[RunDir, Liveness, FailureSignal, FakeClock]:
    """The liveness loop of rank 0 (watching 1 and 2) on a fake clock, beacons on, already watching;
    the run directory is returned as a second handle (the peers' writes are not rank 0's ops)."""
    run, live, signal, clock = make_ticked(
        tmp_path, HB_TIMEOUT, fs_stall_timeout=300.0, poll=POLL, beacon_timeout=beacon_timeout
    )
    live.set_beacons(True)
    live.start_watching()
    return RunDir.open(run.path), live, signal, clock


def _until_tripped(run: RunDir, live: Liveness, clock: FakeClock, seq: dict[int, int], limit: float) -> float:
    """Peer 1 goes on beating and beaconing, peer 2 does neither; the seconds until the loop tripped
    (or `limit` passed)."""
    start = clock.t
    while not live.signal.is_set() and clock.t - start < limit:
        if round(clock.t / POLL) % 2 == 0:
            seq[1] += 1
            beat(run, 1, seq[1])
            live.notice_received(alive(1, seq[1]))
        live.tick(news=False)
        if not live.signal.is_set():
            clock.t += POLL
    return clock.t - start


def _steady(run: RunDir, live: Liveness, clock: FakeClock, seconds: float, seq: dict[int, int]) -> None:
    """Both peers beat and beacon once a second, the loop ticking every poll interval."""
    end = clock.t + seconds
    while clock.t < end:
        if round(clock.t / POLL) % 2 == 0:
            for peer in (1, 2):
                seq[peer] += 1
                beat(run, peer, seq[peer])
                live.notice_received(alive(peer, seq[peer]))
        live.tick(news=False)
        clock.t += POLL


def test_a_peer_whose_beacons_and_file_both_stop_fails_within_beacon_timeout(tmp_path: Path) -> None:
    run, live, signal, clock = make(tmp_path)
    seq = {1: 0, 2: 0}
    _steady(run, live, clock, 40.0, seq)  # 40 s: peers' files are read only every 60 s while beacons arrive
    assert not signal.is_set(), signal.failure
    took = _until_tripped(run, live, clock, seq, 60)  # peer 2 freezes: no beacon, no heartbeat
    failure = signal.failure
    assert failure is not None and failure.kind == "peer_silent", failure
    assert failure.reacting_to == {"rank": 2, "kind": "peer_silent"} and failure.peers == (2,)
    assert "no beacon and no heartbeat for" in failure.cause and "beacon_timeout 5s" in failure.cause
    # Never before beacon_timeout after its last signal (at most one interval before the freeze),
    # and within one poll interval past it: the file is read every poll while the beacon is late.
    assert BEACON_TIMEOUT - 1.0 < took <= BEACON_TIMEOUT + POLL + 1e-9, took


def test_a_last_heartbeat_written_after_the_last_beacon_does_not_delay_the_detection(tmp_path: Path) -> None:
    """The frozen node's last act was a heartbeat write newer than its last beacon: the file moved
    since that beacon, but within one interval of it, not when the observer first read it."""
    run, live, signal, clock = make(tmp_path)
    seq = {1: 0, 2: 0}
    _steady(run, live, clock, 40.0, seq)
    seq[2] += 1
    beat(run, 2, seq[2])  # written after its last beacon, then the node stops
    took = _until_tripped(run, live, clock, seq, 60)
    failure = signal.failure
    assert failure is not None and failure.reacting_to == {"rank": 2, "kind": "peer_silent"}, failure
    assert took <= BEACON_TIMEOUT + 1.0 + POLL, took


def test_either_signal_alone_keeps_a_peer_alive(tmp_path: Path) -> None:
    """Peer 1's beacons stop (a lost network path) but its file moves; peer 2's file stops (its
    filesystem stalls) but its beacons arrive. Five beacon_timeouts later nothing has failed."""
    run, live, signal, clock = make(tmp_path)
    seq = {1: 0, 2: 0}
    _steady(run, live, clock, 10.0, seq)
    end = clock.t + 6 * BEACON_TIMEOUT
    while clock.t < end:
        if round(clock.t / POLL) % 2 == 0:
            seq[1] += 1
            beat(run, 1, seq[1])  # file only
            seq[2] += 1
            live.notice_received(alive(2, seq[2]))  # beacon only: its heartbeat write hangs
        live.tick(news=False)
        clock.t += POLL
    assert not signal.is_set(), signal.failure


def test_files_only_when_beacon_timeout_is_zero(tmp_path: Path) -> None:
    """beacon_timeout = 0: a frozen peer is found by heartbeat_timeout alone, as before."""
    run, live, signal, clock = make(tmp_path, beacon_timeout=0.0)
    seq = {1: 0, 2: 0}
    _steady(run, live, clock, 10.0, seq)
    took = _until_tripped(run, live, clock, seq, 3 * HB_TIMEOUT)
    failure = signal.failure
    assert failure is not None and failure.kind == "peer_silent" and failure.reacting_to["rank"] == 2
    assert took > HB_TIMEOUT and "heartbeat has not changed" in failure.cause


def test_a_pause_of_the_observer_itself_is_not_a_frozen_peer(tmp_path: Path) -> None:
    """The observer's own loop stops for 4 beacon_timeouts (a loaded host): when it runs again the
    peers' beacons wait in its socket; it ages them from now instead of failing them."""
    run, live, signal, clock = make(tmp_path)
    seq = {1: 0, 2: 0}
    _steady(run, live, clock, 10.0, seq)
    clock.t += 4 * BEACON_TIMEOUT  # nothing ran meanwhile, here; the peers wrote their files
    for peer in (1, 2):
        seq[peer] += 1
        beat(run, peer, seq[peer])
    live.tick(news=False)  # before the doorbell thread handed over the queued beacons
    for peer in (1, 2):
        live.notice_received(alive(peer, seq[peer]))
    _steady(run, live, clock, 10.0, seq)
    assert not signal.is_set(), signal.failure
