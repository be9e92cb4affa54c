"""The audit's start-up cost (issue 51 item 9): readers of files most runs do not have (a hang's
stacks, the judge gateways' logs, the trainer's replay and rollout records, a Slurm job's output,
the nodes' preflights), the schedulers' query clients, the readers of the other spec formats and the
engines' command builders load only when a run needs them. Checked in a fresh interpreter: after
importing the audit's entry points, and after auditing a successful run that has none of those
files; and each is loaded where a run or a spec does need it (so the check cannot pass vacuously)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.audit_scale import generate
from schemas import names
from tests.harness.rundirs import ending, killed_replica, success

LAZY = (
    "audit.stacks",
    "audit._gateway_stats",
    "audit._rollout_records",
    "launch.backends.slurm.query",
    "launch.backends.beaker.query",
    "launch.backends.skypilot.query",
    "subprocess",
    "statistics",
    "signal",  # its enums: the audit writes the three signals it names as numbers
    # The record types of files a successful run without a regrade, a checkpoint grace, restarts
    # or gym-launch's submission does not have (schemas/records/ loads each on first use).
    "schemas.records._regrade",
    "schemas.records._driver_stop",
    "schemas.records._attempt",
    "schemas.records._submission",
    # A failed run's log excerpt and `gym-audit logs` read logs; a successful run's audit reads none.
    "audit._logs",
    # A Slurm job's output (slurmstepd's words), and a scheduler's answers.
    "launch.backends.answers",
    "launch.backends.slurm.ending",
    # The record type of preflight-RANK.json: a run whose nodes ran a preflight.
    "schemas.records._preflight",
    # A failure record's type: a run where some rank failed.
    "schemas.records._failure",
    # The text report's renderer: `gym-audit RUN --json` prints none.
    "audit._report_text",
    # The readers of a MILES run file and of a NeMo Gym config (the audit reads spec.json).
    "launch.spec._miles",
    "launch.spec._nemo_gym",
    # The engines' command builders: a spec with a managed sglang or vllm judge, or a policy service.
    "launch.spec.policy_argv",
    "launch.spec.vllm_argv",
    "launch.spec.sglang_argv",
    "launch.spec._engine_command",
)
# What a run whose spec binds no judge never needs: the counting of the judges' replies.
UNJUDGED = ("audit._judge_replies",)
REPO = Path(__file__).resolve().parents[1]


def _loaded_after(code: str) -> list[str]:
    lazy = LAZY + UNJUDGED
    probe = f"import sys\n{code}\nprint(__import__('json').dumps([m for m in {lazy!r} if m in sys.modules]))"
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
    assert loaded == list(UNJUDGED)  # its spec binds a judge


def test_auditing_a_local_run_without_judges_loads_no_reader_it_does_not_need(tmp_path: Path) -> None:
    # The run the audit's speed is measured on (bench/audit_scale.py), at 2 replicas: local, no
    # judges, no preflight, no failure, its spec in this project's format.
    run = generate(tmp_path, 2, "success")
    audit = f"from audit.cli import main\nassert main([{str(run)!r}, '--offline', *{{}}]) == 0"
    assert _loaded_after(audit.format("['--json']")) == []  # as `gym-audit RUN --json` runs it
    assert "audit._report_text" in _loaded_after(audit.format("[]"))  # the text report


def _check_spec(data: str) -> str:
    return f"from launch.spec.config import RunConfig\nfrom launch.spec.resolve import check\ncheck(RunConfig, {data})"


@pytest.mark.parametrize(
    ("needs", "code"),
    [
        (["launch.spec._miles"], _check_spec("{'schema_version': 1}")),
        (["launch.spec._nemo_gym"], _check_spec("{'compute': {}, 'services': {}}")),
        (
            ["launch.spec.policy_argv", "launch.spec.vllm_argv", "launch.spec.sglang_argv"],
            "from launch.spec.load import load_spec\n"
            + _check_spec(
                f"load_spec({str(REPO / 'examples' / 'demo.toml')!r}, ('judges.general.backend=\"sglang\"',)).data"
            ),
        ),
    ],
)
def test_a_spec_that_needs_a_reader_loads_it(needs: list[str], code: str) -> None:
    assert set(needs) <= set(_loaded_after(code))


def test_a_failed_run_loads_the_readers_of_its_evidence(tmp_path: Path) -> None:
    killed = killed_replica(tmp_path / "killed").path  # its first cause quotes the agent's log
    preflight = ending(tmp_path / "preflight", 1, "preflight", ("gpus", "GPU 3 is held")).path
    loaded = _loaded_after(
        "from audit.api import audit_run\n"
        f"assert audit_run({str(killed)!r}, ask_scheduler=False).verdict == 'fail'\n"
        f"assert audit_run({str(preflight)!r}, ask_scheduler=False).unfit"
    )
    assert {"audit._logs", "schemas.records._preflight", "schemas.records._failure"} <= set(loaded)
