"""The host's Ray start slots (agent/proc/start_slots.py), held by real processes: a held slot makes
the next start wait, the holder's end (SIGKILL included) frees it at once, a child started while it is
held does not keep it, a second slot lets a second start through, and without a usable directory
or past its deadline a start goes ungated and says why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.ground import clock
from agent.proc import start_slots

ROOT = Path(__file__).resolve().parents[1]

# Holds a slot of `argv[2]` slots under `argv[1]`, starts a long-lived child while holding it (as the
# agent starts `ray start`), prints the child's pid, and keeps the slot until stdin closes.
HOLDER = """
import subprocess, sys, time
from agent.proc import start_slots
slot = start_slots.acquire("ray", deadline=time.monotonic() + 30, wait=time.sleep,
                           slots=int(sys.argv[2]), parent=sys.argv[1])
assert slot.lock is not None, slot.why
child = subprocess.Popen(["sleep", "60"])
print(child.pid, flush=True)
sys.stdin.read()
"""


def no_wait(_seconds: float) -> None:
    raise AssertionError("waited for a slot that should have been free")


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def hold(procs: list[subprocess.Popen[str]], parent: Path, slots: int) -> tuple[subprocess.Popen[str], int]:
    """A real process holding one slot; returns it and the pid of the child it started."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(parent), str(slots)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"the holder did not take its slot: {line!r}"
    return proc, int(line)


def test_a_held_slot_makes_the_next_start_wait_until_its_holder_is_killed(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    holder, child = hold(holders, tmp_path, slots=1)
    waits: list[float] = []
    try:
        # Busy: the start waits (in the caller's wait) until its deadline, then goes ungated and says why.
        busy = start_slots.acquire(
            "ray", deadline=clock.mono() + 1.0, wait=lambda s: waits.append(s), slots=1, parent=str(tmp_path)
        )
        assert busy.lock is None
        assert "stayed busy" in busy.why
        assert waits and all(0 < s <= start_slots.POLL_S for s in waits)

        def kill_holder(_seconds: float) -> None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(timeout=10)

        # The holder's SIGKILL frees the slot; its child (`sleep`, still running) does not keep it.
        slot = start_slots.acquire("ray", deadline=clock.mono() + 30, wait=kill_holder, slots=1, parent=str(tmp_path))
        assert slot.lock is not None, slot.why
        os.kill(child, 0)  # the child outlived its parent and still runs
        slot.release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_second_slot_lets_a_second_start_through_and_a_released_slot_is_free(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    _, child = hold(holders, tmp_path, slots=2)
    try:
        second = start_slots.acquire("ray", deadline=clock.mono() + 5, wait=no_wait, slots=2, parent=str(tmp_path))
        assert second.lock is not None, second.why
        second.release()
        again = start_slots.acquire("ray", deadline=clock.mono() + 5, wait=no_wait, slots=2, parent=str(tmp_path))
        assert again.lock is not None, again.why
        again.release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_planted_symlink_for_the_slot_directory_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"{start_slots.DIR_PREFIX}{os.getuid()}").symlink_to(elsewhere)
    slot = start_slots.acquire("ray", deadline=clock.mono() + 5, wait=no_wait, slots=1, parent=str(tmp_path))
    assert slot.lock is None
    assert "no usable slot directory" in slot.why
    assert list(elsewhere.iterdir()) == []


def test_the_host_has_at_least_one_slot_and_one_per_four_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert start_slots.host_slots() == max(1, cores // start_slots.CORES_PER_SLOT)
