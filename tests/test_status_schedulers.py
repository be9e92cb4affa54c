"""`gym-launch status` shows the scheduler's side of a submitted run for every backend (issue 35):
Beaker through beaker-py and SkyPilot through its Python API, each answering with its own objects
(Beaker's protobuf messages, SkyPilot's job records and status enums) from stand-ins of the calls
that would reach their servers (tests/harness/beaker_api.py, tests/harness/skypilot_api.py); without
a client, status says what it would ask. Slurm's view runs on the real cluster in test_slurm_endings.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launch.cli import main
from schemas import names
from tests.harness.beaker_api import answer_experiment, write_beaker_config
from tests.harness.rundirs import T0, RunBuilder
from tests.harness.skypilot_api import answer_queues, cluster_job, managed_job


def _submitted(root: Path, backend: str, job_id: str) -> Path:
    b = RunBuilder(root)
    b.startup()
    b.run.write_artifact(
        names.SUBMISSION,
        b.writer(None, "launcher"),
        {"backend": backend, "job_id": job_id, "job_file": "job", "command": ["submit"], "submitted_at": T0},
    )
    return b.path


def _status(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    main(["status", str(run), "--json"])
    doc = json.loads(capsys.readouterr().out)
    main(["status", str(run)])
    return doc["scheduler"], capsys.readouterr().out


# --- Beaker --------------------------------------------------------------------------------------


def test_beaker_status_reads_the_experiments_replica_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("beaker")
    write_beaker_config(tmp_path, monkeypatch)
    run = _submitted(tmp_path / "out", "beaker", "01EXP")
    asked: list[str] = []
    running = [(f"01JOB{r}", "STATUS_RUNNING", f"node-{r}", "") for r in range(3)]
    answer_experiment(monkeypatch, "01EXP", "STATUS_RUNNING", running, asked)
    sched, text = _status(run, capsys)
    assert (sched["backend"], sched["job_id"], sched["state"], sched["error"]) == ("beaker", "01EXP", "RUNNING", None)
    assert sched["nodes"] == "node-0,node-1,node-2" and sched["restarts"] == 0
    assert "scheduler: beaker job 01EXP RUNNING on node-0,node-1,node-2" in text, text
    assert asked[:2] == ["workload 01EXP", "jobs of task 01TASK"]
    # Preempted, retried once: the newest launch's jobs (newest first), the code as the audit reads it.
    retried = [(f"01NEW{r}", "STATUS_CANCELED", f"node-{r}", "CANCELATION_CODE_SYSTEM_PREEMPTION") for r in range(3)]
    answer_experiment(monkeypatch, "01EXP", "STATUS_CANCELED", retried + running, asked)
    sched, text = _status(run, capsys)
    assert (sched["state"], sched["restarts"]) == ("CANCELED", 1)
    assert sched["reason"] == "canceled: system preemption (preempted)"
    assert "beaker job 01EXP CANCELED (canceled: system preemption (preempted))" in text, text


def test_beaker_status_without_a_configuration_says_what_it_would_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("beaker")
    for k in [k for k in os.environ if k.startswith("BEAKER_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    sched, text = _status(_submitted(tmp_path / "out", "beaker", "01EXP"), capsys)
    assert sched["state"] is None and "no Beaker configuration" in sched["error"]
    assert sched["asks"] == "Beaker for experiment 01EXP and its task's jobs (beaker-py: workload.get, job.list)"
    assert "state unknown (not asked: no Beaker configuration" in text and "would ask Beaker for experiment" in text


# --- SkyPilot ------------------------------------------------------------------------------------


def test_skypilot_status_reads_the_managed_jobs_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sky")
    run = _submitted(tmp_path / "out", "skypilot", "17")
    asked: list[Any] = []
    record = managed_job(
        17, "RECOVERING", recovery_count=1, failure_reason="the spot VM was preempted", infra="k8s/ctx"
    )
    answer_queues(monkeypatch, [managed_job(16, "RUNNING"), record], {}, asked)
    sched, text = _status(run, capsys)
    assert (sched["state"], sched["restarts"], sched["nodes"]) == ("RECOVERING", 1, "k8s/ctx")
    assert sched["reason"] == "the spot VM was preempted (preempted)"
    assert asked[0] == ("jobs.queue_v2", False, [17])  # never refresh: that would start the controller
    assert "scheduler: skypilot job 17 RECOVERING (the spot VM was preempted (preempted)) on k8s/ctx" in text
    assert "restarted 1 time(s)" in text
    answer_queues(monkeypatch, [managed_job(17, "SUCCEEDED")], {}, asked)
    from launch.backends.skypilot.query import view as skypilot_view

    assert skypilot_view("17").ended and not skypilot_view("16").ended  # 16: not in this queue's answer


def test_skypilot_status_of_a_job_on_its_own_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sky")
    run = _submitted(tmp_path / "out", "skypilot", "gym-demo/3")
    answer_queues(monkeypatch, [], {"gym-demo": [cluster_job(2, "SUCCEEDED"), cluster_job(3, "CANCELLED")]}, [])
    sched, _ = _status(run, capsys)
    assert (sched["state"], sched["reason"], sched["error"]) == ("CANCELLED", "cancelled", None)


def test_skypilot_status_without_a_server_says_what_it_would_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sky")
    from sky.server import common

    # A port nothing listens on: SkyPilot's own health check answers, and nothing is started.
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:9")
    common.get_server_url.cache_clear()
    try:
        sched, text = _status(_submitted(tmp_path / "out", "skypilot", "17"), capsys)
    finally:
        common.get_server_url.cache_clear()
    assert sched["state"] is None and "no SkyPilot API server answers at http://127.0.0.1:9" in sched["error"]
    assert sched["asks"] == "SkyPilot for managed job 17 (sky.jobs.queue_v2; `sky jobs queue 17`)"
    assert "would ask SkyPilot for managed job 17" in text
