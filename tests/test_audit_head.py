"""The guard inside `make test` for what `make faults` checks of every failing row: the audit's text
names the row's ending right under its verdict (tests/harness/audit_head.py, the same function the
matrix calls), on run directories that end as each row ends and carry every summary line a real run
prints (filesystem per mount, doorbell, training evidence, judge replies)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.faults import FAULTS, Fault
from schemas import FailureKind
from tests.harness import rundirs
from tests.harness.agents import assert_artifacts_valid
from tests.harness.audit_head import FIRST_LINES, first_cause_problem
from tests.test_scheduler_ending import CANCEL, NODE_FAILURE, TIME_LIMIT, _scheduler_ended

AUDIT = Path(sys.executable).parent / "gym-audit"
# The matrix's agent rows (the restart rows end in a refused attempt, covered below; the Slurm rows
# by the scheduler's words; the ledger rows end in an audit finding, not a failure record, and their
# first cause is checked on real runs in tests/test_ledger_e2e.py).
KINDS = {k.value for k in FailureKind}
ROWS = [f for f in FAULTS if f.expect == "fail" and not f.slurm and f.refused_at is None and f.kinds[0] in KINDS]
SLURM = {"slurm-time-limit": (TIME_LIMIT, "1"), "slurm-scancel": (CANCEL, "2"), "slurm-node-down": (NODE_FAILURE, "3")}


def report(run_dir: Path) -> str:
    done = subprocess.run([str(AUDIT), str(run_dir)], capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("fault", ROWS, ids=lambda f: f.name)
def test_every_failing_row_is_named_under_the_verdict(tmp_path: Path, fault: Fault) -> None:
    rank = 0 if fault.rank is None else fault.rank
    b = rundirs.ending(tmp_path, rank, fault.kinds[0], fault.words)
    assert_artifacts_valid(b.path)
    text = report(b.path)
    # The summaries are there: without them the guard could not see the first cause pushed below them.
    assert text.count("  filesystem") >= 2 and "doorbell:" in text and "judge replies:" in text, text
    problem = first_cause_problem(text, rank=fault.rank, kinds=fault.kinds, words=fault.words)
    assert problem is None, f"{problem}\n{text}"


@pytest.mark.parametrize("name", sorted(SLURM))
def test_the_schedulers_endings_are_named_under_the_verdict(tmp_path: Path, name: str) -> None:
    [fault] = [f for f in FAULTS if f.name == name]
    output, job = SLURM[name]
    # The builder's hosts are gpu-node-R: the scheduler's host names map onto them (as its own test does).
    run = _scheduler_ended(tmp_path, output.replace(" n1", " gpu-node-0").replace(" n2", " gpu-node-2"), job)
    words = [w.replace(" n2", " gpu-node-2") for w in fault.words]
    text = report(run)
    problem = first_cause_problem(text, rank=fault.rank, kinds=fault.kinds, words=words)
    assert problem is None, f"{problem}\n{text}"


def test_the_check_fails_when_the_first_cause_slides_below_the_summaries(tmp_path: Path) -> None:
    """The check itself can fail: the same report with the summaries moved above the first cause,
    as the audit printed it before issue 38."""
    b = rundirs.ending(tmp_path, 1, "agent_died")
    lines = report(b.path).splitlines()
    start = lines.index("First cause:")
    end = lines.index("", start)
    summaries = lines[end + 1 :]
    summaries = summaries[: summaries.index("")] if "" in summaries else summaries
    slid = [lines[0], *summaries, "", *lines[start:end]]
    problem = first_cause_problem("\n".join(slid), rank=1, kinds=("agent_died",))
    assert problem is not None and "not under the verdict" in problem
    assert first_cause_problem("\n".join(lines), rank=1, kinds=("agent_died",)) is None
    assert len(lines[:FIRST_LINES]) == FIRST_LINES
