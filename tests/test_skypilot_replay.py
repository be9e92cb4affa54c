"""Replay a rendered SkyPilot task the way SkyPilot runs it on every node: the task as SkyPilot's own
loader reads it (sky.Task.from_yaml), each node's script built by SkyPilot's own code (the task's run
wrapped as its runtime wraps it, then log_lib.make_task_bash_script: ~/.bashrc, `cd ~/sky_workdir`,
the task's envs and SkyPilot's SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES, SKYPILOT_NODE_IPS,
SKYPILOT_NUM_GPUS_PER_NODE, SKYPILOT_TASK_ID exported), run with `/bin/bash -i` as SkyPilot runs it,
one real process per node on this machine. Then one node killed (SIGKILL to everything it runs, as a
lost VM or pod), and a managed job's recovery: every node started again with the same task id.

What is not SkyPilot here (nothing else is mocked): the nodes share one host, so each gets a loopback
address through the agent's test-only hook (GYM_TEST_REPLICA_ADDRESS, loopback only; a loopback
SKYPILOT_NODE_IPS stays refused), and the node IPs SkyPilot would export are those loopback addresses.
No GPU exists: SKYPILOT_NUM_GPUS_PER_NODE alone tells the agent its GPUs, as on a SkyPilot node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

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
from tests.harness.replay import finish, resuming_spec, start_node

if TYPE_CHECKING:
    import sky  # imported where used: ~3 s of CPU in every worker that collects this module

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TASK_ID = "sky-managed-2026-12-01-17-00-00-000000_gym-replay_7-0"


def render(tmp_path: Path, uuid: str, spec: Path, *sets: str) -> sky.Task:
    import sky

    job = tmp_path / f"{uuid}.skypilot.yaml"
    shared = tmp_path / "shared"
    args = ["render", str(spec), "--backend", "skypilot", "--uuid", uuid, "--output-root", str(shared / "out")]
    args += ["-o", str(job)]
    for s in (
        'launch.skypilot.infra="k8s/replay"',
        'launch.skypilot.accelerators="H100"',
        f'launch.skypilot.mount.path="{shared}"',
        'launch.skypilot.mount.volume="replay-pvc"',
        *sets,
    ):
        args += ["--set", s]
    assert launch_main(args) == 0
    return sky.Task.from_yaml(str(job))


def home(tmp_path: Path) -> Path:
    """A node's home: ~/sky_workdir is where SkyPilot's script cds (the synced workdir; here the
    repository, whose examples the demo driver's relative path names)."""
    h = tmp_path / "home"
    if not h.exists():
        h.mkdir()
        (h / "sky_workdir").symlink_to(REPO)
    return h


def node_script(task: sky.Task, rank: int, ips: list[str], gpus: int) -> str:
    """What SkyPilot's runtime executes on node `rank`, built by SkyPilot's own functions."""
    from sky.backends.task_codegen import TaskCodeGen
    from sky.skylet import log_lib

    env = dict(task.envs)
    env.update(
        {
            "SKYPILOT_NODE_IPS": "\n".join(ips),
            "SKYPILOT_NUM_NODES": str(len(ips)),
            "SKYPILOT_TASK_ID": TASK_ID,
            "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus),
            "SKYPILOT_NODE_RANK": str(rank),
        }
    )
    # What SkyPilot's Ray runtime passes on from its own Ray job (log_lib.add_ray_env_vars); the
    # task's command keeps it away from the agents' Ray.
    env.update({"RAY_JOB_ID": "03000000", "RAY_CLIENT_MODE": "0", "RAY_ADDRESS": "127.0.0.1:6380"})
    body = TaskCodeGen.build_task_bash_script(task.run, env_prefix="unset RAY_RAYLET_PID")
    return log_lib.make_task_bash_script(body, env_vars=env)


def start_nodes(task: sky.Task, tmp_path: Path, start: int = 1) -> list[subprocess.Popen]:
    ips = [f"127.0.{start}.{2 + r}" for r in range(task.num_nodes)]
    [res] = list(task.resources)
    gpus = int(next(iter(res.accelerators.values())))
    procs = []
    for rank in range(task.num_nodes):
        script = tmp_path / f"sky_app_{start}_{rank}.sh"
        script.write_text(node_script(task, rank, ips, gpus))
        env = {k: os.environ[k] for k in ("LANG",) if k in os.environ}
        env.update(
            {
                "PATH": f"{BIN}:{os.environ.get('PATH', '')}",  # the image has gym-agent on PATH
                "HOME": str(home(tmp_path)),
                TEST_ADDRESS_ENV: ips[rank],
                tempdirs.ROOT_ENV: str(agent_tmp_root(tmp_path)),
            }
        )
        # As SkyPilot's run_bash_command_with_log runs it.
        procs.append(start_node(["/bin/bash", "-i", str(script)], env))
    return procs


def lose_node(proc: subprocess.Popen) -> None:
    """SIGKILL to every process of one node: the agent (bash exec'd it) and all its descendants,
    whichever session they made for themselves."""
    agent = psutil.Process(proc.pid)
    everything = [agent, *agent.children(recursive=True)]
    for p in everything:
        p.suspend()  # first stop all of them, so none reacts to another's death
    for p in everything:
        p.kill()


@pytest.mark.ray
def test_replayed_task_runs_on_every_node_and_passes_the_audit(tmp_path: Path) -> None:
    uuid = "sky-replay-ok"
    task = render(tmp_path, uuid, REPO / "examples" / "demo.toml")
    assert task.num_nodes == 3
    run_dir = tmp_path / "shared" / "out" / "cluster" / uuid
    codes, text = finish(start_nodes(task, tmp_path), 400)
    assert codes == [0, 0, 0], text[-6000:]
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    result = audit(run_dir, verdict="pass")
    assert len(result.attempts) == 1
    for rank in range(3):
        rec = read(run_dir, names.address(rank))
        assert rec["address"] == f"127.0.1.{2 + rank}", rec
        assert rec["scheduler_job"] == {"scheduler": "skypilot", "job": TASK_ID, "node": f"rank-{rank}"}, rec
    placement = read(run_dir, names.placement(0))
    assert placement["visible_devices"] == [str(i) for i in range(8)], placement


def test_a_killed_node_fails_the_run_fast_and_the_recovered_task_resumes_it(tmp_path: Path) -> None:
    # The first attempt checkpoints and then trains until its node is lost; the recovered one finds
    # the checkpoint and finishes.
    spec = resuming_spec(tmp_path, 3, "time.sleep(600)")
    uuid = "sky-replay-kill"
    task = render(tmp_path, uuid, spec, "launch.max_retries=1")
    assert list(task.resources)[0].job_recovery == {"max_restarts_on_errors": 1, "strategy": None}
    run_dir = tmp_path / "shared" / "out" / "cluster" / uuid
    procs = start_nodes(task, tmp_path, start=1)
    try:
        for rank in range(3):
            wait_phase(run_dir, rank, "driver", 120)
        wait_until = time.monotonic() + 30
        while not (run_dir / "checkpoints" / "step-1").exists() and time.monotonic() < wait_until:
            time.sleep(0.1)
        # Node 1 is lost (a VM or pod gone): everything it runs dies at once, the agent's reaper too,
        # so nobody on it writes a record.
        killed_at = time.monotonic()
        lose_node(procs[1])
        codes, text = finish(procs, 120)
        took = time.monotonic() - killed_at
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert codes[1] == -signal.SIGKILL and codes[0] != 0 and codes[2] != 0, (codes, text[-4000:])
    # The other nodes stop on their own within the heartbeat timeout (6 s) and their teardown, not
    # when SkyPilot would notice the lost node.
    print(f"the other nodes ended {took:.1f} s after node 1 was lost")
    assert took < 6 + 4 + 15, took
    fails = failures(run_dir)
    assert 1 not in fails and set(fails) == {0, 2}, fails
    silent = [r for r in fails.values() if r["kind"] == "peer_silent"]
    assert silent and all("rank 1" in r["cause"] for r in silent), fails
    # The audit names the lost node: silent, no record of its own.
    audit(run_dir, verdict="fail", rank=1, kind="silent")
    # SkyPilot's managed-job recovery: every node started again, same command, envs and task id.
    codes, text = finish(start_nodes(task, tmp_path, start=2), 120)
    assert codes == [0, 0, 0], text[-4000:]
    assert (run_dir / "checkpoints" / "resumed").read_text() == "2"
    claim = read(run_dir, names.attempt_claim(2))
    assert (claim["mode"], claim["token"], claim["previous"]) == ("restart", f"skypilot-{TASK_ID}", 1)
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    result = audit(run_dir, verdict="pass")
    one, two = result.attempts
    assert (one.attempt, one.verdict, one.first_cause.kind, one.first_cause.rank) == (1, "fail", "silent", 1), one
    assert (two.attempt, two.verdict, two.mode, two.token) == (2, "pass", "restart", f"skypilot-{TASK_ID}")
