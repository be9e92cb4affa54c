"""Evidence of training and the verdict, with real agents (`gym-launch local`): a driver that
writes no driver-result.json but leaves MILES-style records passes; a plain `exit 0` fails, and
the launcher says so with the audit's words and exit code; `trains = false` passes and says why;
a driver claiming more judge replies than the reference judge's own log shows is an error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    BIN,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    small_spec,
    uid,
)

pytestmark = pytest.mark.slow

# A stand-in for the MILES trainer: per-step contract records in $GYM_CHECKPOINT_DIR (its save
# directory), a publication per refresh, judge calls through the registry; driver-result.json
# only when CLAIM is set (then claiming CLAIM judge replies).
DRIVER = """
import json, os, pathlib, sys
from agent import driver_api
steps, grades = int(os.environ["STEPS"]), int(os.environ.get("GRADES", "0"))
save = pathlib.Path(os.environ["GYM_CHECKPOINT_DIR"])
replies = 0
registry = driver_api.registry()
if registry["bindings"] and grades:
    from agent.judges._bindings import bindings_from_registry
    bound = sorted(bindings_from_registry(registry).items())[0][1]
    sample = {"metadata": {"judge_query": "What is the capital of France?"}, "label": "Paris."}
    for _ in range(grades):
        bound.grade_sample(sample, "Paris is the capital of France.", reference="Paris.")
        replies += 1
with open(save / "training_contract_rank0.jsonl", "a") as f:
    for step in range(1, steps + 1):
        f.write(json.dumps({"schema_version": 1, "rank": 0, "event": "optimizer", "step": step,
                            "optimizer_skipped": False, "local_policy_objective": 1.0 / step}) + "\\n")
with open(save / "publication.jsonl", "a") as f:
    for step in range(1, steps + 1):
        f.write(json.dumps({"version": step, "transport": "nccl"}) + "\\n")
print(f"trained {steps} steps, {replies} judge replies", flush=True)
if os.environ.get("CLAIM"):
    driver_api.write_result(optimizer_steps=steps, final_loss=0.5, policy_version=steps,
                            policy_refreshes=steps, judge_replies=int(os.environ["CLAIM"]))
"""
MILES_EVIDENCE = '[driver.evidence]\npreset = "miles"\n'


def driver_file(tmp: Path) -> str:
    path = tmp / "miles_like_driver.py"
    path.write_text(DRIVER)
    return f'command = ["python", "{path}"]'


def gym_audit(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "gym-audit"), str(run_dir), *args], capture_output=True, text=True, timeout=120)


def test_miles_style_records_pass_without_driver_result(tmp_path: Path) -> None:
    spec = small_spec(replicas=2, ray=False, driver=driver_file(tmp_path), extra=MILES_EVIDENCE)
    run = launch_local(tmp_path, spec, uid("miles-ev"), env={"STEPS": "3"})
    try:
        assert run.wait(120) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert not (run.run_dir / names.DRIVER_RESULT).exists()
    assert "gym-launch: run succeeded: agents exited 0 and the audit passes" in run.text
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    result = audit(run.run_dir, verdict="pass")
    assert result.training is not None
    assert (result.training["source"], result.training["optimizer_steps"], result.training["policy_refreshes"]) == (
        "evidence",
        3,
        3,
    )


def test_a_plain_exit_0_fails_and_the_launcher_agrees_with_the_audit(tmp_path: Path) -> None:
    spec = small_spec(replicas=2, ray=False, driver='command = ["true"]')
    run = launch_local(tmp_path, spec, uid("exit0"))
    try:
        code = run.wait(120)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 1, run.text[-3000:]
    summary = [ln for ln in run.text.splitlines() if ln.startswith("gym-launch: run FAILED")]
    assert summary and summary[0].startswith(
        "gym-launch: run FAILED: agents exited 0, but the audit FAILS: driver.no_result — the driver exited 0 "
        "without evidence of training"
    ), summary
    assert "[driver.evidence]" in summary[0] and "trains = false" in summary[0]
    # Each agent's own summary claims its lifecycle only, and points at the verdict.
    assert "summary: agents succeeded (the driver exited 0); the verdict: gym-audit" in run.text
    out = gym_audit(run.run_dir)
    assert out.returncode == 1 and "FAIL — run succeeded" in out.stdout and "driver.no_result" in out.stdout
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)


def test_a_run_that_trains_nothing_passes_on_exit_0(tmp_path: Path) -> None:
    spec = small_spec(replicas=2, ray=False, driver='command = ["true"]\ntrains = false')
    run = launch_local(tmp_path, spec, uid("bench"))
    try:
        assert run.wait(120) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert "gym-launch: run succeeded: agents exited 0 and the audit passes" in run.text
    out = gym_audit(run.run_dir)
    assert out.returncode == 0, out.stdout
    assert "driver.training_not_required" in out.stdout and "[driver] trains = false" in out.stdout
    assert "training: not required" in out.stdout
    assert_nothing_left(run.run_dir)


@pytest.mark.parametrize("claim", [None, "5"], ids=["counted", "overclaimed"])
def test_judge_replies_counted_from_the_reference_judges_log(tmp_path: Path, claim: str | None) -> None:
    spec = judge_spec(driver=driver_file(tmp_path), ray=False, extra=MILES_EVIDENCE)
    env = {"STEPS": "2", "GRADES": "3", **({"CLAIM": claim} if claim else {})}
    run = launch_local(tmp_path, spec, uid("replies"), env=env)
    try:
        code = run.wait(240)
    finally:
        kill_tree_by_session(run.proc)
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    doc = json.loads(gym_audit(run.run_dir, "--json").stdout)
    general = doc["judge_replies"]["judges"]["general"]
    canaried = json.loads((run.run_dir / names.CANARIES).read_text())
    canary = sum(1 for b in canaried["bindings"] for s in b["samples"] if s["reply_excerpt"] is not None)
    assert general["canary_replies"] == canary > 0
    assert general["server_answered"] == canary + 3 and general["server_driver_replies"] == 3
    assert doc["judge_replies"]["independent"] == 3
    if claim is None:
        assert code == 0, run.text[-3000:]
        assert doc["verdict"] == "pass", doc["findings"]
        return
    assert code == 1, run.text[-3000:]
    codes = {f["code"] for f in doc["findings"] if f["severity"] == "error"}
    assert codes == {"judge_replies.claim_exceeds"}, doc["findings"]
    assert "agents exited 0, but the audit FAILS: judge_replies.claim_exceeds — the driver claims 5" in run.text
