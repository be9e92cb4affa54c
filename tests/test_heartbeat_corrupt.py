"""A live peer's heartbeat file that another writer garbles (issue 38): the watchers and the rank's
own reaper apply one rule (agent/coord/heartbeat_age.py), so the outcome does not depend on which
reads land between the garbage and the agent's own rewrites.

- files only: the garbled file counts as still; the rank is silent after heartbeat_timeout, every
  time, whatever the interleaving; the cause says the file read corrupt.
- with beacons: the rank is alive on the doorbell: ridden out (a warning), counted for the audit's
  `heartbeat.corrupt`, and its reaper does not fence it either.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agent.coord.heartbeat_age import HeartbeatAge
from agent.reaper._sidecar import HangWatch
from audit.api import audit_run
from schemas import RunDir, Writer, names
from schemas.store import JsonRead
from tests.harness import rundirs
from tests.test_liveness import FP, FakeClock, alive, beat, make_ticked

GARBAGE = b"\x00garbage\xff" * 8


def garble(run: RunDir, rank: int) -> None:
    (run.path / names.heartbeat(rank)).write_bytes(GARBAGE)


def test_the_rule_a_corrupt_read_is_never_a_change_and_taints_what_follows() -> None:
    age = HeartbeatAge(changed_at=0.0, distrust=5.0)
    assert age.observe(JsonRead({"seq": 1}), 1.0) and age.changed_at == 1.0
    assert not age.observe(JsonRead(None, corrupt=True), 2.0)
    assert not age.observe(JsonRead({"seq": 2}), 4.0), "a seq read 2 s after a corrupt read proves nothing"
    assert age.changed_at == 1.0 and age.seq == 2
    assert age.observe(JsonRead({"seq": 3}), 7.5), "clean for longer than the distrust: a change again"
    assert age.corrupt_reads == 1 and "read 1 time(s)" in age.describe_corrupt()
    assert not age.observe(JsonRead(None), 8.0)  # missing: no change, and not corrupt either
    assert age.corrupt_reads == 1
    assert not age.observe(JsonRead({"seq": 4, "incarnation": "old"}), 9.0, incarnation="mine")


# Every way the reads can fall between the garbage and the agent's rewrites: a pattern of reads
# that land on garbage (True) or on a fresh, valid heartbeat (False), repeated.
PATTERNS = [p for n in (1, 2, 3) for p in itertools.product((True, False), repeat=n) if any(p)]


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: "".join("G" if g else "v" for g in p))
def test_files_only_a_garbled_file_is_silent_after_the_timeout_whatever_the_interleaving(
    tmp_path: Path, pattern: tuple[bool, ...]
) -> None:
    run, live, signal, clock = make_ticked(tmp_path, timeout=10.0)
    live.start_watching()
    beat(run, 1, 1)
    beat(run, 2, 1)
    live.tick()
    t0 = clock.t
    for i, garbage in enumerate(itertools.islice(itertools.cycle(pattern), 40)):
        clock.t += 1.0
        beat(run, 1, i + 2)
        if garbage:
            garble(run, 2)
        else:
            beat(run, 2, i + 2)  # rank 2's agent is alive and rewrites its file
        live.tick()
        if signal.is_set():
            break
    failure = signal.failure
    assert failure is not None and failure.kind == "peer_silent" and failure.reacting_to["rank"] == 2, failure
    assert "as bytes its agent never writes" in failure.cause, failure.cause
    # The last change that counts is the last clean read before the garbage began.
    last_change = t0 + pattern.index(True)
    assert 10.0 < clock.t - last_change <= 12.0, (clock.t - t0, pattern)


def test_with_beacons_a_garbled_file_is_ridden_out_and_counted(tmp_path: Path) -> None:
    run, live, signal, clock = make_ticked(tmp_path, timeout=10.0, fs_stall_timeout=60.0)
    live.set_beacons(True)
    live.start_watching()
    for t in range(40):  # longer than the timeout, shorter than fs_stall_timeout + timeout
        beat(run, 1, t + 1)
        if t % 3:
            garble(run, 2)
        else:
            beat(run, 2, t + 1)
        live.notice_received(alive(1, t))
        live.notice_received(alive(2, t))
        live.tick()
        clock.t += 1.0
    assert not signal.is_set(), signal.failure
    counts = live.corrupt_heartbeats()
    assert set(counts) == {2} and counts[2] >= 1


def test_the_reaper_rides_a_garbled_file_out_while_its_agent_beacons_and_fences_it_otherwise(
    tmp_path: Path,
) -> None:
    run = RunDir.create(tmp_path, "reaped", mode=0o750)
    clock = FakeClock()
    with_beacons = HangWatch(run, 0, "me", timeout=10.0, poll=0.5, now=clock)
    files_only = HangWatch(run, 0, "me", timeout=10.0, poll=0.5, now=clock)
    fenced: dict[str, float] = {}
    for t in range(40):
        if t % 2:
            garble(run, 0)
        else:
            run.write_artifact(names.heartbeat(0), Writer(FP, 0, "me"), {"seq": t + 1, "phase": "driver"})
        if "beacons" not in fenced and with_beacons.check(beacon_at=clock.t - 0.5):
            fenced["beacons"] = clock.t
        if "files" not in fenced and (why := files_only.check()):
            fenced["files"] = clock.t
            assert "as bytes its agent never writes" in why
        clock.t += 1.0
    assert "beacons" not in fenced, "a reaper whose agent beacons must not fence it for a garbled file"
    assert "files" in fenced and fenced["files"] - 1000.0 <= 12.0
    # Its beacons stop (SIGSTOP): the file rule fences it, as before.
    assert with_beacons.check(beacon_at=clock.t - 11.0)


def test_the_audit_warns_of_a_garbled_heartbeat(tmp_path: Path) -> None:
    b = rundirs.success(tmp_path)
    cleanup = b.run.read_json(names.cleanup(0))
    assert cleanup is not None
    fields = {k: v for k, v in cleanup.items() if k not in ("schema", "fingerprint", "rank", "incarnation")}
    fields = {k: v for k, v in fields.items() if k in ("outcome", "groups", "leftover_pids", "doorbell")}
    b.write(names.cleanup(0), 0, {**fields, "corrupt_heartbeats": {"1": 7}})
    result = audit_run(b.path)
    [f] = [f for f in result.findings if f.code == "heartbeat.corrupt"]
    assert f.severity == "warning" and f.rank == 1 and "7 time(s)" in f.message and "rank(s) 0" in f.message
    assert result.verdict == "pass"  # a warning: the run itself succeeded
