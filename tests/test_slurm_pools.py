"""Node pools on the real local Slurm cluster: a GPU pool and a CPU pool on another partition in one
heterogeneous job (n1..n3 of partition gpu, c1 of partition cpu), the demo driver to a passing audit.

Seed 001's example in our spelling: the trainer and rollout pinned to the policy's two nodes, the
reference judge pinned to its own node, a CPU pool whose agent runs coordination only. The driver's
probe records what it sees: its environment, Ray's live nodes, and GYM_RAY_ADDRESS_CLUSTER as a Ray
task on every Ray node reads it; every agent's placement record, what its step saw of the address the
job script exported (seed 001). The judge's and the readers' pools take 2 tasks per node: one job
component per shape (issue 35).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from slurm import cluster as slurm
from test_slurm_cluster import wait_nodes_clean
from test_slurm_rendered import JOB_TIMEOUT_S, spec, submit

from schemas import DriverEnv, JobEnv, names, port_grid
from tests.harness import assert_artifacts_valid, assert_nothing_left, audit, failures, read, uid
from tests.harness.specs import PINNED_POOLS

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
RAY_NAME = "cluster"

PROBE = f"""
import json, os, socket
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

env = {{k: v for k, v in os.environ.items() if k.startswith(("GYM_", "READERS"))}}
address = os.environ[{DriverEnv.ray_address(RAY_NAME)!r}]
ray.init(address=address, _node_ip_address=os.environ[{DriverEnv.NODE_ADDRESS!r}])


@ray.remote(num_cpus=0)
def seen() -> list:
    return [socket.gethostname(), os.environ.get({DriverEnv.ray_address(RAY_NAME)!r})]


live = [n for n in ray.nodes() if n["Alive"]]
pin = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in live]
on_each = [seen.options(scheduling_strategy=s).remote() for s in pin]
facts = {{
    "host": socket.gethostname(),
    "env": env,
    "ray_nodes": sorted(n["NodeManagerAddress"] for n in live),
    "task_env": sorted(ray.get(on_each)),
}}
ray.shutdown()
print("probe:", json.dumps(facts, sort_keys=True))
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump(facts, f)
"""

# The judge's and the readers' pools take 2 tasks per node: the judge's pool becomes a component of its
# own beside the policy's on partition gpu (the shapes differ in tasks alone), the readers' is on cpu.
BODY = (
    PINNED_POOLS.replace("[pools.judge]", "[pools.judge]\ntasks_per_node = 2").replace(
        "[pools.readers]", "[pools.readers]\ntasks_per_node = 2"
    )
    + "[ray]\nnum_cpus = 1\nobject_store_memory = 100000000\n"
)


def components(c: slurm.Cluster, job: int) -> list[dict[str, str]]:
    """`scontrol show job -o` of a heterogeneous job: one record per component."""
    out = c.run(["scontrol", "show", "job", "-o", str(job)])
    return [dict(w.split("=", 1) for w in line.split() if "=" in w) for line in out.splitlines() if line.strip()]


@pytest.mark.ray(seconds=75)
def test_a_gpu_pool_and_a_cpu_pool_on_another_partition_run_as_one_heterogeneous_job(
    slurm_cluster: slurm.Cluster, tmp_path: Path
) -> None:
    c, uuid, root = slurm_cluster, uid("rhet"), tmp_path / "out"
    sp = spec(
        tmp_path,
        "rhet",
        body=BODY,
        driver_env={"READERS": f"runtime:{JobEnv.pool_nodes('readers')}"},
        judge_pool="judge",
    )
    (tmp_path / "_probe.py").write_text(PROBE)  # this test's probe in place of the module's
    t0 = time.monotonic()
    job = submit(c, sp, root, uuid)
    run_dir = root / "cluster" / uuid
    parts = components(c, job)
    # One component per shape, each with its pools' tasks per node (pools.NAME.tasks_per_node).
    shapes = [(p.get("HetJobOffset"), p.get("Partition"), p.get("NtasksPerN:B:S:C", "").split(":")[0]) for p in parts]
    assert shapes == [("0", "gpu", "1"), ("1", "gpu", "2"), ("2", "cpu", "2")], parts
    # The worker steps are named <ray name>_<pool>_workers; the CPU pool's is its own name (no Ray).
    # A component's steps are listed under its own job id (the CPU component's is JOB+1).
    ids = ",".join(p["JobId"] for p in parts)
    want = {f"{RAY_NAME}_policy_workers", f"{RAY_NAME}_judge_workers", "readers"}
    steps: set[str] = set()
    end = time.monotonic() + 90
    while time.monotonic() < end and not want <= steps:
        steps |= set(c.run(["squeue", "-h", "-s", "-j", ids, "-o", "%j"], check=False).split())
        time.sleep(0.5)
    assert want <= steps, steps
    c.wait_job(job, JOB_TIMEOUT_S)
    parts = components(c, job)
    out = (run_dir / names.slurm_output(str(job))).read_text(errors="replace")
    assert all(p["JobState"] == "COMPLETED" for p in parts) and parts[0]["ExitCode"] == "0:0", (parts, out[-4000:])
    assert len(parts) == 3, parts
    print(f"heterogeneous job: submit to COMPLETED in {time.monotonic() - t0:.1f}s")
    assert_artifacts_valid(run_dir)
    assert not failures(run_dir)
    audit(run_dir, verdict="pass")
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, ["n1", "n2", "n3", "c1"])
    assert c.queue() == []

    # Every component's nodes in the one node order: by pool (each step's GYM_POOL, in the address
    # records), then address.
    hosts = [read(run_dir, names.address(r))["hostname"] for r in range(4)]
    assert hosts == ["n1", "n2", "n3", "c1"], hosts
    assert [read(run_dir, names.address(r))["pool"] for r in range(4)] == ["policy", "policy", "judge", "readers"]
    # The pinned trainer and judge on their pools, the CPU pool's node with no GPU and no Ray.
    placement = [read(run_dir, names.placement(r)) for r in range(4)]
    assert [(p["pool"], p["trainer_gpus"], p["rollout_gpus"], sorted(p["judges"])) for p in placement] == [
        ("policy", 4, 4, []),
        ("policy", 0, 8, []),
        ("judge", 0, 0, ["general"]),
        ("readers", 0, 0, []),
    ]
    assert placement[3]["visible_devices"] == [] and placement[3]["in_ray"] is False
    assert all(p["in_ray"] for p in placement[:3])
    assert not (run_dir / names.ray_log(3)).exists()
    facts = json.loads((tmp_path / "probe.json").read_text())
    head = read(run_dir, names.RAY_HEAD)["gcs_address"]
    assert facts["host"] == "n1" and head.startswith("127.0.10.1:")
    # Seed 001: the job exported the head's host:port before the head started (the driver's node, the
    # port fixed for the job), every step saw it, the CPU pool's too, and the head bound exactly that.
    assert head == f"127.0.10.1:{port_grid.head_block(uuid, 0)}"
    assert [p.get("ray_address_exported") for p in placement] == [head] * 4
    assert facts["ray_nodes"] == ["127.0.10.1", "127.0.10.2", "127.0.10.3"], facts  # Ray never spans c1
    # GYM_RAY_ADDRESS_CLUSTER: the driver's, and every Ray node's as a task there reads it.
    assert facts["env"][DriverEnv.ray_address(RAY_NAME)] == head
    assert facts["task_env"] == [["n1", head], ["n2", head], ["n3", head]], facts["task_env"]
    assert facts["env"]["READERS"] == "c1" == facts["env"][JobEnv.pool_nodes("readers")]
    assert facts["env"][JobEnv.pool_nodes("policy")] == "n1,n2" and facts["env"][JobEnv.NODES] == "n1,n2,n3,c1"
    assert "[rank 3]" in out and "SUCCEEDED" in out
