"""Replay a rendered Beaker task the way Beaker runs it: N real processes on this machine, each with
the environment Beaker gives a replica (BEAKER_REPLICA_RANK, BEAKER_REPLICA_COUNT,
BEAKER_LEADER_REPLICA_HOSTNAME, BEAKER_NODE_HOSTNAME, ...), plus the task's exact command and
envVars as beaker-py reads them from the rendered YAML. Then the preemption path: SIGTERM to every
replica at once, as Beaker does when it preempts a replica group; and Beaker's retry of a failed
task: every replica started again as a new job (new BEAKER_JOB_ID) of the same workload, with the
same command and envVars, resumes from its checkpoint by itself, within the restart cap.

What is not Beaker here (nothing else is mocked): the processes share one host, so each gets a
loopback address through the agent's test-only hook (GYM_TEST_REPLICA_ADDRESS, loopback only;
the production refusal of a hostname resolving to loopback stays), CUDA_VISIBLE_DEVICES stands in
for the node's 8 GPUs, and a secret's value is injected by the test as Beaker would inject it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from beaker import BeakerExperimentSpec

from agent.coord.identity import TEST_ADDRESS_ENV
from agent.proc import tempdirs
from launch.cli import main as launch_main
from schemas import names
from tests.harness import (
    agent_tmp_root,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    read,
    wait_phase,
)
from tests.harness.beaker_api import answer_jobs, write_beaker_config
from tests.harness.replay import finish, resuming_spec, start_node

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SECRET_VALUE = "replayed-secret-value-0123"


def render(tmp_path: Path, uuid: str, *sets: str, spec: Path = REPO / "examples" / "demo.toml") -> BeakerExperimentSpec:
    job = tmp_path / f"{uuid}.beaker.yaml"
    args = ["render", str(spec), "--backend", "beaker", "--uuid", uuid]
    args += ["--output-root", str(tmp_path / "out"), "-o", str(job)]
    for s in (
        'launch.beaker.image="team/gym-agent"',
        'launch.beaker.cluster="replay/cluster"',
        'launch.secrets.REPLAY_SECRET="team-replay-secret"',
        'launch.env.REPLAY_PLAIN="plain-value"',
        *sets,
    ):
        args += ["--set", s]
    assert launch_main(args) == 0
    return BeakerExperimentSpec.from_file(job)


def beaker_env(task, rank: int, tmp_path: Path, start: int = 1) -> dict[str, str]:
    """What a Beaker replica's container has: the task's envVars (secrets resolved by Beaker) and
    Beaker's replica variables. PATH/HOME come from this machine, as the image's would. `start`:
    1 for the task's first start, 2 for Beaker's first retry, ... (new jobs, same workload)."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "VIRTUAL_ENV") if k in os.environ}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"  # the image has gym-agent on PATH
    for var in task.env_vars:
        env[var.name] = SECRET_VALUE if var.secret else var.value
    hosts = [f"127.0.0.{2 + r}" for r in range(task.replicas)]
    env.update(
        {
            "BEAKER_REPLICA_RANK": str(rank),
            "BEAKER_REPLICA_COUNT": str(task.replicas),
            "BEAKER_LEADER_REPLICA_HOSTNAME": hosts[0],
            "BEAKER_LEADER_REPLICA_NODE_ID": "node-0",
            "BEAKER_NODE_HOSTNAME": hosts[rank],
            "BEAKER_NODE_ID": f"node-{rank}",
            "BEAKER_TASK_ID": "replay-task",
            "BEAKER_JOB_ID": f"replay-job-{start}-{rank}",
            "BEAKER_EXPERIMENT_ID": "replay-experiment",
            "BEAKER_WORKLOAD_ID": "replay-experiment",
            "BEAKER_ASSIGNED_GPU_COUNT": str(task.resources.gpu_count),
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(task.resources.gpu_count)),
            TEST_ADDRESS_ENV: hosts[rank],
            tempdirs.ROOT_ENV: str(agent_tmp_root(tmp_path)),
        }
    )
    return env


def start_replicas(task, tmp_path: Path, start: int = 1) -> list[subprocess.Popen]:
    # Exactly the task's command, resolved on PATH like in the container, in the image's working
    # directory (the demo driver's relative path).
    return [start_node(task.command, beaker_env(task, rank, tmp_path, start), REPO) for rank in range(task.replicas)]


def assert_secret_not_recorded(run_dir: Path) -> None:
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert SECRET_VALUE.encode() not in f.read_bytes(), f"the secret's value reached {f}"


@pytest.mark.ray
# `make test-long`: `make test` keeps Beaker's command and envVars replayed below (the preemption,
# the retries) and the demo replayed under a scheduler's own script (SkyPilot's, with Ray and the judge).
@pytest.mark.long
def test_replayed_task_runs_and_passes_the_audit(tmp_path: Path) -> None:
    uuid = "beaker-replay-ok"
    [task] = render(tmp_path, uuid).tasks
    assert task.replicas == 3 and task.command[0] == "gym-agent"
    run_dir = tmp_path / "out" / "cluster" / uuid
    procs = start_replicas(task, tmp_path)
    codes, text = finish(procs, 400)
    assert codes == [0, 0, 0], text[-6000:]
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    assert_secret_not_recorded(run_dir)
    audit(run_dir, verdict="pass")


def test_sigterm_to_every_replica_is_a_signal_failure_and_the_audit_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = "beaker-replay-preempt"
    sleepy = 'driver.command=["python", "-c", "import time; time.sleep(600)"]'
    # Without Ray: the preemption's SIGTERM and Beaker's answer are the subject (the replayed demo
    # above runs Ray, in make test-long; a signalled agent's Ray is stopped in tests/test_hung_fs_e2e.py).
    [task] = render(tmp_path, uuid, sleepy, "ray.enabled=false").tasks
    run_dir = tmp_path / "out" / "cluster" / uuid
    procs = start_replicas(task, tmp_path)
    try:
        for rank in range(task.replicas):
            wait_phase(run_dir, rank, "driver", 300)
        # Beaker preempts a replica group (propagatePreemption): every replica's main process
        # gets SIGTERM at once.
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes, text = finish(procs, 120)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert all(c != 0 for c in codes), codes
    fails = failures(run_dir)
    assert sorted(fails) == [0, 1, 2], text[-4000:]
    # Each replica records the SIGTERM it received, unless a faster peer's record reached it
    # first: then it records that reaction. Which of the two lands first is the machine's load.
    signalled = {rank for rank, rec in fails.items() if rec["kind"] == "signal"}
    assert signalled, fails
    for rank, rec in fails.items():
        assert rec["kind"] in ("signal", "peer_failure"), (rank, rec)
        assert "SIGTERM" in rec["cause"] or rec["reacting_to"]["rank"] in signalled, (rank, rec)
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    assert_secret_not_recorded(run_dir)
    from audit.api import audit_run

    result = audit_run(run_dir)
    assert result.verdict == "fail"
    fc = result.first_cause
    # Every replica was signalled: the first cause is one of them, and it says what happened.
    assert fc is not None and fc.kind == "signal" and fc.rank in signalled, (fc, result.cascade)
    assert "SIGTERM" in fc.cause
    # Beaker knows why: asked about the jobs the agents recorded, it says preempted. Beaker's API
    # cannot exist here: its one call (JobClient.get) answers as Beaker does for a preemption.
    write_beaker_config(tmp_path, monkeypatch)
    asked: list[str] = []
    answer_jobs(monkeypatch, "CANCELATION_CODE_SYSTEM_PREEMPTION", "preempted by a higher priority job", asked)
    fc = audit_run(run_dir).first_cause
    assert fc is not None and (fc.kind, fc.scheduler) == ("preempted", "beaker"), fc
    assert "system preemption (preempted by a higher priority job)" in fc.cause, fc.cause
    # Each replica's own job, as the agents recorded it from BEAKER_JOB_ID.
    recorded = {json.loads(p.read_text())["scheduler_job"]["job"] for p in (run_dir / "addresses").glob("*.json")}
    assert set(asked) == recorded and len(recorded) == task.replicas, (asked, recorded)


def _coordination_only(tmp_path: Path) -> Path:
    """Two whole-node replicas, no Ray; the driver fails its first attempt after a checkpoint."""
    return resuming_spec(tmp_path, 2, "sys.exit(3)")


def test_a_retried_task_resumes_by_itself_from_its_checkpoint(tmp_path: Path) -> None:
    uuid = "beaker-replay-retry"
    [task] = render(tmp_path, uuid, "launch.max_retries=1", spec=_coordination_only(tmp_path)).tasks
    assert "--resume" not in task.command
    run_dir = tmp_path / "out" / "cluster" / uuid
    codes, text = finish(start_replicas(task, tmp_path, start=1), 120)
    assert codes == [1, 1], text[-4000:]
    # Beaker's retry: new jobs of the same workload, the same command and envVars.
    codes, text = finish(start_replicas(task, tmp_path, start=2), 120)
    assert codes == [0, 0], text[-4000:]
    assert (run_dir / "checkpoints" / "resumed").read_text() == "2"
    claim = read(run_dir, names.attempt_claim(2))
    assert (claim["mode"], claim["token"], claim["previous"]) == ("restart", "beaker-replay-experiment", 1)
    assert (run_dir / names.attempt_dir(1) / names.failure(0)).is_file()
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    result = audit(run_dir, verdict="pass")
    first, last = result.attempts
    assert (first.attempt, first.verdict, first.first_cause.kind) == (1, "fail", "driver_exit"), first
    assert (last.attempt, last.verdict, last.mode, last.token) == (2, "pass", "restart", "beaker-replay-experiment")
    report = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, timeout=120)
    said = (
        "attempt 1: FAIL, run failed (launch beaker-replay-experiment)",
        "attempt 2: PASS, run succeeded (restarted by the scheduler, launch beaker-replay-experiment)",
    )
    assert all(line in report.stdout for line in said), report.stdout


def test_a_retry_past_max_retries_is_refused(tmp_path: Path) -> None:
    uuid = "beaker-replay-cap"
    [task] = render(tmp_path, uuid, "launch.max_retries=0", spec=_coordination_only(tmp_path)).tasks
    run_dir = tmp_path / "out" / "cluster" / uuid
    assert finish(start_replicas(task, tmp_path, start=1), 120)[0] == [1, 1]
    codes, text = finish(start_replicas(task, tmp_path, start=2), 60)
    assert codes == [2, 2] and "attempt 2 refused: max_retries" in text, text[-4000:]
    refused = read(run_dir, names.attempt_refused(2))
    assert refused["state"] == "refused" and "max_retries is 0" in refused["reason"], refused
    assert not (run_dir / names.attempt_claim(2)).exists() and not (run_dir / "checkpoints" / "resumed").exists()
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
