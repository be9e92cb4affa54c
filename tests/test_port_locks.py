"""Port blocks held from the check to the bind (agent/proc/ports.py): choosers racing in real
processes on this host never pick the same block, a block another process holds is skipped by
Ray's and the judges' choice, and an ended holder's blocks are free again at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.judges.runtime import _free_port
from agent.proc import ports, tempdirs
from agent.ray.node import ephemeral_range, pick_ports

ROOT = Path(__file__).resolve().parents[1]
EPHEMERAL = (32768, 60999)
RACERS = 8

# A chooser: ready once imported, chooses the moment the gate file appears, prints its choice
# and keeps its blocks until stdin closes.
RACER = """
import os, sys, time
if sys.argv[2] == "ray":
    from agent.ray.node import pick_ports
    choose = lambda: pick_ports("one-run", 0, 1, (32768, 60999)).gcs
else:
    from agent.judges.runtime import _free_port
    choose = lambda: _free_port("127.0.0.1", "judge-j")
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.001)
print(choose(), flush=True)
sys.stdin.read()
"""

# Holds the blocks named on the command line, says so, and keeps them until stdin closes.
HOLDER = """
import sys
from agent.proc import ports
for base in map(int, sys.argv[1:]):
    assert ports.hold_block(f"b{base}", [base], lambda _b: True) == base, base
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture(autouse=True)
def own_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's own lock directory: other processes on the machine never see its blocks."""
    root = tmp_path / "agent-tmp"
    root.mkdir()
    monkeypatch.setenv(tempdirs.ROOT_ENV, str(root))
    yield root
    for purpose in list(ports._held):
        ports.release(purpose)


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def _end(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.stdin:
            p.stdin.close()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _race(kind: str, tmp_path: Path) -> list[int]:
    gate = tmp_path / "go"
    racers = [_spawn(RACER, str(gate), kind) for _ in range(RACERS)]
    try:
        for r in racers:
            assert r.stdout and r.stdout.readline().strip() == "ready"
        gate.touch()  # all imported and spinning on the gate: they choose within a millisecond
        return [int(r.stdout.readline()) for r in racers if r.stdout]
    finally:
        _end(racers)


def test_ray_choosers_racing_in_real_processes_never_pick_the_same_block(tmp_path: Path) -> None:
    """Eight agents whose runs hash to the same block, choosing at once: nothing is bound yet,
    so only the held lock files keep them apart."""
    picked = _race("ray", tmp_path)
    assert len(set(picked)) == RACERS, picked
    assert all(abs(a - b) >= ports.PORT_BLOCK for a in picked for b in picked if a != b)


def test_without_a_lock_directory_the_same_race_puts_two_choosers_on_one_block(tmp_path: Path, own_root: Path) -> None:
    """The behaviour the locks remove (and the fallback where the directory is unusable)."""
    (own_root / f"{ports.DIR_PREFIX}{os.getuid()}").write_text("not a directory")
    assert ports.lock_dir() is None
    picked = _race("ray", tmp_path)
    assert len(set(picked)) < RACERS, picked  # some of them share a block


def test_judge_choosers_racing_in_real_processes_get_ports_in_distinct_blocks(tmp_path: Path) -> None:
    picked = _race("judge", tmp_path)
    assert len({ports.block_of(p) for p in picked}) == RACERS, picked


def test_a_block_held_by_another_process_is_skipped_and_free_again_when_it_ends() -> None:
    first = pick_ports("run-held", 0, 4, EPHEMERAL)
    ports.release("ray")
    holder = _spawn(HOLDER, str(first.gcs))
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
        moved = pick_ports("run-held", 0, 4, EPHEMERAL)
        assert moved.gcs != first.gcs
        assert (moved.gcs - first.gcs) % (4 * ports.PORT_BLOCK) == 0  # skipped in strides of `slots`
    finally:
        _end([holder])
    assert pick_ports("run-held", 0, 4, EPHEMERAL) == first  # the kernel dropped the ended holder's lock


def test_a_new_pick_releases_the_block_of_the_last_one() -> None:
    a = pick_ports("run-again", 0, 2, EPHEMERAL)
    b = pick_ports("run-again", 1, 2, EPHEMERAL)  # a retried start: the first block is not needed
    assert a != b
    holder = _spawn(HOLDER, str(a.gcs))  # would fail its assert if this process still held it
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
    finally:
        _end([holder])
    assert holder.returncode == 0


def test_a_judge_port_never_lands_in_a_block_another_process_holds() -> None:
    low, high = ephemeral_range()
    blocks = sorted({ports.block_of(p) for p in range(low, high + 1)})
    free = set(blocks[:: max(1, len(blocks) // 40)])  # ~40 blocks left to the judge
    holder = _spawn(HOLDER, *(str(b) for b in blocks if b not in free))
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
        for name in ("a", "b", "c"):
            port = _free_port("127.0.0.1", f"judge-{name}", draws=2000)
            assert ports.block_of(port) in free
        everything = _spawn(HOLDER, *(str(b) for b in sorted(free - {ports.block_of(p) for p in held()})))
        try:
            assert everything.stdout and everything.stdout.readline().strip() == "held"
            t0 = time.monotonic()
            with pytest.raises(OSError, match="another agent here holds"):
                _free_port("127.0.0.1", "judge-z", draws=50)
            assert time.monotonic() - t0 < 10
        finally:
            _end([everything])
    finally:
        _end([holder])


def held() -> list[int]:
    return [base for base, _lock in ports._held.values()]
