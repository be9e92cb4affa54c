"""What a new user's hang trials found (issue 49, item 3), the parts that need no run: two worker
threads deadlocked on two locks (real py-spy stacks of a real process) are named in the stacks
summary; a live view calls a difference odd only when it persists across samples (real processes,
one caught in another function for the first sample only, one stuck); a group's caller is the
user's frame, not Ray's tracing wrapper; a rank frozen for minutes whose own record came after
its peers called it silent stays the first cause, and the cascade is in time order.
The runs themselves (gym-launch local with a frozen node, a deadlocked driver's hang, status
pids): tests/test_hang_trials_e2e.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import launch._live_stacks as live
from agent.stacks._targets import describe
from agent.stacks.capture import capture
from audit.stacks import shown_frames, summarise
from launch.backends._local_stragglers import wait_agents
from schemas.vocab import StackReason
from tests.harness.rundirs import TRAIN, RunBuilder
from tests.test_audit_first_cause import first, rec

# Two threads that take two locks in opposite orders: each ends up waiting for the other's lock.
LOCK_PAIR = """a, b = threading.Lock(), threading.Lock()
def take_ab():
    with a:
        time.sleep(0.3)
        with b:
            pass
def take_ba():
    with b:
        time.sleep(0.3)
        with a:
            pass
"""
DEADLOCK = (
    """
import threading, time
"""
    + LOCK_PAIR
    + """ts = [threading.Thread(target=take_ab, name="loader"), threading.Thread(target=take_ba, name="saver")]
for t in ts: t.start()
time.sleep(0.6)
print("ready", flush=True)
for t in ts: t.join()
"""
)

# A worker serves in `serve`; with a FILE argument it first sits in `load_batch` until FILE exists.
WORKER = """
import os, sys, time
def load_batch(flag):
    while not os.path.exists(flag):
        time.sleep(0.01)
def serve():
    print("serving", flush=True)
    while True:
        time.sleep(0.05)
def stuck():
    print("serving", flush=True)
    time.sleep(3600)
if len(sys.argv) > 1 and sys.argv[1] == "stuck":
    stuck()
if len(sys.argv) > 1:
    print("loading", flush=True)
    load_batch(sys.argv[1])
serve()
"""


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(text: str, *args: str, ready: str = "ready") -> subprocess.Popen[str]:
        program = tmp_path / f"p{[DEADLOCK, WORKER].index(text)}.py"  # one file per program: same frames
        program.write_text(text)
        p = subprocess.Popen([sys.executable, str(program), *args], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == ready
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _doc(pid: int, role: str) -> dict[str, Any]:
    taken = capture([describe(pid, role)], reason=StackReason.REQUEST, timeout=20, dump_dir=None, nonblocking=True)
    return taken.fields


def test_two_threads_deadlocked_on_two_locks_are_named_with_their_lines(
    started: Callable[..., subprocess.Popen[str]],
) -> None:
    p = started(DEADLOCK)
    s = summarise({0: _doc(p.pid, "driver")}, [], [0])
    assert s is not None
    text = "\n".join(s.lines())
    # The main thread only joins: the two workers are where the run is stuck.
    assert "loader in take_ab (p0.py:7)" in text and "saver in take_ba (p0.py:12)" in text, text
    [waiting] = s.waiting()
    assert waiting.startswith(f"waiting threads: rank 0, driver pid {p.pid}: 2 threads wait in their own code"), waiting
    assert "not which lock it waits for or holds" in text
    doc = s.to_json()
    assert doc["waiting_threads"] == [waiting]
    [driver] = doc["groups"]
    assert sorted(t["name"] for t in driver["threads"]) == ["loader", "saver"]
    assert all(t["idle"] for t in driver["threads"])


def test_a_live_view_calls_a_difference_odd_only_when_it_persists(
    started: Callable[..., subprocess.Popen[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gym-launch stacks` on a run of three agents, each answering with its worker's real stacks
    (the agents' side and the doorbell: tests/test_hang_e2e.py)."""
    flag = tmp_path / "loaded"
    steady = [started(WORKER, ready="serving") for _ in range(2)]
    late = started(WORKER, str(flag), ready="loading")
    run = RunBuilder(tmp_path / "out")
    run.startup()  # three agents' address records, no cleanup record: all live
    workers = [*steady, late]
    asked: list[int] = []

    def ask(_run: object, ranks: list[int] | None, _wait: float) -> live.Answers:
        """After the first sample the late worker has loaded its batch and serves like the others."""
        docs = {r: _doc(p.pid, "ray_worker") for r, p in enumerate(workers)}
        asked.append(len(asked))
        if not flag.exists():
            flag.write_text("")
            assert late.stdout is not None and late.stdout.readline().strip() == "serving"
        return live.Answers("r", [0, 1, 2], docs)

    monkeypatch.setattr(live, "ask", ask)
    monkeypatch.setattr(live, "SAMPLE_GAP_S", 0.0, raising=False)
    said: list[str] = []
    assert live.run_stacks(run.path, None, True, said.append) == 0
    doc = json.loads(said[0])
    assert doc["summary"]["odd_ones_out"] == [], doc["summary"]["groups"]  # caught in load_batch once: not odd
    assert len(asked) == doc["samples"] == 3

    workers[2] = stuck = started(WORKER, "stuck", ready="serving")
    asked.clear()
    said.clear()
    assert live.run_stacks(run.path, None, False, said.append) == 0
    assert f"odd one out: rank 2, Ray worker pid {stuck.pid}: stuck ← <module>" in said[0].splitlines(), said[0]
    assert "only a difference seen in each of 3 samples" in said[0]


def test_the_groups_caller_is_the_users_frame_not_rays_tracing_wrapper() -> None:
    ray = "/venv/lib/python3.11/site-packages/ray"
    ours = "/src/gym-agent/agent/driver_api.py"
    frames = [
        ("load_weights", TRAIN, 12),
        ("_resume_span", f"{ray}/util/tracing/tracing_helper.py", 466),
        ("actor_method_executor", f"{ray}/_private/function_manager.py", 726),
        ("run", TRAIN, 30),
    ]
    assert shown_frames(frames) == "load_weights ← run"
    assert shown_frames([("progress", ours, 40), ("train_step", TRAIN, 9), ("main", TRAIN, 3)]) == "train_step ← main"


def test_a_frozen_ranks_late_record_does_not_displace_its_silence_as_the_first_cause() -> None:
    """Rank 1 was SIGSTOPped: ranks 0 and 2 called it silent at 130 s and stopped; it was resumed
    3.5 min later and its reaper recorded agent_died then."""
    fc, cascade, others = first(
        rec(0, "peer_silent", 130.0, reacting_to=1), rec(2, "peer_silent", 130.4, 1), rec(1, "agent_died", 340.0)
    )
    assert fc is not None and (fc.rank, fc.kind, fc.reported_by) == (1, "silent", 0), fc
    assert fc.wall_time == 130.0 and "its own record (agent_died) came 210 s later" in fc.cause
    times = [c.wall_time for c in cascade]
    assert times == sorted(times) and [(c.rank, c.kind) for c in cascade][-1] == (1, "agent_died")
    assert others == ()
    # A dead agent's reaper writes at once, before its peers call it silent: still the cause.
    fc, _, _ = first(rec(1, "agent_died", 100.0), rec(0, "peer_silent", 130.0, 1))
    assert fc is not None and (fc.rank, fc.kind) == (1, "agent_died")


def test_the_launcher_ends_a_still_agent_but_not_one_whose_heartbeat_moves() -> None:
    """Rank 0 ended; rank 1 still beats (it waits for a peer, say) and ends by itself at 3 s;
    rank 2 neither ends nor beats (SIGSTOPped): ended after the bound, by process group."""
    procs = [
        subprocess.Popen(["true"], start_new_session=True),
        subprocess.Popen(["sleep", "3"], start_new_session=True),
        subprocess.Popen(["sleep", "60"], start_new_session=True),
    ]
    os.kill(procs[2].pid, signal.SIGSTOP)
    said: list[str] = []
    t0 = time.monotonic()
    try:
        beats = {1: lambda: int(time.monotonic() * 4), 2: lambda: 7}  # rank 1's heartbeat moves
        codes = wait_agents(procs, 1.0, said.append, time.monotonic, lambda rank: beats[rank]())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0, 0, -signal.SIGKILL], (codes, said)
    assert len(said) == 1 and said[0].startswith(f"gym-launch: rank 2's agent (pid {procs[2].pid}, stopped)"), said
    assert 2.5 < time.monotonic() - t0 < 30
