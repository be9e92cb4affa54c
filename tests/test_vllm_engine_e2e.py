"""A real vLLM (its CPU build, `make engines`) as a managed judge of real agents: two replicas, the
tiny model with random weights. Nothing here is a stand-in: the engine's three processes, its
/health, /v1/models, /tokenize and chat completions, its teardown.

Random weights cannot tell a right answer from a wrong one, so the honest outcome with canaries on
is a canary failure that names the judge and quotes its reply; with `canary = false` the run reaches
the driver, which grades through the bindings (invalid grades, recorded as such). Either way every
engine process is gone at the end and /dev/shm keeps nothing of it.

Marked `engines`: minutes each on two busy cores, so in `make test-engines`, not `make test`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from launch.spec.vllm_argv import VLLM_MODULE
from schemas import names
from tests.harness import (
    LocalRun,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    kill_tree_by_session,
    launch_local,
    read,
    small_spec,
    uid,
)
from tests.harness.engines import engine_env, engine_python, require_engine, tiny_model, vllm_judge_tables

pytestmark = [pytest.mark.engines, pytest.mark.slow]

# Engines start in 68-126 s on idle cores, much slower beside other work: slack, not a bound.
STARTUP_TIMEOUT = 900
RUN_TIMEOUT = STARTUP_TIMEOUT + 300
GRADING_DRIVER = f'command = ["{sys.executable}", "{Path(__file__).parent / "data" / "grading_driver.py"}"]'
SHM = Path("/dev/shm")


def engine_run(tmp_path: Path, tag: str, *, canary: bool) -> tuple[LocalRun, int, set[str]]:
    """The run to its end: the run, gym-launch's exit code, and /dev/shm's entries before it."""
    python = require_engine()
    model_dir, revision = tiny_model(python)
    spec = small_spec(
        replicas=2,
        ray=False,
        driver=GRADING_DRIVER,
        startup_timeout=STARTUP_TIMEOUT,
        judges=vllm_judge_tables(model_dir, revision, canary=canary),
    )
    env = {**engine_env(python), "GRADES": "1"}
    before = shm_entries()
    run = launch_local(tmp_path, spec, uid(f"vllm-{tag}"), env=env)
    try:
        return run, run.wait(RUN_TIMEOUT), before
    finally:
        kill_tree_by_session(run.proc)


def shm_entries() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def held_by_someone(name: str) -> bool:
    """Is /dev/shm/NAME mapped or open by any live process (another test's engine, not ours)?"""
    target = str(SHM / name)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if target in Path(f"/proc/{pid}/maps").read_text(errors="replace"):
                return True
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd")):
                return True
        except OSError:
            continue
    return False


def engine_leftovers(before: set[str]) -> list[str]:
    """Segments of the kinds vLLM makes (Python shared memory, multiprocessing semaphores, its own
    names) that appeared since ``before`` and that no live process holds. Other work on this machine
    makes them too, briefly: what is still there and unheld a moment later is a leak."""
    kinds = ("psm_", "sem.mp-", "vllm")

    def unheld() -> set[str]:
        new = {n for n in shm_entries() - before if n.startswith(kinds) or "vllm" in n}
        return {n for n in new if not held_by_someone(n)}

    first = unheld()
    time.sleep(3)
    return sorted(first & unheld())


def assert_engine_gone(run: LocalRun, before: set[str]) -> None:
    """Nothing of the run alive (the harness's orphan check), and no /dev/shm entry it made left."""
    assert_nothing_left(run.run_dir)
    left = engine_leftovers(before)
    assert not left, f"/dev/shm entries left by the engine: {left}"


def judge_started_as_the_spec_says(run: LocalRun) -> dict:
    endpoint = read(run.run_dir, names.judge_endpoint("general", 1))
    argv = endpoint["argv"]
    assert argv[:3] == [engine_python(), "-m", VLLM_MODULE]
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert argv[-2:] == ["--load-format", "dummy"]
    assert endpoint["backend"] == "vllm" and endpoint["ready"] is True
    return endpoint


def test_canaries_against_a_real_engine_with_random_weights_fail_naming_the_judge_and_its_reply(
    tmp_path: Path,
) -> None:
    run, code, before = engine_run(tmp_path, "canary", canary=True)
    assert code != 0
    judge_started_as_the_spec_says(run)
    fails = failures(run.run_dir)
    first = next(f for f in fails.values() if f["kind"] == "canary")
    assert first["judge"] == "general", first
    assert 'binding "general-quality" (judge general' in first["cause"], first
    assert "the judge answered" in first["cause"], first  # its own reply, quoted
    canaries = read(run.run_dir, names.CANARIES)
    assert canaries["passed"] is False
    assert canaries["bindings"][0]["model_listed"] is True  # /v1/models of the real engine lists it
    assert not (run.run_dir / names.DRIVER_RESULT).exists()  # the driver never started
    assert_artifacts_valid(run.run_dir)
    assert_engine_gone(run, before)
    audit(run.run_dir, verdict="fail", rank=0, kind="canary")


def test_without_canaries_the_driver_grades_through_a_real_engine_and_everything_ends(tmp_path: Path) -> None:
    run, code, before = engine_run(tmp_path, "grade", canary=False)
    assert code == 0, failures(run.run_dir)
    judge_started_as_the_spec_says(run)
    log = (run.run_dir / names.judge_log("general", 1)).read_text(errors="replace")
    assert "POST /tokenize" in log and "POST /v1/chat/completions" in log  # the context check, then the grade
    grades = [line for line in (run.run_dir / names.grades(0)).read_text().splitlines() if line.strip()]
    assert grades, "the driver graded nothing"
    assert read(run.run_dir, names.DRIVER_RESULT)["optimizer_steps"] == 1
    assert_artifacts_valid(run.run_dir)
    assert_engine_gone(run, before)
