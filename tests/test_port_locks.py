"""Port blocks held from the check to the bind (agent/proc/ports.py): choosers racing in real
processes on this host never pick the same block, a block another process holds is skipped by
Ray's and the judges' choice, and an ended holder's blocks are free again at once. A judge's
block is one where every port SGLang binds is free (agent/judges/_judge_ports.py)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.judges._judge_ports import reserve
from agent.proc import ports, tempdirs
from agent.ray.node import pick_ports
from launch.spec.config import RunConfig
from launch.spec.load import resolved_from_dict
from launch.spec.sections import JudgeConfig
from launch.spec.sglang_argv import bound_ports

ROOT = Path(__file__).resolve().parents[1]
EPHEMERAL = (32768, 60999)
RACERS = 8
JUDGE_TABLE = {"mode": "managed", "model": "m", "prepared_dir": "/p", "revision": "0" * 40, "gpus": 1}
JUDGE_SPEC = {
    "trainer": {"gpus_per_node": 1},
    "inference": {"gpus": 0},
    "driver": {"command": "true"},
    "judges": {"j": JUDGE_TABLE},
}

# A chooser: ready once imported, chooses the moment the gate file appears, prints its choice
# and keeps its blocks until stdin closes.
RACER = """
import os, sys, time
if sys.argv[2] == "ray":
    from agent.ray.node import pick_ports
    choose = lambda: pick_ports("one-run", 0, 1, (32768, 60999)).gcs
else:
    from agent.judges._judge_ports import reserve
    from launch.spec.config import RunConfig
    from launch.spec.load import resolved_from_dict
    judge = RunConfig.from_spec(resolved_from_dict(eval(sys.argv[3]))).judges["j"]
    choose = lambda: reserve(judge, "one-run", 1, (32768, 60999))
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
    racers = [_spawn(RACER, str(gate), kind, repr(JUDGE_SPEC)) for _ in range(RACERS)]
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


def judge(name: str = "j") -> JudgeConfig:
    return RunConfig.from_spec(resolved_from_dict({**JUDGE_SPEC, "judges": {name: JUDGE_TABLE}})).judges[name]


def test_judge_choosers_racing_in_real_processes_get_distinct_blocks_outside_the_ephemeral_range(
    tmp_path: Path,
) -> None:
    """Eight agents' judges of one run and name start on the same block at once: only the held
    lock files keep them apart, and every port SGLang binds stays in its judge's block."""
    picked = _race("judge", tmp_path)
    assert len({ports.block_of(p) for p in picked}) == RACERS, picked
    for port in picked:
        assert port == ports.block_of(port)
        for bound in bound_ports(judge(), port).values():
            assert ports.block_of(bound) == port and not EPHEMERAL[0] <= bound <= EPHEMERAL[1]


@pytest.mark.parametrize("flag", ["--port", "--nccl-port"])
def test_a_block_where_a_port_sglang_binds_is_in_use_is_skipped(flag: str) -> None:
    """A process outside gym-agent listening on the block's NCCL (or HTTP) port: the judge moves
    on, where a check of --port alone would hand SGLang a store port it cannot bind."""
    first = next(ports.walk("run-busy/judge/j", 0, 1, EPHEMERAL))
    taken = bound_ports(judge(), first)[flag]
    with socket.socket() as outsider:
        try:
            outsider.bind(("", taken))
        except OSError:
            pytest.skip(f"port {taken} is in use on this machine already")
        outsider.listen()
        assert not ports.free(taken)
        got = reserve(judge(), "run-busy", 1, EPHEMERAL)
    assert got != first
    assert taken not in bound_ports(judge(), got).values()


def test_each_start_of_a_judge_begins_one_block_further_and_lets_the_last_block_go() -> None:
    walk = list(ports.walk("run-again/judge/j", 0, 1, EPHEMERAL))
    first = reserve(judge(), "run-again", 1, EPHEMERAL)
    second = reserve(judge(), "run-again", 2, EPHEMERAL)  # a start after a lost race
    assert walk.index(second) > walk.index(first)
    holder = _spawn(HOLDER, str(first))  # would fail its assert if this process still held it
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
    finally:
        _end([holder])
    assert holder.returncode == 0


def test_a_start_never_lands_on_an_earlier_starts_block_even_after_a_skipped_one() -> None:
    """Start 2's own block is busy, so it takes the next one, where start 3's walk begins: start 3
    must still get new ports (the ports of start 2 may be free again by then)."""
    walk = list(ports.walk("run-skip/judge/j", 0, 1, EPHEMERAL))
    first = reserve(judge(), "run-skip", 1, EPHEMERAL)
    busy = bound_ports(judge(), walk[1])["--port"]
    with socket.socket() as outsider:
        try:
            outsider.bind(("", busy))
        except OSError:
            pytest.skip(f"port {busy} is in use on this machine already")
        outsider.listen()
        second = reserve(judge(), "run-skip", 2, EPHEMERAL, avoid=frozenset({first}))
    assert second == walk[2], (walk[:4], second)
    third = reserve(judge(), "run-skip", 3, EPHEMERAL, avoid=frozenset({first, second}))
    assert third not in (first, second) and walk.index(third) > walk.index(second)


def test_a_judge_never_lands_in_a_held_block_and_fails_at_once_when_every_block_is(tmp_path: Path) -> None:
    bases = ports.port_bases(EPHEMERAL)
    left = set(bases[:: max(1, len(bases) // 20)])  # ~20 blocks left to the judges
    holder = _spawn(HOLDER, *(str(b) for b in bases if b not in left))
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
        got = [reserve(judge(name), "run-held", 1, EPHEMERAL) for name in ("a", "b", "c")]
        assert set(got) <= left and len(set(got)) == 3
        rest = _spawn(HOLDER, *(str(b) for b in sorted(left - set(got))))
        try:
            assert rest.stdout and rest.stdout.readline().strip() == "held"
            t0 = time.monotonic()
            with pytest.raises(OSError, match="held by another agent here") as err:
                reserve(judge("z"), "run-held", 1, EPHEMERAL)
            assert err.value.errno == errno.EADDRINUSE
            assert time.monotonic() - t0 < 10
        finally:
            _end([rest])
    finally:
        _end([holder])


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
