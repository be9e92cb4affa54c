"""Replay a rendered Beaker task the way Beaker runs it: N real processes on this machine, each with
the environment Beaker gives a replica (BEAKER_REPLICA_RANK, BEAKER_REPLICA_COUNT,
BEAKER_LEADER_REPLICA_HOSTNAME, BEAKER_NODE_HOSTNAME, ...), plus the task's exact command and
envVars as beaker-py reads them from the rendered YAML. Then the preemption path: SIGTERM to every
replica at once, as Beaker does when it preempts a replica group.

What is not Beaker here (nothing else is mocked): the processes share one host, so each gets a
loopback address through the agent's test-only hook (GYM_TEST_REPLICA_ADDRESS, loopback only;
the production refusal of a hostname resolving to loopback stays), CUDA_VISIBLE_DEVICES stands in
for the node's 8 GPUs, and a secret's value is injected by the test as Beaker would inject it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from beaker import BeakerExperimentSpec

from agent.coord.identity import TEST_ADDRESS_ENV
from agent.proc import tempdirs
from launch.cli import main as launch_main
from tests.harness import (
    agent_tmp_root,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    wait_phase,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SECRET_VALUE = "replayed-secret-value-0123"


def render(tmp_path: Path, uuid: str, *sets: str) -> BeakerExperimentSpec:
    job = tmp_path / f"{uuid}.beaker.yaml"
    args = ["render", str(REPO / "examples" / "demo.toml"), "--backend", "beaker", "--uuid", uuid]
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


def beaker_env(task, rank: int, tmp_path: Path) -> dict[str, str]:
    """What a Beaker replica's container has: the task's envVars (secrets resolved by Beaker) and
    Beaker's replica variables. PATH/HOME come from this machine, as the image's would."""
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
            "BEAKER_JOB_ID": f"replay-job-{rank}",
            "BEAKER_EXPERIMENT_ID": "replay-experiment",
            "BEAKER_ASSIGNED_GPU_COUNT": str(task.resources.gpu_count),
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(task.resources.gpu_count)),
            TEST_ADDRESS_ENV: hosts[rank],
            tempdirs.ROOT_ENV: str(agent_tmp_root(tmp_path)),
        }
    )
    return env


def start_replicas(task, tmp_path: Path) -> list[subprocess.Popen]:
    procs = []
    for rank in range(task.replicas):
        procs.append(
            subprocess.Popen(
                task.command,  # exactly the task's command, resolved on PATH like in the container
                env=beaker_env(task, rank, tmp_path),
                cwd=REPO,  # the image's working directory (the demo driver's relative path)
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    return procs


def finish(procs: list[subprocess.Popen], timeout: float) -> tuple[list[int], str]:
    codes, text = [], []
    end = time.monotonic() + timeout
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, end - time.monotonic()))
            codes.append(p.returncode)
            text.append(out or "")
    finally:
        for p in procs:  # by pid (own session), never by name
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return codes, "\n".join(text)


def assert_secret_not_recorded(run_dir: Path) -> None:
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert SECRET_VALUE.encode() not in f.read_bytes(), f"the secret's value reached {f}"


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


def test_sigterm_to_every_replica_is_a_signal_failure_and_the_audit_says_so(tmp_path: Path) -> None:
    uuid = "beaker-replay-preempt"
    sleepy = 'driver.command=["python", "-c", "import time; time.sleep(600)"]'
    [task] = render(tmp_path, uuid, sleepy).tasks
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
