"""Rendered Slurm jobs, submitted for real to the local cluster (n1..n3 at 127.0.10.1-3) with
`gym-launch submit --backend slurm`, each checked with gym-audit on its run directory.

The specs set `launch.slurm.agent` to this venv's gym-agent (the nodes share this machine) and
`launch.slurm.explicit_address = true`: the nodes' hostnames resolve to loopback addresses, which
the agent refuses unless given explicitly. A probe runs before the demo driver and records what
the driver sees (environment, Ray's resources) in a file of the test's own directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm import cluster as slurm
from test_slurm_cluster import wait_nodes_clean

from schemas import DriverEnv, JobEnv, names
from tests.harness import assert_artifacts_valid, assert_nothing_left, audit, failures, read, uid
from tests.harness.specs import judge_tables

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = ("n1", "n2", "n3")
JOB_TIMEOUT_S = 240

PROBE = f"""
import json, os, socket, sys
sys.path.insert(0, {str(REPO)!r})
env = {{k: v for k, v in os.environ.items() if k.startswith(("GYM_", "JUDGE_"))}}
facts = {{"host": socket.gethostname(), "env": env}}
if os.environ.get("PROBE_RAY"):
    import ray
    address = os.environ[{DriverEnv.RAY_ADDRESS_CLUSTER!r}]
    ray.init(address=address, _node_ip_address=os.environ[{DriverEnv.NODE_ADDRESS!r}])
    facts["ray_resources"] = ray.cluster_resources()
    facts["ray_nodes"] = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    ray.shutdown()
print("probe:", json.dumps(facts, sort_keys=True))
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump(facts, f)
"""


def spec(tmp: Path, name: str, *, body: str, driver_env: dict[str, str], judge_pool: str | None = None) -> Path:
    probe = tmp / "_probe.py"
    probe.write_text(PROBE)
    env = {"PROBE_OUT": str(tmp / "probe.json"), "DEMO_STEPS": "3", **driver_env}
    env_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    text = f"""
name = "{name}"
[launch]
gpus_per_replica = 8
node_gpus = 8
[launch.slurm]
agent = "{BIN / "gym-agent"}"
explicit_address = true
time = "00:10:00"
[launch.coordination]
startup_timeout = 300
heartbeat_timeout = 30
heartbeat_interval = 1.0
poll_interval = 0.5
teardown_grace = 5.0
ack_timeout = 30.0
[driver]
command = "python {probe} && exec python examples/demo_driver.py"
{body}
[driver.env]
{env_lines}
{judge_tables(max_concurrent_calls=8, timeout=60, max_output_tokens=512, pool=judge_pool)}
[data]
train = "{REPO / "examples" / "data" / "train.jsonl"}"
eval = "{REPO / "examples" / "data" / "eval.jsonl"}"
"""
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


def submit(c: slurm.Cluster, spec_path: Path, root: Path, uuid: str, *extra: str) -> int:
    r = subprocess.run(
        [str(BIN / "gym-launch"), "submit", str(spec_path), "--backend", "slurm", "--uuid", uuid]
        + ["--output-root", str(root), *extra],
        cwd=REPO,  # the demo driver's path is relative to the repository
        env=c.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    sub = read(root / "cluster" / uuid, names.SUBMISSION)
    assert sub["backend"] == "slurm" and sub["job_file"] == names.job_file(".sbatch")
    return int(sub["job_id"])


def finished(c: slurm.Cluster, job: int, run_dir: Path) -> tuple[dict[str, str], str]:
    info = c.wait_job(job, JOB_TIMEOUT_S)
    out = (run_dir / names.slurm_output(str(job))).read_text(errors="replace")
    return info, out


def head_block_taken(run_dir: Path) -> bool:
    """The run ended because the Ray head's block, which the job fixed from its run id before it
    started, was taken on the node meanwhile: the product's named refusal (`ports`), not the subject
    of these tests. Tests share this host; another test's Ray may land on exactly that block
    between `uid()`'s check and the head's start."""
    first = failures(run_dir).get(0, {})
    return first.get("kind") == "ports" and "its port block" in str(first.get("cause"))


def submit_passing(c: slurm.Cluster, spec_path: Path, root: Path, tag: str, *extra: str) -> tuple[Path, str]:
    """Submit and assert the run passed; a run refused only for a taken head block is submitted
    again under a new run id (at most twice more). Returns the run directory and the job's output."""
    for _ in range(3):
        uuid = uid(tag)
        job = submit(c, spec_path, root, uuid, *extra)
        run_dir = root / "cluster" / uuid
        info, out = finished(c, job, run_dir)
        if info["JobState"] == "COMPLETED" or not head_block_taken(run_dir):
            return run_dir, _check_passed(c, run_dir, info, out)
        wait_nodes_clean(c, list(NODES))
    raise AssertionError(f"three run ids in a row found their Ray head's block taken: {run_dir}")


def assert_passed(c: slurm.Cluster, job: int, run_dir: Path) -> str:
    info, out = finished(c, job, run_dir)
    return _check_passed(c, run_dir, info, out)


def _check_passed(c: slurm.Cluster, run_dir: Path, info: dict[str, str], out: str) -> str:
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, out[-4000:])
    assert_artifacts_valid(run_dir)
    assert not failures(run_dir)
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout.startswith("gym-audit: PASS"), cli.stdout[-3000:] + cli.stderr
    audit(run_dir, verdict="pass")
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, list(NODES))
    assert c.queue() == []
    return out


def probe(tmp: Path) -> dict:
    return json.loads((tmp / "probe.json").read_text())


@pytest.mark.ray(seconds=60)
# `make test-long`: `make test` keeps the pooled job below (rendered, Ray across the three nodes, the
# judge, the demo driver, audited) and the demo rendered with its driver on rank 0 (test_render_slurm.py).
@pytest.mark.long
def test_rendered_demo_passes_with_the_driver_on_trainer_rank_0(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    """The 3-node demo (real Ray across the nodes, the reference judge), trainer placement."""
    c, root = slurm_cluster, tmp_path / "out"
    body = """
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 19
[ray]
num_cpus = 1
object_store_memory = 100000000
"""
    t0 = time.monotonic()
    run_dir, out = submit_passing(c, spec(tmp_path, "rdemo", body=body, driver_env={}), root, "rdemo")
    print(f"rendered demo: submit to audited PASS in {time.monotonic() - t0:.1f}s")
    for r in range(3):
        addr = read(run_dir, names.address(r))
        assert (addr["hostname"], addr["address"]) == (NODES[r], f"127.0.10.{r + 1}"), addr
    facts = probe(tmp_path)
    assert facts["host"] == "n1" and facts["env"][JobEnv.DRIVER_RANK] == "0" == facts["env"][DriverEnv.RANK]
    assert facts["env"][JobEnv.NODES] == "n1,n2,n3"
    assert read(run_dir, names.COMPLETE)["driver_rank"] == 0
    assert read(run_dir, names.DRIVER_RESULT)["optimizer_steps"] == 3
    assert "[rank 2]" in out and "SUCCEEDED" in out


@pytest.mark.ray
def test_pools_judge_on_its_own_node_and_the_driver_on_the_last_inference_node(
    slurm_cluster: slurm.Cluster, tmp_path: Path
) -> None:
    """policy (2 nodes) + judge (1 node, the judge pinned there); driver.placement = "inference";
    the driver reads the judge pool's hosts through a runtime: value."""
    c, uuid, root = slurm_cluster, uid("rpool"), tmp_path / "out"
    body = """
placement = "inference"
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 12
[pools.policy]
nodes = 2
gpus_per_node = 8
[pools.judge]
nodes = 1
gpus_per_node = 8
[ray]
num_cpus = 1
object_store_memory = 100000000
"""
    sp = spec(
        tmp_path,
        "rpool",
        body=body,
        driver_env={"JUDGE_HOST": f"runtime:{JobEnv.pool_nodes('judge')}"},
        judge_pool="judge",
    )
    job = submit(c, sp, root, uuid)
    run_dir = root / "cluster" / uuid
    # Each pool is its own step, named after the Ray service and the pool (every node joins Ray here).
    want = {"cluster_policy_workers", "cluster_judge_workers"}
    steps: set[str] = set()
    end = time.monotonic() + 60
    while time.monotonic() < end and not want <= steps:
        steps |= set(c.run(["squeue", "-h", "-s", "-j", str(job), "-o", "%j"], check=False).split())
        time.sleep(0.5)
    assert want <= steps, steps
    assert_passed(c, job, run_dir)
    facts = probe(tmp_path)
    # The driver runs on the last inference node: planned node 1 = n2 = rank 1.
    assert facts["host"] == "n2" and facts["env"][JobEnv.DRIVER_RANK] == "1" == facts["env"][DriverEnv.RANK]
    assert facts["env"]["JUDGE_HOST"] == "n3" == facts["env"][JobEnv.pool_nodes("judge")]
    assert facts["env"][JobEnv.pool_nodes("policy")] == "n1,n2"
    # The Ray head moved with the driver (seed 001); without ray.node_pools every node joins it.
    assert read(run_dir, names.RAY_HEAD)["gcs_address"].startswith("127.0.10.2:")
    assert sorted(read(run_dir, names.RAY_LAYOUT)["expected"]) == ["127.0.10.1", "127.0.10.2", "127.0.10.3"]
    # The judge runs only on the judge node (rank 2), nowhere else.
    judge_records = sorted(p.name for p in run_dir.glob("judge-general-*.json"))
    assert judge_records == [names.judge_endpoint("general", 2)], judge_records
    assert list(read(run_dir, names.placement(2))["judges"]) == ["general"]


@pytest.mark.ray
# `make test-long`: `make test` keeps a pool that Ray leaves out (the heterogeneous job's CPU pool,
# tests/test_slurm_pools.py) and ray.node_pools' planning (tests/test_pools.py).
@pytest.mark.long
def test_ray_spans_main_and_aux_with_the_aux_resource_and_leaves_other_pools_out(
    slurm_cluster: slurm.Cluster, tmp_path: Path
) -> None:
    c, root = slurm_cluster, tmp_path / "out"
    body = """
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 12
[pools.main]
nodes = 1
gpus_per_node = 8
[pools.aux]
nodes = 1
gpus_per_node = 8
[pools.judge]
nodes = 1
gpus_per_node = 8
[ray]
num_cpus = 1
object_store_memory = 100000000
node_pools = ["main", "aux"]
[ray.resources.aux]
aux_slot = 2
"""
    sp = spec(tmp_path, "rray", body=body, driver_env={"PROBE_RAY": "1"}, judge_pool="judge")
    run_dir, _ = submit_passing(c, sp, root, "rray")
    facts = probe(tmp_path)
    assert facts["ray_resources"].get("aux_slot") == 2.0, facts["ray_resources"]
    assert facts["ray_nodes"] == ["127.0.10.1", "127.0.10.2"], facts  # the judge pool's node stays out
    head = read(run_dir, names.RAY_HEAD)["gcs_address"]
    assert facts["env"][DriverEnv.RAY_ADDRESS_CLUSTER] == head and head.startswith("127.0.10.1:")
    assert sorted(read(run_dir, names.RAY_LAYOUT)["expected"]) == ["127.0.10.1", "127.0.10.2"]
    assert not (run_dir / names.ray_log(2)).exists()
