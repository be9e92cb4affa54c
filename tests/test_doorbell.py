"""The doorbell's wire format, its secret, and two real doorbell threads on loopback sockets."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.coord.doorbell import Doorbell, PeerBell
from agent.coord.doorbell_msg import (
    MAX_DATAGRAM,
    Drop,
    Dropped,
    Notice,
    NoticeType,
    Ring,
    check_peer,
    decode,
    encode,
)
from agent.coord.doorbell_secret import SecretUnavailable, ensure_secret, secret_mode
from schemas import RunDir, names

SECRET = bytes(range(32))
RING = Ring(
    run="run-1",
    attempt=1,
    sender=2,
    incarnation="aaaa",
    seq=1,
    sent_at=1.5,
    failed_rank=0,
    failed_incarnation="bbbb",
    kind="driver_exit",
    cause="the driver exited 1",
)
PEERS = {0: "bbbb", 1: "cccc", 2: "aaaa"}


def dropped(data: bytes, secret: bytes = SECRET, run: str = "run-1") -> Drop:
    with pytest.raises(Dropped) as info:
        decode(data, secret, run)
    return info.value.reason


def test_round_trip() -> None:
    data = encode(RING, SECRET)
    assert len(data) <= MAX_DATAGRAM
    assert decode(data, SECRET, "run-1") == RING
    check_peer(RING, 1, PEERS)  # known ranks at their incarnations: accepted
    for notice in (
        Notice(
            type=NoticeType.ALIVE,
            run="run-1",
            attempt=1,
            sender=2,
            incarnation="aaaa",
            seq=9,
            sent_at=1.5,
            hb_seq=41,
            fs_busy=12.25,
        ),
        Notice(type=NoticeType.COMPLETE, run="run-1", attempt=1, sender=0, incarnation="bbbb", seq=3, sent_at=1.5),
    ):
        assert decode(encode(notice, SECRET), SECRET, "run-1") == notice
        check_peer(notice, 1, PEERS)
    with pytest.raises(Dropped):
        check_peer(
            Notice(type=NoticeType.ALIVE, run="run-1", attempt=1, sender=2, incarnation="old0", seq=9, sent_at=1.5),
            1,
            PEERS,
        )


def test_wrong_secret_truncated_altered_and_oversize_are_dropped() -> None:
    data = encode(RING, SECRET)
    assert dropped(data, secret=bytes(32)) is Drop.BAD_MAC
    assert dropped(data[:-1]) is Drop.BAD_MAC  # truncated: the tag no longer matches
    assert dropped(data[:10]) is Drop.MALFORMED
    flipped = bytearray(data)
    flipped[20] ^= 1
    assert dropped(bytes(flipped)) is Drop.BAD_MAC
    assert dropped(b"x" * (MAX_DATAGRAM + 1)) is Drop.OVERSIZE
    assert dropped(b"") is Drop.MALFORMED


def test_another_run_and_a_stale_incarnation_or_attempt_are_dropped() -> None:
    assert dropped(encode(RING, SECRET), run="run-2") is Drop.OTHER_RUN
    for old, reason in (
        (replace(RING, incarnation="old0"), Drop.STALE),  # the sender's previous incarnation (a replay)
        (replace(RING, failed_incarnation="old0"), Drop.STALE),  # a failure of an incarnation gone
        (replace(RING, attempt=2), Drop.STALE),
        (replace(RING, sender=7), Drop.UNKNOWN_RANK),
    ):
        with pytest.raises(Dropped) as info:
            check_peer(decode(encode(old, SECRET), SECRET, "run-1"), 1, PEERS)
        assert info.value.reason is reason


def test_an_authenticated_body_of_the_wrong_shape_is_malformed() -> None:
    import hashlib
    import hmac

    from agent.coord.doorbell_msg import MAGIC

    for body in (b"[1]", b"{}", b'{"kind": "no_such_kind"}', b"not json"):
        signed = MAGIC + body
        assert dropped(signed + hmac.new(SECRET, signed, hashlib.sha256).digest()) is Drop.MALFORMED
    assert dropped(encode(replace(RING, kind="bogus"), SECRET)) is Drop.MALFORMED


def test_a_long_cause_is_cut_to_fit() -> None:
    long = replace(RING, cause="é" * 5000)
    data = encode(long, SECRET)
    assert len(data) <= MAX_DATAGRAM
    ring = decode(data, SECRET, "run-1")
    assert ring.cause and long.cause.startswith(ring.cause)


@given(st.binary(max_size=MAX_DATAGRAM + 50))
def test_random_bytes_never_raise_anything_but_dropped(data: bytes) -> None:
    with pytest.raises(Dropped):
        decode(data, SECRET, "run-1")


def test_the_secret_is_created_once_with_the_run_directory_trust(tmp_path: Path) -> None:
    assert secret_mode(0o750) == 0o600 and secret_mode(0o770) == 0o640 and secret_mode(0o700) == 0o600
    old = os.umask(0o077)  # the exact mode, whatever the umask
    try:
        run = RunDir.create(tmp_path, "s", mode=0o770)
        first = ensure_secret(run)
        assert ensure_secret(RunDir.open(run.path)) == first and len(first) == 32
    finally:
        os.umask(old)
    path = run.path / names.DOORBELL_SECRET
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    # More open than the run directory allows: refused (the doorbell stays off).
    os.chmod(path, 0o644)
    with pytest.raises(SecretUnavailable, match="more open"):
        ensure_secret(run)
    path.chmod(0o600)
    path.write_text("short\n")
    with pytest.raises(SecretUnavailable, match="hex secret"):
        ensure_secret(run)


def bell_pair(
    events: list[Ring], notices: dict[int, list[Notice]] | None = None, beacon_every: float | None = None
) -> tuple[Doorbell, Doorbell]:
    """Two started doorbells, ranks 0 and 1; with `notices`, each collects its own and (with
    `beacon_every`) rank 1 beacons to rank 0, its watcher, with status (7, 2.5)."""
    a, _ = Doorbell.bind("127.0.0.1")
    b, _ = Doorbell.bind("127.0.0.1")
    assert a is not None and b is not None
    stopping = threading.Event()
    for bell, rank, inc, watchers in ((a, 0, "inc0", ()), (b, 1, "inc1", (0,))):
        bell.arm(
            SECRET,
            run="run-1",
            attempt=1,
            rank=rank,
            incarnation=inc,
            on_ring=events.append,
            stopping=stopping.is_set,
            on_notice=notices[rank].append if notices is not None else None,
            status=lambda: (7, 2.5),
            beacon_every=beacon_every,
        )
        bell.set_peers([PeerBell(0, "127.0.0.1", a.port, "inc0"), PeerBell(1, "127.0.0.1", b.port, "inc1")], watchers)
        bell.start()
    return a, b


def wait_for(cond: object, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def test_a_ring_reaches_the_peer_and_garbage_is_counted() -> None:
    events: list[Ring] = []
    a, b = bell_pair(events)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as foreign:
            for data in (b"junk", os.urandom(MAX_DATAGRAM + 10), encode(replace(RING, run="run-1"), bytes(32))):
                foreign.sendto(data, ("127.0.0.1", b.port))
            stale = replace(RING, sender=0, incarnation="old", failed_rank=0, failed_incarnation="inc0")
            foreign.sendto(encode(stale, SECRET), ("127.0.0.1", b.port))
        wait_for(lambda: sum(b.dropped.values()) == 4)
        assert dict(b.dropped) == {"malformed": 1, "oversize": 1, "bad_mac": 1, "stale": 1}
        started = time.monotonic()
        a.ring(0, "inc0", "driver_exit", "the driver exited 1")
        wait_for(lambda: events)
        assert time.monotonic() - started < 1.0
        ring = events[0]
        assert (ring.sender, ring.failed_rank, ring.kind, ring.cause) == (0, 0, "driver_exit", "the driver exited 1")
        # Every copy is accepted here (this listener does not stop); an agent's signal trips once.
        wait_for(lambda: b.summary()["accepted"] == 3)
        assert b.summary()["received"] == 4 + 3
    finally:
        a.stop()
        b.stop()
        a.join(2)
        b.join(2)
    assert not a.is_alive() and not b.is_alive()
    assert a.summary()["sent"] == 3 and a.summary()["rings"] == 1


def armed_bells(count: int, events: dict[int, list[Ring]]) -> list[Doorbell]:
    """`count` started doorbells, ranks 0.., armed but with no peers yet (before rendezvous)."""
    bells = []
    for rank in range(count):
        bell, _ = Doorbell.bind("127.0.0.1")
        assert bell is not None
        events[rank] = []
        bell.arm(
            SECRET,
            run="run-1",
            attempt=1,
            rank=rank,
            incarnation=f"inc{rank}",
            on_ring=events[rank].append,
            stopping=lambda: False,
        )
        bell.start()
        bells.append(bell)
    return bells


def peers_of(bells: list[Doorbell], ranks: list[int]) -> list[PeerBell]:
    return [PeerBell(r, "127.0.0.1", bells[r].port, f"inc{r}") for r in ranks]


def stop_all(bells: list[Doorbell]) -> None:
    for bell in bells:
        bell.stop()
    for bell in bells:
        bell.join(2)
    assert not any(bell.is_alive() for bell in bells)


def test_a_ring_during_rendezvous_reaches_the_peers_read_so_far() -> None:
    """Rank 0 fails while its rendezvous has read ranks 0 and 1 only (rank 2's address record is
    not visible to it yet): rank 1 hears it at once; rank 2, unknown to rank 0, is not rung."""
    events: dict[int, list[Ring]] = {}
    bells = armed_bells(3, events)
    try:
        bells[0].set_peers(peers_of(bells, [0, 1]), partial=True)
        bells[1].set_peers(peers_of(bells, [0, 1]), partial=True)
        bells[2].set_peers(peers_of(bells, [0, 1, 2]))
        bells[0].ring(0, "inc0", "data", "train.jsonl names an unknown binding")
        wait_for(lambda: events[1])
        assert (events[1][0].failed_rank, events[1][0].kind) == (0, "data")
        wait_for(lambda: bells[0].summary()["sent"] == 3)  # three copies, to rank 1 alone
        time.sleep(0.2)
        assert not events[2] and bells[2].summary()["received"] == 0
    finally:
        stop_all(bells)


def test_a_ring_from_a_rank_not_read_yet_is_held_until_rendezvous_names_it() -> None:
    """Rank 1's rendezvous has read rank 2 but not rank 0 when rank 0's ring arrives: it is held,
    not dropped, and acted on once rank 0's address record is read. A stale incarnation of a rank
    already read is still dropped."""
    events: dict[int, list[Ring]] = {}
    bells = armed_bells(3, events)
    try:
        bells[0].set_peers(peers_of(bells, [0, 1, 2]))
        bells[1].set_peers(peers_of(bells, [1, 2]), partial=True)
        bells[0].ring(0, "inc0", "driver_exit", "the driver exited 1")
        wait_for(lambda: bells[1].summary()["received"] == 3)
        time.sleep(0.1)
        assert not events[1] and not bells[1].dropped
        bells[1].set_peers(peers_of(bells, [0, 1, 2]), partial=True)
        wait_for(lambda: events[1])
        assert events[1][0].failed_rank == 0 and not bells[1].dropped
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as foreign:
            stale = replace(RING, sender=2, incarnation="old", failed_rank=2, failed_incarnation="old")
            foreign.sendto(encode(stale, SECRET), ("127.0.0.1", bells[1].port))
        wait_for(lambda: bells[1].dropped["stale"] == 1)
    finally:
        stop_all(bells)


def test_beacons_go_to_the_watchers_and_complete_wakes_every_peer() -> None:
    """Two real doorbells: b beacons to a (its watcher) every 0.05 s with b's status; a, which b
    does not watch, sends none to b; a's `complete` reaches b. A forged beacon is dropped."""
    got: dict[int, list[Notice]] = {0: [], 1: []}
    a, b = bell_pair([], got, beacon_every=0.05)
    try:
        wait_for(lambda: len(got[0]) >= 5)
        beacon = got[0][0]
        assert (beacon.type, beacon.sender, beacon.hb_seq, beacon.fs_busy) == (NoticeType.ALIVE, 1, 7, 2.5)
        a.complete()
        wait_for(lambda: any(n.type is NoticeType.COMPLETE for n in got[1]))
        assert all(n.type is NoticeType.COMPLETE for n in got[1])  # no beacon to a rank that does not watch
        forged = Notice(
            type=NoticeType.ALIVE,
            run="run-1",
            attempt=1,
            sender=1,
            incarnation="inc1",
            seq=1,
            sent_at=0.0,
            hb_seq=1,
            fs_busy=0.0,
        )
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as foreign:
            foreign.sendto(encode(forged, bytes(32)), ("127.0.0.1", a.port))
        wait_for(lambda: a.dropped["bad_mac"] == 1)
    finally:
        for bell in (a, b):
            bell.stop()
            bell.join(2)
    assert b.summary()["beacons_sent"] >= 5 and a.summary()["beacons_received"] >= 5
    assert a.summary()["beacons_sent"] == 0 and a.summary()["accepted"] == 0  # notices are no rings


def test_a_stopping_doorbell_sends_no_beacons_and_sleeps() -> None:
    """Once the agent stops, no beacon is ever due again: the thread sleeps until it is woken
    (a due beacon it would not send kept 128 stopping agents' threads spinning)."""
    stopping = threading.Event()
    bell, _ = Doorbell.bind("127.0.0.1")
    assert bell is not None
    bell.arm(
        SECRET,
        run="r",
        attempt=1,
        rank=0,
        incarnation="i",
        on_ring=lambda _r: None,
        stopping=stopping.is_set,
        beacon_every=0.05,
    )
    bell.set_peers([PeerBell(0, "127.0.0.1", bell.port, "i"), PeerBell(1, "127.0.0.1", 9, "j")], watchers=(1,))
    bell.start()
    try:
        wait_for(lambda: bell.summary()["beacons_sent"] >= 2)
        stopping.set()
        time.sleep(0.2)
        sent = bell.summary()["beacons_sent"]
        time.sleep(0.2)
        assert bell.summary()["beacons_sent"] == sent
        assert bell._next_due() is None  # nothing due: the loop blocks in poll(2) without a timeout
    finally:
        bell.stop()
        bell.join(2)


def test_rings_that_cannot_be_sent_are_counted_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """Sending refused (EACCES: a broadcast address without SO_BROADCAST, as a firewall's EPERM):
    counted, said once, and the thread goes on."""
    bell, _ = Doorbell.bind("127.0.0.1")
    assert bell is not None
    bell.arm(SECRET, run="r", attempt=1, rank=0, incarnation="i", on_ring=lambda _r: None, stopping=lambda: False)
    bell.set_peers([PeerBell(1, "255.255.255.255", 9, "j")])
    bell.start()
    with caplog.at_level("WARNING"):
        bell.ring(0, "i", "signal", "SIGTERM")
        bell.ring(0, "i", "signal", "SIGTERM")
        time.sleep(0.3)
        bell.stop()
        bell.join(2)
    said = [r for r in caplog.records if "doorbell" in r.getMessage()]
    assert len(said) == 1, said
    summary = bell.summary()
    assert summary["sent"] == 0 and summary["rings"] == 2 and summary["send_errors"] == 6


def test_an_address_that_cannot_be_bound_leaves_the_doorbell_off() -> None:
    bell, why = Doorbell.bind("no-such-host.invalid")
    assert bell is None and "no-such-host.invalid" in why


def test_a_ring_and_a_listed_record_get_the_same_reaction(tmp_path: Path) -> None:
    """Liveness reacts to a ring exactly as to the record it announces: one story for the audit."""
    from agent.coord.liveness import Liveness
    from agent.ground.failure import FailureSignal
    from schemas import Writer

    fp = "f" * 64
    reactions = []
    for how in ("file", "ring"):
        run = RunDir.create(tmp_path / how, "same", mode=0o750)
        signal = FailureSignal()
        live = Liveness(
            run,
            Writer(fp, 1, "me"),
            1,
            3,
            heartbeat_interval=0.1,
            heartbeat_timeout=10,
            poll_interval=0.1,
            signal=signal,
            phase=lambda: "driver",
        )
        if how == "file":
            fields = {"kind": "driver_exit", "cause": "the driver exited 1", "phase": "driver"}
            fields |= {"wall_time": 1.0, "monotonic_time": 1.0, "reacting_to": None}
            run.write_artifact(names.failure(0), Writer(fp, 0, "bbbb"), fields)
            live.tick()
        else:
            live.ring_received(replace(RING, failed_incarnation="bbbb"))
        failure = signal.failure
        assert failure is not None
        reactions.append((failure.kind, failure.cause, failure.reacting_to, failure.peers, failure.reacted_cause))
    assert reactions[0] == reactions[1]
    assert reactions[0][2] == {"rank": 0, "incarnation": "bbbb", "kind": "driver_exit"}
