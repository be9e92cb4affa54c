"""The audit's start-up cost (issue 51 item 9): readers of files most runs do not have (a hang's
stacks, the judge gateways' logs, the trainer's replay and rollout records) and the schedulers'
query clients load only when a run needs them. Checked in a fresh interpreter: after importing the
audit's entry points, and after auditing a successful run that has none of those files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from schemas import names
from tests.harness.rundirs import success

LAZY = (
    "audit.stacks",
    "audit._gateway_stats",
    "audit._rollout_records",
    "launch.backends.slurm.query",
    "launch.backends.beaker.query",
    "launch.backends.skypilot.query",
    "subprocess",
    "statistics",
    # The record types of files a successful run without a regrade, a checkpoint grace, restarts
    # or gym-launch's submission does not have (schemas/records/ loads each on first use).
    "schemas.records._regrade",
    "schemas.records._driver_stop",
    "schemas.records._attempt",
    "schemas.records._submission",
)
REPO = Path(__file__).resolve().parents[1]


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(__import__('json').dumps([m for m in {LAZY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_audit_loads_no_reader_a_run_may_not_need() -> None:
    assert _loaded_after("import audit.cli, audit.api") == []


def test_auditing_a_run_without_stacks_or_gateway_logs_loads_neither_reader(tmp_path: Path) -> None:
    b = success(tmp_path)
    assert not list(b.path.glob("stacks-*.json")) and not (b.path / names.gateway_log("general")).exists()
    loaded = _loaded_after(
        f"from audit.api import audit_run\nassert audit_run({str(b.path)!r}, ask_scheduler=False).verdict == 'pass'"
    )
    assert loaded == []
