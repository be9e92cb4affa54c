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

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
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
from tests.test_policy_service import free_policy_port

pytestmark = [pytest.mark.engines, pytest.mark.slow]

# Engines start in 68-126 s on idle cores, much slower beside other work: slack, not a bound.
STARTUP_TIMEOUT = 900
RUN_TIMEOUT = STARTUP_TIMEOUT + 300
GRADING_DRIVER = f'command = ["{sys.executable}", "{Path(__file__).parent / "data" / "grading_driver.py"}"]'
SHM = Path("/dev/shm")


def judge_only(model_dir: Path, revision: str, *, canary: bool) -> str:
    """Two replicas, a trainer on node 0 (the driver's), the vLLM judge on node 1."""
    return small_spec(
        replicas=2,
        ray=False,
        driver=GRADING_DRIVER,
        startup_timeout=STARTUP_TIMEOUT,
        judges=vllm_judge_tables(model_dir, revision, canary=canary),
    )


def policy_and_judge(model_dir: Path, revision: str) -> str:
    """An evaluation run of two 1-GPU replicas: the vLLM policy and the driver on node 0, the vLLM
    judge (canaries off) on node 1; both engines serve the tiny model."""
    driver = Path(__file__).parent / "data" / "policy_grading_driver.py"
    policy = f"""
[policy]
mode = "managed"
backend = "vllm"
model = "tiny-policy"
revision = "{revision}"
prepared_dir = "{model_dir}"
port = {free_policy_port()}
extra_args = ["--load-format", "dummy"]
"""
    spec = small_spec(
        replicas=2,
        node_gpus=1,
        ray=False,
        placement=None,
        driver=f'command = ["{sys.executable}", "{driver}"]\ntrains = false',
        startup_timeout=STARTUP_TIMEOUT,
        judges=policy + vllm_judge_tables(model_dir, revision, canary=False),
    )
    no_trainer = spec.replace("[trainer]\nnodes = 1\n", "[trainer]\nnodes = 0\n")
    assert no_trainer != spec and "[inference]\ngpus = 0\n" in spec
    return no_trainer


def engine_run(
    tmp_path: Path, tag: str, spec: Callable[[Path, str], str], env: dict[str, str] | None = None
) -> tuple[LocalRun, int, set[str]]:
    """The run to its end: the run, gym-launch's exit code, and /dev/shm's entries before it."""
    python = require_engine()
    text = spec(*tiny_model(python))
    before = shm_entries()
    run = launch_local(tmp_path, text, uid(f"vllm-{tag}"), env={**engine_env(python), "GRADES": "1", **(env or {})})
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
    """vLLM's shared-memory segments (Python's `psm_*`, names with "vllm") that appeared since
    ``before`` and that no live process maps, a moment apart: another test's engine maps its own.
    Its `sem.mp-*` semaphores are left out: other engines here create theirs unmapped for a while."""

    def unheld() -> set[str]:
        new = {n for n in shm_entries() - before if n.startswith("psm_") or "vllm" in n.lower()}
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
    run, code, before = engine_run(tmp_path, "canary", partial(judge_only, canary=True))
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


def test_the_driver_asks_a_real_vllm_policy_and_grades_its_answer_through_a_real_vllm_judge(tmp_path: Path) -> None:
    """Item 3 (a): without canaries the run reaches the driver, which asks the policy service (its
    URL from the agent) and grades the answer through the bindings; every engine process ends."""
    reply = tmp_path / "reply.json"
    run, code, before = engine_run(tmp_path, "policy", policy_and_judge, {"POLICY_REPLY": str(reply)})
    assert code == 0, (failures(run.run_dir), run.text[-3000:])
    judge_started_as_the_spec_says(run)
    got = json.loads(reply.read_text())
    assert got["url"].endswith("/v1") and got["answer"], got  # the policy's own words (random weights)
    assert got["outcomes"] == {"general-quality": "TruncatedGrade"}, got  # the judge replied, with no grade
    policy_log = (run.run_dir / names.policy_log(0)).read_text(errors="replace")
    assert "POST /v1/chat/completions" in policy_log and "'served_model_name': ['tiny-policy']" in policy_log
    judge_log = (run.run_dir / names.judge_log("general", 1)).read_text(errors="replace")
    assert "POST /tokenize" in judge_log and "POST /v1/chat/completions" in judge_log  # context check, then grade
    (line,) = [json.loads(x) for x in (run.run_dir / names.grades(0)).read_text().splitlines() if x.strip()]
    assert line["replied"] is True and line["outcome"] != "graded", line
    assert_artifacts_valid(run.run_dir)
    assert_engine_gone(run, before)
    audit(run.run_dir, verdict="pass")
