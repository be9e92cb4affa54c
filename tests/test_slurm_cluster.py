"""The local Slurm cluster itself (tests/slurm/cluster.py): real slurmctld, slurmd and munged.

What later Slurm tests rely on: three GPU nodes with distinct hostnames and loopback addresses,
gres GPUs reaching jobs as CUDA_VISIBLE_DEVICES, two partitions with their own MaxTime, a
directory shared by every node, and a teardown that leaves nothing behind (after a clean run, a
partial start, a job still running, or a test session that was killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm import cluster as slurm

pytestmark = pytest.mark.slurm


def job_script(tmp: Path, name: str, directives: list[str], body: str) -> Path:
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={tmp}/{name}-%j.out"]
    lines += [f"#SBATCH {d}" for d in directives]
    path = tmp / f"{name}.sh"
    path.write_text("\n".join([*lines, "set -euo pipefail", body, ""]))
    return path


def job_output(tmp: Path, name: str, job_id: int) -> str:
    return (tmp / f"{name}-{job_id}.out").read_text()


def wait_nodes_clean(c: slurm.Cluster, nodes: list[str], timeout: float = 20) -> None:
    """No process left on any of `nodes` but its slurmd (found by namespace, not by name)."""
    end = time.monotonic() + timeout
    left = {n: c.node_processes(n) for n in nodes}
    while any(left.values()) and time.monotonic() < end:
        time.sleep(0.2)
        left = {n: c.node_processes(n) for n in nodes}
    assert not any(left.values()), f"processes left on nodes: {left}"


def test_three_node_job_has_distinct_hosts_addresses_and_gpus(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c = slurm_cluster
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "from-host").write_text("written by the test\n")
    # Every task writes a file named after its node into the test's tmp dir and reads the host's
    # file back: the directory is shared by all nodes.
    body = (
        "srun bash -c 'echo task $SLURM_PROCID $(hostname) $(hostname --ip-address) "
        f"cvd=$CUDA_VISIBLE_DEVICES nodes=$SLURM_JOB_NODELIST $(cat {shared}/from-host | wc -l); "
        f"echo $SLURM_PROCID > {shared}/$(hostname)'"
    )
    script = job_script(
        tmp_path, "hosts", ["--nodes=3", "--ntasks-per-node=1", "--gpus-per-node=8", "--time=00:02:00"], body
    )
    t0 = time.monotonic()
    job = c.sbatch(script)
    info = c.wait_job(job, 60)
    took = time.monotonic() - t0
    out = job_output(tmp_path, "hosts", job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, out)
    assert info["Partition"] == "gpu" and info["NodeList"] == "n[1-3]", info
    tasks = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["task"]:
            tasks[int(parts[1])] = parts[2:]
    assert sorted(tasks) == [0, 1, 2], out
    assert [tasks[r][0] for r in range(3)] == ["n1", "n2", "n3"], out  # ranks in node order
    assert [tasks[r][1] for r in range(3)] == ["127.0.10.1", "127.0.10.2", "127.0.10.3"], out
    assert all(t[2] == "cvd=0,1,2,3,4,5,6,7" for t in tasks.values()), out
    assert all(t[3] == "nodes=n[1-3]" and t[4] == "1" for t in tasks.values()), out
    assert {p.name: p.read_text().strip() for p in shared.glob("n*")} == {"n1": "0", "n2": "1", "n3": "2"}
    assert took < 30, f"a trivial 3-node job took {took:.1f}s"
    assert c.queue() == []
    wait_nodes_clean(c, ["n1", "n2", "n3"])


def test_gpu_requests_and_partitions(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c = slurm_cluster
    gpu, cpu = c.partition("gpu"), c.partition("cpu")
    assert (gpu["MaxTime"], gpu["Default"], gpu["Nodes"]) == ("02:00:00", "YES", "n[1-3]"), gpu
    assert (cpu["MaxTime"], cpu["Default"], cpu["Nodes"]) == ("01:00:00", "NO", "c1"), cpu
    # The CPU partition's node has no GPUs: a job there sees none.
    script = job_script(
        tmp_path,
        "cpu",
        ["--partition=cpu", "--nodes=1", "--time=00:01:00"],
        "srun bash -c 'echo on $(hostname) $(hostname --ip-address) cvd=${CUDA_VISIBLE_DEVICES-unset}'",
    )
    job = c.sbatch(script)
    info = c.wait_job(job, 60)
    assert info["JobState"] == "COMPLETED", info
    assert job_output(tmp_path, "cpu", job).split() == ["on", "c1", "127.0.10.11", "cvd=unset"]
    # Part of a node's GPUs: exactly that many devices.
    script = job_script(tmp_path, "half", ["--nodes=1", "--gres=gpu:4"], "echo cvd=$CUDA_VISIBLE_DEVICES")
    job = c.sbatch(script)
    assert c.wait_job(job, 60)["JobState"] == "COMPLETED"
    assert job_output(tmp_path, "half", job).split() == ["cvd=0,1,2,3"]
    # Limits are enforced at submission (EnforcePartLimits), not by a job pending forever.
    for bad in (["--partition=cpu", "--time=01:30:00"], ["--partition=cpu", "--gpus-per-node=1"], ["--nodes=4"]):
        with pytest.raises(slurm.ClusterError, match="sbatch"):
            c.sbatch(job_script(tmp_path, "bad", bad, "true"))
    assert c.queue() == []


def cluster_pids(d: Path) -> list[int]:
    return [x.pid for x in slurm.read_state(d)]


def assert_gone(d: Path, pids: list[int], namespaces: list[str], timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and (
        d.exists() or any(slurm.alive(p) for p in pids) or any(slurm.namespace_members(ns, d) for ns in namespaces)
    ):
        time.sleep(0.1)
    assert not [p for p in pids if slurm.alive(p)], "daemons survived"
    assert not [ns for ns in namespaces if slurm.namespace_members(ns, d)], "node processes survived"
    assert not d.exists()
    assert "127.0.10." not in Path("/etc/hosts").read_text(), "a node's hosts file leaked onto the host"


def test_down_stops_a_running_job_and_a_partial_cluster(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    """A second, private cluster: down with a job still running kills the job's processes on
    every node; down after a daemon died and down twice both work."""
    del slurm_cluster  # only for the installation and the skip decision
    d = slurm.new_dir()
    try:
        c = slurm.up(d, log=lambda _line: None)
        script = job_script(tmp_path, "sleeper", ["--nodes=2"], "srun sleep 300")
        job = c.sbatch(script)
        end = time.monotonic() + 30
        while not (c.node_processes("n1") and c.node_processes("n2")) and time.monotonic() < end:
            time.sleep(0.2)
        assert c.job(job)["JobState"] == "RUNNING"
        victims = c.node_processes("n1") + c.node_processes("n2")
        assert victims
        daemons = slurm.read_state(d)
        # A partial cluster: the controller is gone (down can no longer scancel: it must kill by namespace).
        ctl = next(x for x in daemons if x.name == "slurmctld")
        os.kill(ctl.pid, signal.SIGKILL)
        done = slurm.down(d, log=lambda _line: None)
        assert any("slurmctld" in line and "already gone" in line for line in done), done
        assert_gone(d, [x.pid for x in daemons] + victims, [x.namespace for x in daemons if x.namespace])
        assert slurm.down(d, log=lambda _line: None) == []  # idempotent
    finally:
        slurm.down(d, log=lambda _line: None)


def test_guard_takes_the_cluster_down_when_its_session_is_killed(slurm_cluster: slurm.Cluster) -> None:
    del slurm_cluster
    d = slurm.new_dir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    guard = slurm.start_guard(owner.pid, d)
    try:
        slurm.up(d, log=lambda _line: None)
        daemons = slurm.read_state(d)
        assert len(daemons) == 6 and slurm.is_up(d)
        owner.kill()  # SIGKILL: no finalizer, no atexit
        owner.wait()
        assert_gone(d, [x.pid for x in daemons], [x.namespace for x in daemons if x.namespace], timeout=30)
        end = time.monotonic() + 10
        while slurm.alive(guard) and time.monotonic() < end:
            time.sleep(0.1)
        assert not slurm.alive(guard), "the guard did not exit after taking the cluster down"
    finally:
        owner.kill()
        slurm.stop_pid(guard, grace=1)
        slurm.down(d, log=lambda _line: None)


def test_a_reused_namespace_number_never_reaches_another_cluster(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    """The kernel gives a freed UTS namespace's number to the next one made, so a `down` that
    sweeps the number recorded for a daemon that died would kill whatever owns it now (seen in CI:
    a parallel worker's private cluster lost its slurmctld while starting). A process counts as a
    cluster's only when it also sees that cluster's hosts file on /etc/hosts."""
    del slurm_cluster  # only for the skip decision: unshare needs the same rights as the cluster
    mine, theirs = tmp_path / "gym-slurm-mine", tmp_path / "gym-slurm-theirs"
    for home in (mine, theirs):
        home.mkdir()
        (home / "hosts").write_text(Path("/etc/hosts").read_text())
    script = f"mount --bind {theirs / 'hosts'} /etc/hosts && exec sleep 300"
    other = subprocess.Popen(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script])
    try:
        host, ns = slurm.uts_namespace(os.getpid()), None
        end = time.monotonic() + 10
        while time.monotonic() < end and not (ns and ns != host and slurm.namespace_members(ns, theirs)):
            time.sleep(0.05)
            ns = slurm.uts_namespace(other.pid)
        assert ns and ns != host and slurm.namespace_members(ns, theirs) == [other.pid]
        # The number as `mine` might have recorded it for a node whose namespace was since freed.
        assert slurm.namespace_members(ns, mine) == []
        assert slurm.sweep_namespace(ns, mine, timeout=1) == 0
        assert slurm.alive(other.pid), "a sweep for one cluster killed another cluster's process"
        assert slurm.sweep_namespace(ns, theirs) == 1
        assert other.wait(timeout=10) == -signal.SIGKILL
    finally:
        other.kill()
        other.wait()
