"""When the run's files do not say why the job ended, the audit asks the scheduler (bounded) about
the jobs and nodes the agents recorded: Slurm's node state for a rank that vanished without a
record, Slurm's job record, Beaker's cancelation code. The Slurm tests ask the project's real
local cluster; Beaker's API cannot exist here, so its one call (``JobClient.get``) is replaced."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.coord.identity import SchedulerJob, scheduler_job
from audit.api import audit_run
from schemas import names
from tests.harness import assert_artifacts_valid
from tests.harness.beaker_api import answer_jobs, write_beaker_config
from tests.harness.rundirs import T0, RunBuilder, peer_silent


def _with_jobs(b: RunBuilder, jobs: dict[int, dict[str, Any]], backend: str, job_id: str | None) -> None:
    """Give each rank's address record the scheduler job the agent records (agent/coord/identity.py)."""
    for r, job in jobs.items():
        doc = json.loads((b.path / names.address(r)).read_text())
        fields = {k: doc[k] for k in ("address", "hostname", "visible_devices", "pid", "started_at")}
        b.write(names.address(r), r, {**fields, "scheduler_job": job})
    if job_id is not None:
        b.run.write_artifact(
            names.SUBMISSION,
            b.writer(None, "launcher"),
            {"backend": backend, "job_id": job_id, "job_file": "job", "command": ["submit"], "submitted_at": T0},
        )


def _all_signalled(b: RunBuilder, sender: dict[str, Any] | None) -> None:
    t = b.phase_start(0, "driver") + 30.0
    for r in b.ranks:
        extra = {"sender": sender} if sender else {}
        b.failure(r, "signal", "received SIGTERM", "driver", t + 0.05 * r, signal="SIGTERM", **extra)
        b.phases(r, "driver", state="FAILED", last="failed", detail="stopped")
        b.cleanup(r, "failure")


def test_the_agent_records_its_scheduler_job() -> None:
    slurm = scheduler_job({"SLURM_JOB_ID": "17", "SLURMD_NODENAME": "n2", "SLURM_RESTART_COUNT": "1"})
    assert slurm == SchedulerJob("slurm", "17", "n2", 1)
    beaker = scheduler_job({"BEAKER_JOB_ID": "01JOB", "BEAKER_NODE_ID": "node-3"})
    assert beaker is not None and beaker.to_json() == {"scheduler": "beaker", "job": "01JOB", "node": "node-3"}
    assert scheduler_job({}) is None


# -- Beaker: the one replaced call is beaker-py's JobClient.get -----------------------------------


@pytest.fixture
def beaker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return write_beaker_config(tmp_path, monkeypatch)


def _beaker_run(root: Path) -> RunBuilder:
    b = RunBuilder(root)
    b.startup()
    _with_jobs(
        b, {r: {"scheduler": "beaker", "job": f"01JOB{r}", "node": f"node-{r}"} for r in b.ranks}, "beaker", "01EXP"
    )
    _all_signalled(b, None)  # from outside the container: no sender known
    return b


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("CANCELATION_CODE_SYSTEM_PREEMPTION", "preempted"),
        ("CANCELATION_CODE_MANUAL", "cancelled"),
        ("CANCELATION_CODE_TIMEOUT", "time_limit"),
        ("CANCELATION_CODE_NODE_UNHEALTHY", "node_failure"),
    ],
)
def test_beakers_cancelation_code_names_the_ending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beaker_config: Path, code: str, kind: str
) -> None:
    pytest.importorskip("beaker")
    run = _beaker_run(tmp_path).path
    assert_artifacts_valid(run)
    asked: list[str] = []
    answer_jobs(monkeypatch, code, "a reason Beaker gives", asked)
    result = audit_run(run)
    fc = result.first_cause
    assert fc is not None and (fc.kind, fc.scheduler) == (kind, "beaker"), fc
    assert "beaker ended job 01JOB0" in fc.cause and "a reason Beaker gives" in fc.cause
    assert fc.file is None  # asked, not read from a file
    assert asked and asked[0] == "01JOB0"
    # --offline: the files only, and the SIGTERM stays the first cause.
    fc_offline = audit_run(run, ask_scheduler=False).first_cause
    assert fc_offline is not None and fc_offline.kind == "signal"


def test_a_sibling_failure_is_no_beaker_ending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beaker_config: Path
) -> None:
    pytest.importorskip("beaker")
    run = _beaker_run(tmp_path).path
    answer_jobs(monkeypatch, "CANCELATION_CODE_SIBLING_TASK_FAILED", "", [])
    result = audit_run(run)
    assert result.first_cause is not None and result.first_cause.kind == "signal"
    assert any("not canceled by Beaker" in n for n in result.notes), result.notes


def test_without_a_beaker_configuration_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("beaker")
    for k in [k for k in os.environ if k.startswith("BEAKER_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    result = audit_run(_beaker_run(tmp_path).path)
    assert result.first_cause is not None and result.first_cause.kind == "signal"
    assert any("no Beaker configuration" in n for n in result.notes), result.notes


# -- SkyPilot: its job queue through its Python API (tests/harness/skypilot_api.py) ----------------


def _skypilot_run(root: Path, job_id: str) -> RunBuilder:
    b = RunBuilder(root)
    b.startup()
    jobs = {r: {"scheduler": "skypilot", "job": "sky-2026-17", "node": f"rank-{r}"} for r in b.ranks}
    _with_jobs(b, jobs, "skypilot", job_id)
    _all_signalled(b, None)
    return b


@pytest.mark.parametrize(
    ("job_id", "record", "kind", "words"),
    [
        ("17", ("managed", "CANCELLED", ""), "cancelled", "skypilot ended job 17: "),
        ("17", ("managed", "RECOVERING", "the spot VM was preempted"), "preempted", "the spot VM was preempted"),
        ("17", ("managed", "RECOVERING", "the VM stopped answering"), "node_failure", "RECOVERING"),
        ("gym-demo/3", ("cluster", "CANCELLED", ""), "cancelled", "job gym-demo/3 CANCELLED"),
    ],
)
def test_skypilots_job_record_names_the_ending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job_id: str, record: tuple[str, str, str], kind: str, words: str
) -> None:
    pytest.importorskip("sky")
    from tests.harness.skypilot_api import answer_queues, cluster_job, managed_job

    where, status, reason = record
    managed = [managed_job(17, status, failure_reason=reason or None)] if where == "managed" else []
    clusters = {"gym-demo": [cluster_job(3, status)]} if where == "cluster" else {}
    asked: list[Any] = []
    answer_queues(monkeypatch, managed, clusters, asked)
    run = _skypilot_run(tmp_path, job_id).path
    assert_artifacts_valid(run)
    fc = audit_run(run).first_cause
    assert fc is not None and (fc.kind, fc.scheduler) == (kind, "skypilot"), fc
    assert words in fc.cause and asked, fc.cause
    assert audit_run(run, ask_scheduler=False).first_cause.kind == "signal"  # --offline: the files only


def test_a_running_skypilot_job_is_no_ending_and_the_audit_says_what_it_heard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sky")
    from tests.harness.skypilot_api import answer_queues, managed_job

    answer_queues(monkeypatch, [managed_job(17, "RUNNING")], {}, [])
    result = audit_run(_skypilot_run(tmp_path, "17").path)
    assert result.first_cause is not None and result.first_cause.kind == "signal"
    assert "SkyPilot says job 17 is RUNNING" in result.notes, result.notes


# -- Slurm: the real local cluster ----------------------------------------------------------------


@pytest.mark.slurm
def test_a_vanished_node_is_named_with_slurms_node_state(
    slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rank 0's host vanished: no record of its own, its peers timed it out. The scheduler knows.
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    b = peer_silent(tmp_path)
    jobs = {r: {"scheduler": "slurm", "job": "4242", "node": f"n{r + 1}"} for r in b.ranks}
    _with_jobs(b, jobs, "slurm", "4242")
    assert_artifacts_valid(b.path)
    slurm_cluster.run(["scontrol", "update", "nodename=n1", "state=down", "reason=test power lost"])
    try:
        fc = audit_run(b.path).first_cause
    finally:
        slurm_cluster.run(["scontrol", "update", "nodename=n1", "state=resume"])
    assert fc is not None and (fc.kind, fc.scheduler, fc.rank) == ("node_failure", "slurm", 0), fc
    assert "node n1, rank 0" in fc.cause and "State=DOWN" in fc.cause and "Reason=test power lost" in fc.cause, fc.cause


@pytest.mark.slurm
def test_slurms_job_record_names_a_cancel_without_the_output(
    slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    script = tmp_path / "sleep.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    job = slurm_cluster.sbatch(script, "-N1", "-o", "/dev/null")
    slurm_cluster.run(["scancel", str(job)])
    assert slurm_cluster.wait_job(job, 60)["JobState"] == "CANCELLED"
    b = RunBuilder(tmp_path)
    b.startup()
    _with_jobs(b, {r: {"scheduler": "slurm", "job": str(job), "node": "n1"} for r in b.ranks}, "slurm", str(job))
    _all_signalled(b, {"pid": 4000, "uid": 0, "name": "slurmstepd"})
    assert not list(b.path.glob("job-slurm-*.out"))  # the job wrote its output elsewhere
    fc = audit_run(b.path).first_cause
    assert fc is not None and (fc.kind, fc.scheduler) == ("cancelled", "slurm"), fc
    assert f"scontrol show job {job}: JobState=CANCELLED" in fc.cause, fc.cause


def test_without_scontrol_the_audit_says_it_could_not_ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("scontrol") is None
    b = peer_silent(tmp_path)
    _with_jobs(b, {r: {"scheduler": "slurm", "job": "9", "node": f"n{r + 1}"} for r in b.ranks}, "slurm", "9")
    result = audit_run(b.path)
    assert result.first_cause is not None and result.first_cause.kind == "silent"
    assert any("scontrol is not on PATH" in n for n in result.notes), result.notes
