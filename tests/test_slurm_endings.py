"""Endings the scheduler causes, on the real local Slurm cluster (issue 23): a job that hits its
time limit, a job cancelled with scancel, a job whose node is set DOWN. Each time every agent
gets SIGTERM from slurmstepd and no rank failed; the audit names the scheduler's ending (kind and
its own words), not a rank's SIGTERM, and nothing is left running. And the other way round: a job
one of whose agents is SIGKILLed ends, and the audit names that rank although Slurm SIGTERMed
the others first.

The time-limit job is tests/test_slurm_rendered.py's demo made to run for long (Ray, the judge);
the others run without Ray or judges (`_plain_spec`). Each is submitted with `gym-launch submit
--backend slurm`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm import cluster as slurm
from test_slurm_cluster import wait_nodes_clean
from test_slurm_rendered import BIN, NODES, REPO, finished, spec, submit

from schemas import FailureKind, names
from tests.harness import (
    agent_pid,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    uid,
    wait_for_file,
    wait_phase,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

BODY = """
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 19
[ray]
num_cpus = 1
object_store_memory = 100000000
"""
LONG = {"DEMO_STEPS": "100000"}


def _ended(c: slurm.Cluster, job: int, run_dir: Path, kind: str) -> dict:
    info, out = finished(c, job, run_dir)
    assert info["JobState"] != "COMPLETED", info
    assert_artifacts_valid(run_dir)
    recs = failures(run_dir)
    # No rank failed: every record is the scheduler's signal or a reaction to a peer's. slurmstepd
    # signals every process of the step, the driver too: its SIGTERM can end the driver before the
    # agent's own handler runs, and the agent then records the driver's death by that signal.
    assert recs and all(
        v["kind"] in (FailureKind.SIGNAL, FailureKind.PEER_FAILURE, FailureKind.PEER_SILENT)
        or (v["kind"] == FailureKind.DRIVER_EXIT and v.get("exit_code") in (-15, 143))
        for v in recs.values()
    ), recs
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1, cli.stdout[-3000:] + cli.stderr
    doc = json.loads(cli.stdout)
    fc = doc["first_cause"]
    assert fc["kind"] == kind and fc["scheduler"] == "slurm", (fc, out[-3000:])
    assert f"slurm ended job {job}" in fc["cause"] and "*** JOB" in fc["cause"], fc
    text = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, timeout=120)
    lines = text.stdout.splitlines()
    assert lines[lines.index("First cause:") + 1].strip().startswith(f"slurm (the scheduler), {kind}"), text.stdout[
        :2000
    ]
    assert_nothing_left(run_dir)
    return fc


@pytest.mark.long  # Slurm's shortest time limit is a minute, enforced on its own periodic check: ~90 s
def test_a_time_limit_is_named(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("tlimit"), tmp_path / "out"
    t0 = time.monotonic()
    job = submit(
        c, spec(tmp_path, "tlimit", body=BODY, driver_env=LONG), root, uuid, "--set", 'launch.slurm.time="00:01:00"'
    )
    fc = _ended(c, job, root / "cluster" / uuid, FailureKind.TIME_LIMIT)
    assert "DUE TO TIME LIMIT" in fc["cause"]
    wait_nodes_clean(c, list(NODES))
    print(f"time limit: job {job} ended and audited {time.monotonic() - t0:.1f}s after submit")


def test_a_cancel_is_named(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("cancel"), tmp_path / "out"
    job = submit(c, _sleeping_spec(tmp_path, "cancel"), root, uuid)
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    c.run(["scancel", str(job)])
    _ended(c, job, run_dir, FailureKind.CANCELLED)
    wait_nodes_clean(c, list(NODES))


def test_a_node_set_down_is_named(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("ndown"), tmp_path / "out"
    # Without a requeue the job ends NODE_FAIL: this test is about naming the ending.
    path = _sleeping_spec(tmp_path, "ndown")
    job = submit(c, path, root, uuid, "--set", 'launch.slurm.directives=["--no-requeue"]')
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    try:
        c.run(["scontrol", "update", "nodename=n2", "state=down", "reason=gym-test"])
        fc = _ended(c, job, run_dir, FailureKind.NODE_FAILURE)
    finally:
        c.run(["scontrol", "update", "nodename=n2", "state=resume"], check=False)
    assert "node n2" in fc["cause"] and "DUE TO NODE FAILURE" in fc["cause"], fc
    wait_nodes_clean(c, list(NODES))


# Waits for the stop file (or the scheduler's own SIGTERM, which slurmstepd sends to every process
# of the step, the driver too), checkpoints and exits; the next attempt finds the checkpoint.
# The resuming driver's line once its SIGTERM handler is installed: a signal before it (a loaded
# machine takes seconds to start Python) would end the driver before it could checkpoint.
DRIVER_READY = "ready to checkpoint"
RESUMING_DRIVER = """
import json, os, signal, sys, time
READY = {ready!r}
sys.path.insert(0, {repo!r})
from agent import driver_api
ckpt = os.path.join(os.environ["GYM_CHECKPOINT_DIR"], "ckpt.json")
if os.path.exists(ckpt):
    print("resumed from", json.load(open(ckpt)), flush=True)
    driver_api.write_result(optimizer_steps=2, final_loss=0.5, policy_version=2, policy_refreshes=1, judge_replies=0)
    sys.exit(0)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append("SIGTERM"))
print(READY, flush=True)
stop = os.environ["GYM_STOP_FILE"]
while not os.path.exists(stop) and not told:
    time.sleep(0.2)
with open(ckpt, "w") as f:
    json.dump({{"attempt": os.environ["GYM_ATTEMPT"]}}, f)
print("checkpointed", flush=True)
"""


def _plain_spec(tmp_path: Path, name: str, driver: str, *, nodes: int, extra: str = "") -> Path:
    """`nodes` 8-GPU nodes (one trains), no Ray, no judges: the scheduler's ending is what is
    tested, and a Ray start on three nodes would double the test's time."""
    spec_path = tmp_path / f"{name}.toml"
    spec_path.write_text(
        f"""
name = "{name}"
[launch]
gpus_per_replica = 8
node_gpus = 8
{extra}
[launch.slurm]
agent = "{BIN / "gym-agent"}"
explicit_address = true
time = "00:10:00"
[launch.coordination]
startup_timeout = 120
heartbeat_timeout = 30
heartbeat_interval = 1.0
poll_interval = 0.5
teardown_grace = 5.0
[trainer]
nodes = 1
gpus_per_node = 8
[inference]
gpus = {8 * (nodes - 1)}
[driver]
command = ["{sys.executable}", "{driver}"]
checkpoint_grace = 30
[ray]
enabled = false
"""
    )
    return spec_path


def _sleeping_spec(tmp_path: Path, name: str) -> Path:
    """Three nodes whose driver sleeps until the scheduler ends the job."""
    driver = tmp_path / "sleeping_driver.py"
    driver.write_text("import time\ntime.sleep(600)\n")
    return _plain_spec(tmp_path, name, str(driver), nodes=3)


def _resuming_spec(tmp_path: Path, name: str) -> Path:
    """Two nodes, the resuming driver with a checkpoint grace, one restart allowed."""
    driver = tmp_path / "resuming_driver.py"
    driver.write_text(RESUMING_DRIVER.format(repo=str(REPO), ready=DRIVER_READY))
    return _plain_spec(tmp_path, name, str(driver), nodes=2, extra="max_retries = 1")


def test_a_walltime_warning_checkpoints_and_the_requeued_job_resumes(
    slurm_cluster: slurm.Cluster, tmp_path: Path
) -> None:
    c, uuid, root = slurm_cluster, uid("requeue"), tmp_path / "out"
    spec_path = _resuming_spec(tmp_path, "requeue")
    job = submit(c, spec_path, root, uuid)
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    _driver_ready(run_dir, 120)
    # What Slurm sends at --signal=B:USR1@SECONDS, sent now: to the batch shell only.
    c.run(["scancel", "--batch", "--signal=USR1", str(job)])
    _requeued(c, job)
    info, out = finished(c, job, run_dir)
    assert info["JobState"] == "COMPLETED", (info.get("Reason"), _ctld_log(c, job), out[-2000:])
    assert "requeueing job" in out and "resumed from {'attempt': '1'}" in out, out[-4000:]
    assert_artifacts_valid(run_dir)
    first = run_dir / names.attempt_dir(1)
    stop = json.loads((first / names.DRIVER_STOP).read_text())
    assert stop["outcome"] == "exited" and stop["exit_code"] == 0 and "time_limit" in stop["reason"], stop
    kinds = {json.loads(p.read_text())["kind"] for p in (first / names.FAILURES_DIR).glob("failure-*.json")}
    assert FailureKind.TIME_LIMIT in kinds, kinds
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True, timeout=120)
    doc = json.loads(cli.stdout)
    assert cli.returncode == 0 and doc["verdict"] == "pass", cli.stdout[-3000:]
    assert [a["first_cause"]["kind"] if a["first_cause"] else None for a in doc["attempts"]] == ["time_limit", None]
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, list(NODES))


def _driver_ready(run_dir: Path, timeout: float) -> None:
    log = run_dir / names.driver_log(0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and DRIVER_READY in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"the driver did not install its SIGTERM handler within {timeout:.0f} s")


def _ctld_log(c: slurm.Cluster, job: int) -> str:
    """What the controller logged about the job: the evidence when a requeue goes wrong."""
    log = c.dir / "log" / "slurmctld.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(ln for ln in lines if f"JobId={job}" in ln or f"job {job}" in ln.lower())[-1500:]


def _requeued(c: slurm.Cluster, job: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (
        c.job(job).get("Restarts") == "1" and c.job(job)["JobState"] == "PENDING"
    ):
        time.sleep(0.5)
    info = c.job(job)
    assert info["Restarts"] == "1" and info["JobState"] == "PENDING", info
    # Slurm holds a requeued job for two minutes (BeginTime), time for its last start to finish on
    # the nodes; a test that skips the hold first waits for that itself (seen under load: a start
    # forced while the last one's processes were still going ended FAILED at once).
    wait_nodes_clean(c, list(NODES), timeout=60)
    c.run(["scontrol", "update", f"jobid={job}", "starttime=now"])


def test_a_preemption_is_named_and_the_requeued_job_resumes(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    # The local cluster preempts by partition tier (PreemptMode=REQUEUE): a job in `urgent` takes
    # the gpu nodes, ours is requeued; when it runs again it is attempt 2 and resumes.
    c, uuid, root = slurm_cluster, uid("preempt"), tmp_path / "out"
    job = submit(c, _resuming_spec(tmp_path, "preempt"), root, uuid)
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    _driver_ready(run_dir, 120)  # the promise is a checkpoint at the scheduler's SIGTERM, once it can take one
    urgent_script = tmp_path / "urgent.sh"
    urgent_script.write_text("#!/bin/sh\nsleep 2\n")
    urgent = c.sbatch(urgent_script, "-p", "urgent", "-N3", "--exclusive", "-o", "/dev/null")
    assert c.wait_job(urgent, 120)["JobState"] == "COMPLETED"
    _requeued(c, job)
    info, out = finished(c, job, run_dir)
    assert info["JobState"] == "COMPLETED", (info.get("Reason"), _ctld_log(c, job), out[-2000:])
    assert "DUE TO PREEMPTION" in out and "resumed from {'attempt': '1'}" in out, out[-4000:]
    assert_artifacts_valid(run_dir)
    # The driver was told at the scheduler's SIGTERM and checkpointed within its grace.
    stop = json.loads((run_dir / names.attempt_dir(1) / names.DRIVER_STOP).read_text())
    assert stop["outcome"] == "exited", stop
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True, timeout=120)
    doc = json.loads(cli.stdout)
    assert cli.returncode == 0 and doc["verdict"] == "pass", cli.stdout[-3000:]
    first = doc["attempts"][0]["first_cause"]
    assert first["kind"] == "preempted" and first["scheduler"] == "slurm", doc["attempts"]
    assert "DUE TO PREEMPTION" in first["cause"] and doc["attempts"][1]["first_cause"] is None
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, list(NODES))


def _status(run_dir: Path, c: slurm.Cluster) -> tuple[dict, str]:
    argv = [str(BIN / "gym-launch"), "status", str(run_dir)]
    doc = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60, env=c.env())
    text = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=c.env())
    return json.loads(doc.stdout), text.stdout


def test_status_shows_a_pending_jobs_reason(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("pending"), tmp_path / "out"
    held = ["--set", 'launch.slurm.directives=["--begin=now+3600"]']
    job = submit(c, spec(tmp_path, "pending", body=BODY, driver_env=LONG), root, uuid, *held)
    run_dir = root / "cluster" / uuid
    try:
        doc, text = _status(run_dir, c)
        assert doc["outcome"] == "not started", doc
        sched = doc["scheduler"]
        assert (sched["backend"], sched["job_id"], sched["state"], sched["reason"]) == (
            "slurm",
            str(job),
            "PENDING",
            "BeginTime",
        ), sched
        assert f"scheduler: slurm job {job} PENDING (BeginTime)" in text, text
    finally:
        c.run(["scancel", str(job)])
    c.wait_job(job, 60)


def test_status_shows_a_rank_that_has_not_joined(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("late"), tmp_path / "out"
    # n3's agent starts late, as on a node whose image is still being pulled.
    late = tmp_path / "late-agent"
    late.write_text(f'#!/bin/bash\n[ "$(hostname)" = n3 ] && sleep 60\nexec {BIN / "gym-agent"} "$@"\n')
    late.chmod(0o755)
    job = submit(
        c, spec(tmp_path, "late", body=BODY, driver_env=LONG), root, uuid, "--set", f'launch.slurm.agent="{late}"'
    )
    run_dir = root / "cluster" / uuid
    try:
        deadline = time.monotonic() + 60
        doc: dict = {}
        text = ""
        while time.monotonic() < deadline:
            doc, text = _status(run_dir, c)
            joined = {r["rank"] for r in doc["ranks"] if r["address"]}
            if doc["scheduler"]["state"] == "RUNNING" and len(joined) == 2:
                break
            time.sleep(0.5)
        assert doc["scheduler"]["state"] == "RUNNING" and doc["scheduler"]["nodes"] == "n[1-3]", doc
        assert doc["not_joined"] == [2], doc
        assert "not joined yet: rank(s) 2" in text and f"slurm job {job} RUNNING on n[1-3]" in text, text
    finally:
        c.run(["scancel", str(job)])
    finished(c, job, run_dir)
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, list(NODES))


def test_a_killed_agent_ends_the_job_and_the_audit_names_its_rank(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    # Without Ray: the step's end after one task's death and the audit's answer are the subject (a
    # Slurm job's Ray stopped by the scheduler: make faults' slurm-scancel and slurm-node-down rows).
    c, uuid, root = slurm_cluster, uid("rkill"), tmp_path / "out"
    job = submit(c, _sleeping_spec(tmp_path, "rkill"), root, uuid)
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    victim = agent_pid(run_dir, 1)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    info, out = finished(c, job, run_dir)
    took = time.monotonic() - t0
    assert info["JobState"] != "COMPLETED", info
    # The killed agent's reaper writes its record as its agent dies, while Slurm ends the step: on a
    # loaded host the job's end can be seen first (a loaded run read the others' records alone).
    wait_for_file(run_dir / names.failure(1), 30)
    wait_for_file(run_dir / names.cleanup(1), 30)
    assert_artifacts_valid(run_dir)
    recs = failures(run_dir)
    assert recs[1]["kind"] == FailureKind.AGENT_DIED, recs
    # The others were signalled by Slurm (si_pid: the step daemon), which the records say.
    senders = {r: (v.get("sender") or {}).get("name") for r, v in recs.items() if v["kind"] == FailureKind.SIGNAL}
    assert all(name == "slurmstepd" for name in senders.values()), recs
    audit(run_dir, verdict="fail", rank=1, kind=FailureKind.AGENT_DIED)
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, list(NODES))
    assert c.queue() == []
    print(f"killed agent: job ended {took:.1f}s after the kill; records {[(r, v['cause']) for r, v in recs.items()]}")
