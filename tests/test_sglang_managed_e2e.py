"""The managed-SGLang path of real agents, around a stand-in for SGLang's server.

SGLang needs a GPU, so `python -m sglang.launch_server` is the stand-in in tests/stand_in_sglang
(a mock, put on the agent's PYTHONPATH): it refuses flags SGLang 0.5.23 lacks, records what the
agent ran, can lose a port race the way SGLang does, and otherwise serves the reference judge.
Everything around it is real: agents, Ray, the supervisor, health probes, canaries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    JUDGE_TABLES,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    read,
    uid,
)

pytestmark = pytest.mark.slow

STAND_IN = Path(__file__).parent / "stand_in_sglang"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SGLANG_JUDGE = """
[judges.general]
mode = "managed"
backend = "sglang"
model = "reference-judge"
revision = "0123456789abcdef0123456789abcdef01234567"
prepared_dir = "PREPARED_DIR"
gpus = 1
tensor_parallel_size = 1
max_context_length = 8192
max_concurrent_calls = 4
timeout = 30
"""
DEMO_DRIVER = 'command = ["python", "examples/demo_driver.py"]'  # grades rollouts through the registry


def snapshot_dir(tmp_path: Path, revision: str) -> Path:
    """A prepared directory laid out as a Hugging Face cache snapshot of ``revision``."""
    snap = tmp_path / "hub" / "models--reference-judge" / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    return snap


def sglang_spec(prepared_dir: Path) -> str:
    reference_judge = JUDGE_TABLES[: JUDGE_TABLES.index("[rubrics.")]
    spec = judge_spec(driver=DEMO_DRIVER)
    assert reference_judge in spec
    return spec.replace(reference_judge, SGLANG_JUDGE.replace("PREPARED_DIR", str(prepared_dir)))


def run_with_stand_in(
    tmp_path: Path, tag: str, lose_races: int, prepared_dir: Path | None = None
) -> tuple[object, Path]:
    record = tmp_path / "sglang-starts.jsonl"
    env = {
        "PYTHONPATH": str(STAND_IN),
        "GYM_STAND_IN_SGLANG_RECORD": str(record),
        "GYM_STAND_IN_SGLANG_LOSE_RACES": str(lose_races),
        "DEMO_STEPS": "1",
    }
    prepared = prepared_dir or snapshot_dir(tmp_path, REVISION)
    run = launch_local(tmp_path, sglang_spec(prepared), uid(f"sglang-{tag}"), env=env)
    return run, record


def starts(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def test_a_lost_port_race_is_retried_on_a_new_port_and_the_run_succeeds(tmp_path: Path) -> None:
    run, record = run_with_stand_in(tmp_path, "race", lose_races=1)
    try:
        code = run.wait(180)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 0, failures(run.run_dir)
    first, second = starts(record)
    endpoint = read(run.run_dir, names.judge_endpoint("general", 2))
    judge_mask = read(run.run_dir, names.placement(2))["judges"]["general"]["cuda_visible_devices"]
    for start in (first, second):
        argv = start["argv"]
        assert start["cuda_visible_devices"] == judge_mask  # only the judge's own device
        assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
        assert argv[argv.index("--served-model-name") + 1] == "reference-judge"
    # The endpoint is the second start's: its pid and the port it was given.
    assert endpoint["pid"] == second["pid"] != first["pid"]
    assert str(endpoint["port"]) == second["argv"][second["argv"].index("--port") + 1]
    assert endpoint["argv"][-len(second["argv"]) :] == second["argv"]
    assert "address already in use" in (run.run_dir / names.judge_log("general", 2)).read_text()
    assert read(run.run_dir, names.CANARIES)["passed"] is True
    assert read(run.run_dir, names.DRIVER_RESULT)["judge_replies"] > 0  # the driver graded through it
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="pass")


def test_a_judge_that_keeps_losing_port_races_fails_the_run_after_three_attempts(tmp_path: Path) -> None:
    run, record = run_with_stand_in(tmp_path, "races", lose_races=99)
    try:
        assert run.wait(180) != 0
    finally:
        kill_tree_by_session(run.proc)
    assert len(starts(record)) == 3
    fails = failures(run.run_dir)
    assert fails[2]["kind"] == "judge" and "attempt 3" in fails[2]["cause"], fails[2]
    assert fails[2]["log"] == names.judge_log("general", 2)
    assert not (run.run_dir / names.COMPLETE).exists()
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=2, kind="judge")


def test_a_prepared_dir_that_does_not_prove_the_pinned_revision_fails_the_run(tmp_path: Path) -> None:
    other = "fedcba9876543210fedcba9876543210fedcba98"
    run, record = run_with_stand_in(tmp_path, "rev", lose_races=0, prepared_dir=snapshot_dir(tmp_path, other))
    try:
        assert run.wait(180) != 0
    finally:
        kill_tree_by_session(run.proc)
    assert not record.exists() or starts(record) == []  # SGLang was never started
    fails = failures(run.run_dir)
    cause = fails[2]["cause"]
    assert fails[2]["kind"] == "judge" and REVISION in cause and other in cause, fails[2]
    assert "snapshots" in cause
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=2, kind="judge")
