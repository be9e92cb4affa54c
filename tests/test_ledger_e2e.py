"""The sample ledger's proof on real processes (issue 52 item 4): the demo trainer
(examples/ledger_driver.py, a real torch checkpoint) started by `gym-launch local` on two nodes, the
driver's node SIGKILLed whole (agent, reaper, driver) between two checkpoints, the run resumed with
`--resume`; the audit across both attempts, for a correct loader and for its two resume bugs.

What the audit must find is read from the killed attempt's own ledger (tests/harness/ledger.py):
where the kill landed decides the replay, the repeats and the skips."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    BIN,
    assert_artifacts_valid,
    assert_nothing_left,
    kill_tree_by_session,
    launch_local,
    uid,
)
from tests.harness import ledger as lg
from tests.harness.audit_head import first_cause_problem
from tests.harness.orphans import kill_node

pytestmark = pytest.mark.slow


def kill_then_resume(tmp: Path, loader: str) -> tuple[Path, lg.Killed, str]:
    """Attempt 1 loses the driver's node mid-run; attempt 2 is `gym-launch local --resume`. Returns
    the run directory, what attempt 1's ledger recorded, and the resumed launcher's output."""
    text = lg.ledger_spec(loader, replicas=2)
    run = launch_local(tmp, text, uid("ledger"))
    try:
        lg.wait_mid_interval(run.run_dir, 150)
        assert kill_node(run.run_dir, lg.DRIVER_RANK) >= 3  # its agent, reaper and driver at least
        assert run.wait(90) != 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert_nothing_left(run.run_dir)
    again = launch_local(tmp, text, run.uuid, args=("--resume",))
    try:
        again.wait(180)
    finally:
        kill_tree_by_session(again.proc)
    assert_nothing_left(run.run_dir)
    assert_artifacts_valid(run.run_dir)  # both attempts' ledger lines against their schema
    k = lg.killed(run.run_dir)
    resumed = (run.run_dir / names.driver_log(lg.DRIVER_RANK)).read_text()
    assert f"resumed from ledger-demo.pt at step {k.checkpoint}:" in resumed, resumed[:2000]
    return run.run_dir, k, again.text


def audit_text(run_dir: Path) -> str:
    return subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True).stdout


def test_a_correct_loader_resumed_after_a_lost_node_passes_with_the_replay_counted(tmp_path: Path) -> None:
    run_dir, k, launched = kill_then_resume(tmp_path, "correct")
    assert "run succeeded" in launched, launched[-3000:]
    assert k.replayed, k  # the kill landed after steps past the checkpoint: there is replay to count
    code, doc = lg.audit_json(run_dir)
    assert code == 0 and doc["verdict"] == "pass", doc["findings"]
    problems = lg.audit_problems(doc, "correct", k)
    assert not problems, problems


@pytest.mark.parametrize(("loader", "code"), [("restarts-epoch", "data.repeated"), ("skips-ahead", "data.skipped")])
def test_a_loader_bug_on_resume_is_the_first_cause_naming_the_ids(tmp_path: Path, loader: str, code: str) -> None:
    run_dir, k, launched = kill_then_resume(tmp_path, loader)
    # Every agent exited 0 (the trainer noticed nothing); the launcher's verdict is the audit's.
    assert "agents exited 0, but the audit FAILS: " + code in launched, launched[-3000:]
    status, doc = lg.audit_json(run_dir)
    assert status == 1 and doc["verdict"] == "fail", doc["findings"]
    problems = lg.audit_problems(doc, loader, k)
    assert not problems, problems
    head = first_cause_problem(audit_text(run_dir), rank=lg.DRIVER_RANK, kinds=(code,))
    assert head is None, head
