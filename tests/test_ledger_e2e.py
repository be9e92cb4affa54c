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

from audit._report_text import fmt_time
from schemas import names
from schemas.timefmt import parse_iso
from tests.harness import BIN
from tests.harness import ledger as lg
from tests.harness.audit_head import first_cause_problem

pytestmark = pytest.mark.slow


def audit_text(run_dir: Path) -> str:
    return subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True).stdout


SEED = 52  # the correct loader's epochs shuffled: the audit reads each in its own order


def test_a_correct_loader_resumed_after_a_lost_node_passes_with_the_replay_counted(tmp_path: Path) -> None:
    run = lg.kill_then_resume(tmp_path, "correct", seed=SEED)
    assert run.code == 0 and "run succeeded" in run.launched, run.launched[-3000:]
    assert run.killed.replayed, run.killed  # the kill landed steps past the checkpoint: replay to count
    code, doc = lg.audit_json(run.run_dir)
    assert code == 0 and doc["verdict"] == "pass", doc["findings"]
    problems = lg.audit_problems(doc, "correct", run.killed, SEED)
    assert not problems, problems


@pytest.mark.parametrize(("loader", "code"), [("restarts-epoch", "data.repeated"), ("skips-ahead", "data.skipped")])
def test_a_loader_bug_on_resume_is_the_first_cause_naming_the_ids(tmp_path: Path, loader: str, code: str) -> None:
    run = lg.kill_then_resume(tmp_path, loader)
    # Every agent exited 0 (the trainer noticed nothing); the launcher's verdict is the audit's.
    assert run.code == 1 and "agents exited 0, but the audit FAILS: " + code in run.launched, run.launched[-3000:]
    status, doc = lg.audit_json(run.run_dir)
    assert status == 1 and doc["verdict"] == "fail", doc["findings"]
    problems = lg.audit_problems(doc, loader, run.killed)
    assert not problems, problems
    # Both bugs begin at the resumed attempt's first step: the first cause has the time it recorded.
    first = next(ln for ln in lg.ledger_lines(run.run_dir / names.ledger(lg.DRIVER_RANK)) if ln["kind"] == "step")
    assert first["step"] == run.killed.checkpoint + 1, first
    when = fmt_time(parse_iso(first["at"]))
    head = first_cause_problem(audit_text(run.run_dir), rank=lg.DRIVER_RANK, kinds=(code,), words=(when,))
    assert head is None, head
