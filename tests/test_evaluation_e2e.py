"""An evaluation run (issue 35): rollout engines and a judge for a benchmark driver, no trainer
(`trainer.nodes = 0`, `inference.gpus > 0`). Real agents on one node (gym-launch local): Ray with the
rollout engines' GPUs, a managed reference judge, and a driver that grades through the registry's
bindings and writes no evidence of training. The driver lands on the (first) rollout node; the audit
judges the run by its exit and its judge's replies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from schemas import names
from tests.harness import assert_artifacts_valid, assert_nothing_left, audit, launch_local, read, uid
from tests.harness.specs import judge_tables

pytestmark = [pytest.mark.slow, pytest.mark.ray]

DRIVER = Path(__file__).resolve().parent / "data" / "grading_driver.py"

SPEC = f"""
name = "eval"
[launch]
gpus_per_replica = 3
node_gpus = 3
[launch.coordination]
startup_timeout = 90
heartbeat_timeout = 6
heartbeat_interval = 0.5
poll_interval = 0.25
teardown_grace = 4.0
ack_timeout = 20.0
[trainer]
nodes = 0
gpus_per_node = 1
[inference]
gpus = 2
[driver]
command = ["{sys.executable}", "{DRIVER}"]
[ray]
num_cpus = 1
object_store_memory = 80000000
""" + judge_tables()


def test_an_evaluation_run_serves_its_policy_and_judge_to_a_passing_audit(tmp_path: Path) -> None:
    run = launch_local(tmp_path, SPEC, uid("eval"), env={"GRADES": "2", "RESULT": "0"})
    assert run.wait(180) == 0, run.text[-4000:]
    assert_artifacts_valid(run.run_dir)
    result = audit(run.run_dir, verdict="pass")
    assert "driver.training_not_required" in result.codes("info")
    assert result.training is not None and result.training["required"] is False
    assert result.judge_replies is not None and result.judge_replies["independent"] >= 4  # 2 grades x 2 bindings
    placement = read(run.run_dir, names.placement(0))
    assert (placement["trainer_gpus"], placement["rollout_gpus"], placement["is_driver_node"]) == (0, 2, True)
    assert read(run.run_dir, names.RAY_LAYOUT)["passed"] is True
    assert not (run.run_dir / names.DRIVER_RESULT).exists()
    assert_nothing_left(run.run_dir)
