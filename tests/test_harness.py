"""The shared harness itself: the orphan finder finds a run's processes by session, command line
and environment and nothing else; the fixtures' lifecycle is the agent's step table."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import Phase
from tests.harness import orphans
from tests.harness.rundirs import success
from tests.harness.steps import RUN_STEPS, STARTUP_STEPS, applies

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture()
def started() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:  # by pid, in their own sessions
        orphans.kill_tree_by_session(p)
        p.wait()


def test_orphans_are_found_by_session_cmdline_and_environment_only(
    tmp_path: Path, started: list[subprocess.Popen]
) -> None:
    run_dir = tmp_path / "out" / "cluster" / "harness-orphans-1a2b3c"
    by_session = subprocess.Popen(SLEEP, start_new_session=True)
    by_cmdline = subprocess.Popen([*SLEEP, str(run_dir)], start_new_session=True)
    by_env = subprocess.Popen(SLEEP, env={**os.environ, "SOME_RUN": run_dir.name}, start_new_session=True)
    unrelated = subprocess.Popen(SLEEP, start_new_session=True)
    started += [by_session, by_cmdline, by_env, unrelated]
    orphans.started_session(run_dir, by_session.pid)
    found = {p.pid for p in orphans.run_processes(run_dir)}
    assert {by_session.pid, by_cmdline.pid, by_env.pid} <= found
    assert unrelated.pid not in found and os.getpid() not in found
    with pytest.raises(AssertionError, match="survived"):
        orphans.assert_nothing_left(run_dir, timeout=0.5)  # and kills what it found, by pid
    assert orphans.wait_gone(run_dir, 10) == []
    assert unrelated.poll() is None


def test_a_recorded_session_is_a_session_of_the_run(tmp_path: Path, started: list[subprocess.Popen]) -> None:
    run_dir = tmp_path / "harness-recorded-4d5e6f"
    run_dir.mkdir()
    child = subprocess.Popen(SLEEP, start_new_session=True)
    started.append(child)
    (run_dir / "cleanup-0.json").write_text(f'{{"groups": [{{"session": {child.pid}}}]}}')
    assert [p.pid for p in orphans.run_processes(run_dir)] == [child.pid]


def test_fixture_phases_follow_the_step_table_on_each_node(tmp_path: Path) -> None:
    b = success(tmp_path)
    table = [str(s.phase) for s in (*STARTUP_STEPS, *RUN_STEPS)] + [str(Phase.TEARDOWN)]
    for rank, phases in b.lifecycle.items():
        assert list(phases) == [p for p in table if p in phases], rank  # the agent's order
        topo = b.topo[rank]
        ray_start = next(s for s in STARTUP_STEPS if s.phase is Phase.RAY_START)
        assert (str(Phase.RAY_START) in phases) == applies(ray_start, topo, True) == topo.in_ray
        assert (str(Phase.READINESS) in phases) == topo.is_head
    assert not any(applies(s, b.topo[0], False) for s in STARTUP_STEPS if s.needs_ray)
