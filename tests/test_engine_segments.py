"""The /dev/shm files an engine maps, and their removal after it was killed (agent/proc/segments.py),
with real processes holding real Python shared memory, as vLLM's do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.proc.segments import SHM, mapped_segments, release_segments

# A child that creates a shared-memory segment, says its name, and holds it mapped until killed.
HOLDER = """
import sys, time
from multiprocessing import resource_tracker, shared_memory
shm = shared_memory.SharedMemory(create=True, size=4096)
resource_tracker.unregister(shm._name, "shared_memory")  # killed, it leaves it behind as an engine does
print(shm.name, flush=True)
time.sleep(600)
"""

pytestmark = pytest.mark.skipif(not Path(SHM).is_dir(), reason="no /dev/shm here")


def holder() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip().lstrip("/")


def kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(10)


def test_what_a_killed_engine_mapped_is_removed_and_what_a_live_one_maps_is_kept() -> None:
    dead, left = holder()
    alive, kept = holder()
    try:
        assert left in mapped_segments([dead.pid]) and kept in mapped_segments([alive.pid])
        kill(dead)
        assert (Path(SHM) / left).exists()  # SIGKILL: nobody unlinked it
        assert release_segments([left, kept, "psm_never_existed"]) == [left]
        assert not (Path(SHM) / left).exists() and (Path(SHM) / kept).exists()
    finally:
        kill(dead)
        kill(alive)
        for name in (left, kept):
            try:
                os.unlink(Path(SHM) / name)
            except FileNotFoundError:
                pass


def test_a_link_in_its_place_is_never_followed_or_removed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("x")
    name = f"psm_gymtest_{os.getpid()}_{time.monotonic_ns()}"
    link = Path(SHM) / name
    link.symlink_to(target)
    try:
        assert release_segments([name]) == []
        assert link.is_symlink() and target.read_text() == "x"
    finally:
        link.unlink()


def test_nothing_named_nothing_done() -> None:
    assert release_segments([]) == []
    assert mapped_segments([2**22 + 12345]) == frozenset()  # no such process: nothing, no error
