"""Seed 001's placement rules and per-service process keys (issue 50, items 2 and 3), in our TOML spelling.

Rendered Slurm scripts are run for real against scontrol/getent/srun stand-ins (no Slurm, no Pyxis here:
what a step would run in its container is checked in the script); a service's pre_command and runtime:
env run as real processes; a health check that never passes fails a real local run, named in the audit.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.ray import node as ray_node
from launch.backends.base import RenderRequest
from launch.backends.beaker._render import render as beaker_render
from launch.backends.job_vars import job_variables
from launch.backends.local import job_environment, job_variable_problems, local_hosts
from launch.backends.skypilot._render import render as skypilot_render
from launch.backends.slurm._render import render
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec
from launch.spec.plan import plan as make_plan
from schemas import DriverEnv, FailureKind, JobEnv
from tests.harness import assert_nothing_left, audit, launch_local, uid
from tests.harness.specs import judge_tables
from tests.test_policy_service import EVALUATION
from tests.test_render_slurm import fake_slurm, run_script

REVISION = "0123456789abcdef0123456789abcdef01234567"
BEAKER = ('launch.beaker.image="img"', 'launch.beaker.cluster="c"')
SKYPILOT = ('launch.skypilot.accelerators="H100"',)
RENDERS = {"Beaker": beaker_render, "SkyPilot": skypilot_render}

# Seed 001's second example: a Ray service spanning pools for a benchmark that places its own devices.
RAY_SERVICE = f"""
name = "seed001-ray"
{EVALUATION}
[pools.main]
nodes = 1
gpus_per_node = 8
[pools.aux]
nodes = 2
gpus_per_node = 8
[ray]
name = "cluster"
node_pools = ["main", "aux"]
container = "rayproject/ray:latest"
container_mounts = ["/data:/data:ro", "/scratch:/scratch"]
[ray.resources.aux]
extra_gpu = 8
"""

# Seed 001's first example: the policy over its pool's two nodes (TP 16), the judge on the third,
# each in its own container; no [ray]: an evaluation run that starts no Ray.
POLICY_AND_JUDGE = f"""
name = "seed001"
{EVALUATION}
[policy]
mode = "managed"
backend = "vllm"
model = "my-org/policy-model"
revision = "{REVISION}"
prepared_dir = "/models/policy"
tensor_parallel_size = 16
node_pool = "policy"
container = "vllm/vllm-openai:v0.9.0"
container_mounts = ["/models:/models:ro"]
pre_command = "export VLLM_HOST_IP=$(hostname --ip-address)"
env = {{HF_HUB_OFFLINE = "1", JOB = "runtime:SLURM_JOB_ID"}}
health_path = "/v1/models"
health_timeout = 900
[judges.judge]
mode = "managed"
backend = "vllm"
model = "my-org/judge-model"
revision = "{REVISION}"
prepared_dir = "/models/judge"
gpus = 8
node_pool = "judge"
container = "vllm/vllm-openai:v0.9.0"
[rubrics.q]
profile = "general-quality"
[judging.bindings.v]
judge = "judge"
rubric = "q"
[pools.policy]
nodes = 2
gpus_per_node = 8
[pools.judge]
nodes = 1
gpus_per_node = 8
"""

# Names sort n1 < n2 < n3, addresses n2 < n3 < n1: the agents' node order is n2, n3, n1.
ADDRESSES = {"n1": "10.0.0.30", "n2": "10.0.0.4", "n3": "10.0.0.10"}


def config_of(tmp: Path, text: str, *overrides: str) -> RunConfig:
    spec = tmp / "spec.toml"
    spec.write_text(text)
    return RunConfig.from_spec(load_spec(spec, overrides))


def request(tmp: Path, text: str, *overrides: str) -> RenderRequest:
    config = config_of(tmp, text, *overrides)
    return RenderRequest(
        config=config,
        plan=make_plan(config),
        uuid="u-1",
        output_root="/shared/out",
        spec_path="/shared/out/cluster/u-1/spec.json",
    )


def run_steps(tmp: Path, text: str, variables: list[str], *overrides: str) -> dict[tuple[str, str], dict[str, str]]:
    """Run the rendered script against the Slurm stand-ins; (step, node) -> each variable the agent saw."""
    env = fake_slurm(tmp, ADDRESSES)
    agent = tmp / "agent"
    agent.write_text('#!/bin/bash\necho "' + "|".join(f"{v}=${{{v}:-<unset>}}" for v in variables) + '"\n')
    agent.chmod(0o755)
    script = render(request(tmp, text, f'launch.slurm.agent="{agent}"', *overrides)).text
    out: dict[tuple[str, str], dict[str, str]] = {}
    for line in run_script(script, tmp, env):
        step, node, rest = line.split(" ", 2)
        seen = dict(p.split("=", 1) for p in rest.split("|"))
        out[(step.removeprefix("step="), node.removeprefix("node="))] = seen
    return out


# --- item 2: placement ------------------------------------------------------------------------


def test_a_ray_service_spanning_pools_renders_its_worker_steps_and_exports(tmp_path: Path) -> None:
    workers = JobEnv.ray_workers("cluster", "aux")
    head_pool = JobEnv.ray_workers("cluster", "main")
    step = JobEnv.container_step("ray")
    variables = [JobEnv.DRIVER_RANK, workers, head_pool, JobEnv.pool_nodes("aux"), DriverEnv.RAY_ADDRESS_CLUSTER, step]
    steps = run_steps(tmp_path, RAY_SERVICE, variables)
    # main takes the first node of the order (n2), aux the next two; each pool's agents in its own step.
    assert set(steps) == {("cluster_main_workers", "n2"), ("cluster_aux_workers", "n3"), ("cluster_aux_workers", "n1")}
    seen = steps[("cluster_aux_workers", "n1")]
    assert seen[JobEnv.DRIVER_RANK] == "0"  # no policy: node 0, the head's
    assert seen[workers] == "n3,n1" == seen[JobEnv.pool_nodes("aux")]
    assert seen[head_pool] == "<unset>"  # main's only node is the head's
    assert seen[DriverEnv.RAY_ADDRESS_CLUSTER].startswith("10.0.0.4:")
    assert seen[step] == (
        "srun --overlap --nodes=1 --ntasks=1 --job-name=cluster --no-container-mount-home "
        "--container-mounts=/data:/data:ro,/scratch:/scratch --container-image=rayproject/ray:latest"
    )


# The seed's example without containers (gym-launch local, Beaker and SkyPilot refuse a container step).
RAY_SERVICE_NO_CONTAINER = "\n".join(line for line in RAY_SERVICE.splitlines() if not line.startswith("container"))


def test_local_gives_every_agent_the_slurm_jobs_host_variables_with_loopback_hosts(tmp_path: Path) -> None:
    """One computation (launch/backends/job_vars.py), two writings: the Slurm script's values (run
    against the stand-ins) and gym-launch local's name the same planned nodes, each by its host."""
    req = request(tmp_path, RAY_SERVICE_NO_CONTAINER)
    local = job_environment(req.config, req.plan)
    wanted = [v for v in job_variables(req.config, req.plan) if v != DriverEnv.RAY_ADDRESS_CLUSTER]
    assert set(local) == set(wanted) >= {JobEnv.NODES, JobEnv.pool_nodes("aux"), JobEnv.ray_workers("cluster", "aux")}
    slurm = run_steps(tmp_path, RAY_SERVICE_NO_CONTAINER, wanted)[("cluster_aux_workers", "n1")]
    slurm_order, local_order = ["n2", "n3", "n1"], local_hosts(3)  # each backend's hosts in node order
    for var in wanted:
        if var == JobEnv.DRIVER_RANK:
            assert slurm[var] == local[var] == "0"
            continue
        nodes = [slurm_order.index(h) for h in slurm[var].split(",")]
        assert [local_order.index(h) for h in local[var].split(",")] == nodes, var
    assert local[JobEnv.pool_nodes("aux")] == "127.0.0.3,127.0.0.4" == local[JobEnv.ray_workers("cluster", "aux")]
    assert local[JobEnv.DRIVER_HOST] == "127.0.0.2"


def test_local_refuses_a_reference_to_the_ray_heads_address_naming_the_key(tmp_path: Path) -> None:
    from launch.backends.local import run_local

    head = 'env = {HEAD = "runtime:GYM_RAY_ADDRESS_CLUSTER"}'
    text = RAY_SERVICE_NO_CONTAINER.replace("trains = false", "trains = false\n" + head)
    req = request(tmp_path, text)
    with pytest.raises(SpecError) as err:
        run_local(req.config, req.plan, "spec.toml", output_root=str(tmp_path / "out"))
    [problem] = err.value.problems
    assert problem.key == "driver.env.HEAD"
    assert "GYM_RAY_ADDRESS_CLUSTER" in problem.message and "gym-launch local" in problem.message
    assert not (tmp_path / "out").exists()
    # A pool's hosts are given: no problem for them.
    ok = text.replace("runtime:GYM_RAY_ADDRESS_CLUSTER", "runtime:GYM_POOL_AUX_NODES")
    req = request(tmp_path, ok)
    assert job_variable_problems(req.config, req.plan) == []


@pytest.mark.parametrize(("backend", "overrides"), [("Beaker", BEAKER), ("SkyPilot", SKYPILOT)])
@pytest.mark.parametrize(
    ("key", "var", "line"),
    [
        ("driver.env.JUDGE_HOST", "GYM_POOL_AUX_NODES", 'env = {JUDGE_HOST = "runtime:GYM_POOL_AUX_NODES"}'),
        ("driver.command.3", "GYM_NODES", 'command = ["python", "bench.py", "--nodes", "${runtime:GYM_NODES}"]'),
        ("driver.env.HEAD", "GYM_RAY_ADDRESS_CLUSTER", 'env = {HEAD = "runtime:GYM_RAY_ADDRESS_CLUSTER"}'),
    ],
)
def test_beaker_and_skypilot_refuse_a_reference_to_a_job_variable_naming_the_key(
    tmp_path: Path, backend: str, overrides: tuple[str, ...], key: str, var: str, line: str
) -> None:
    """Neither task knows its nodes' hosts (nor the Ray head's port) before it starts: no such variable."""
    spec = RAY_SERVICE_NO_CONTAINER
    if key.startswith("driver.command"):
        spec = spec.replace('command = ["python", "bench.py"]\n', "", 1)
    req = request(tmp_path, spec.replace("trains = false", "trains = false\n" + line), *overrides)
    with pytest.raises(SpecError) as err:
        RENDERS[backend](req)
    said = {p.key: p.message for p in err.value.problems}
    assert [k for k in said if k.startswith("driver")] == [key], said  # (the output root is beside the point)
    assert f"takes {var} from the job's environment, which {backend} does not set" in said[key]


def test_a_spanned_pools_gpus_are_visible_to_ray(tmp_path: Path) -> None:
    config = config_of(tmp_path, RAY_SERVICE)
    p = make_plan(config)
    assert p.ray_nodes == (0, 1, 2)
    assert [(n.ray_gpus, n.ray_devices, n.unused_gpus) for n in p.nodes] == [(8, tuple(range(8)), 0)] * 3
    # The argv the agent runs on an aux node: the node's GPUs, and its pool's resources.
    node = p.nodes[2]
    spec = ray_node.RayNodeSpec(
        is_head=False,
        address="10.0.0.30",
        head_address="10.0.0.4:6379",
        ports=ray_node.pick_ports("u-1", 2, 3),
        num_gpus=node.ray_gpus,
        num_cpus=None,
        object_store_memory=None,
        temp_dir="/tmp/r",
        resources=config.ray.resources["aux"],
        extra_args=(),
    )
    argv = ray_node.ray_start_argv(spec, image_ray=True)
    assert argv[:3] == ["ray", "start", "--block"]
    assert "--num-gpus=8" in argv and '--resources={"extra_gpu": 8}' in argv


def test_free_gpus_go_to_ray_only_where_nothing_else_is_planned(tmp_path: Path) -> None:
    # A judge on one of the aux pool's GPUs: Ray gets the other seven there, never the judge's.
    text = RAY_SERVICE + judge_tables(pool="aux")
    p = make_plan(config_of(tmp_path, text))
    judge_node = next(n for n in p.nodes if n.judges)
    assert judge_node.ray_gpus == 7 and set(judge_node.ray_devices).isdisjoint(judge_node.judge_devices["general"])


def test_an_evaluation_run_without_a_ray_table_starts_no_ray(tmp_path: Path) -> None:
    config = config_of(tmp_path, POLICY_AND_JUDGE)
    p = make_plan(config)
    assert config.ray.enabled is False and p.ray_nodes == ()
    variables = [JobEnv.DRIVER_RANK, DriverEnv.RAY_ADDRESS_CLUSTER]
    steps = run_steps(tmp_path, POLICY_AND_JUDGE, variables)
    # No Ray: each pool's step is named after the pool; the driver on the policy pool's first node.
    assert set(steps) == {("policy", "n2"), ("policy", "n3"), ("judge", "n1")}
    assert {s[JobEnv.DRIVER_RANK] for s in steps.values()} == {"0"}
    assert {s[DriverEnv.RAY_ADDRESS_CLUSTER] for s in steps.values()} == {"<unset>"}
    # A [ray] table starts it: node_pools = [] is the driver's node alone.
    with_ray = config_of(tmp_path, POLICY_AND_JUDGE + '[ray]\nnode_pools = ["policy"]\n')
    assert with_ray.ray.enabled is True and make_plan(with_ray).ray_nodes == (0, 1)


def test_each_service_gets_its_container_step(tmp_path: Path) -> None:
    policy, judge = JobEnv.container_step("policy"), JobEnv.container_step("judges.judge")
    steps = run_steps(tmp_path, POLICY_AND_JUDGE, [policy, judge])
    seen = steps[("judge", "n1")]
    assert seen[policy] == (
        "srun --overlap --nodes=1 --ntasks=1 --job-name=policy --no-container-mount-home "
        "--container-mounts=/models:/models:ro --container-image=vllm/vllm-openai:v0.9.0"
    )
    assert seen[judge] == (
        "srun --overlap --nodes=1 --ntasks=1 --job-name=judge_judge --no-container-mount-home "
        "--container-image=vllm/vllm-openai:v0.9.0"
    )


ROLLOUT_POOLS = f"""
name = "eval-pools"
{EVALUATION.replace("gpus = 0", "gpus = 16" + chr(10) + 'node_pool = "rollout"')}
[pools.judge]
nodes = 1
gpus_per_node = 8
[pools.rollout]
nodes = 2
gpus_per_node = 8
"""


def test_an_evaluation_runs_driver_is_on_the_first_node_of_its_rollout_pool(tmp_path: Path) -> None:
    p = make_plan(config_of(tmp_path, ROLLOUT_POOLS))
    assert (p.driver_node, p.driver_placement) == (1, "policy")  # rollout holds nodes 1 and 2
    steps = run_steps(tmp_path, ROLLOUT_POOLS, [JobEnv.DRIVER_RANK, JobEnv.DRIVER_HOST])
    assert {(s[JobEnv.DRIVER_RANK], s[JobEnv.DRIVER_HOST]) for s in steps.values()} == {("1", "n3")}


# --- item 3: validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ('[judges.judge.env]\nHF_TOKEN = "hf_abcdefghijklmnop"\n', "judges.judge.env.HF_TOKEN", "credential"),
        ('[judges.judge.env]\nX = "runtime:not a name"\n', "judges.judge.env.X", "runtime:VAR"),
        ('[ray]\ncontainer_mounts = ["/a:/a"]\n', "ray.container_mounts", "add container"),
        ('[ray]\ncontainer = "img"\ncontainer_mounts = ["data:/data"]\n', "ray.container_mounts", "absolute"),
        ('[ray]\ncontainer = "two words"\n', "ray.container", "without spaces"),
        ('[ray]\nhealth_path = "/health"\n', "ray.health_path", "GCS to answer"),
        ('[ray]\npre_command = "huggingface-cli login --token hf_abcdefghijklmnop"\n', "ray.pre_command", "word 4"),
    ],
)
def test_bad_service_keys_are_refused_naming_the_key(tmp_path: Path, extra: str, key: str, says: str) -> None:
    with pytest.raises(SpecError) as err:
        config_of(tmp_path, POLICY_AND_JUDGE + extra)
    found = {p.key: p.message for p in err.value.problems}
    assert key in found and says in found[key], found


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('health_path = "/v1/models"', 'health_path = "v1/models"', "policy.health_path"),
        ('JOB = "runtime:SLURM_JOB_ID"', 'API_KEY = "plain"', "policy.env.API_KEY"),
        ("health_timeout = 900", "health_timeout = 0", "policy.health_timeout"),
    ],
)
def test_a_bad_policy_key_is_refused_alone(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert old in POLICY_AND_JUDGE
    with pytest.raises(SpecError) as err:
        config_of(tmp_path, POLICY_AND_JUDGE.replace(old, new))
    assert [p.key for p in err.value.problems] == [key]


def test_a_container_is_refused_where_there_is_no_slurm_step(tmp_path: Path) -> None:
    from launch.backends.beaker._render import render as beaker_render

    req = request(tmp_path, POLICY_AND_JUDGE, 'launch.beaker.image="img"', 'launch.beaker.cluster="c"')
    with pytest.raises(SpecError) as err:
        beaker_render(req)
    keys = {p.key for p in err.value.problems}
    assert {"policy.container", "judges.judge.container"} <= keys
    # gym-launch local refuses it before it creates anything.
    from launch.backends.local import run_local

    with pytest.raises(SpecError) as err:
        run_local(req.config, req.plan, "spec.toml", output_root=str(tmp_path / "out"))
    assert {p.key for p in err.value.problems} == {"policy.container", "judges.judge.container"}
    assert not (tmp_path / "out").exists()


# --- item 3: the service's own process ----------------------------------------------------------


def test_a_services_runtime_value_is_a_variable_the_run_needs(tmp_path: Path) -> None:
    # The agents check these before any process starts (an `environment` failure names the key).
    refs = config_of(tmp_path, POLICY_AND_JUDGE).environment_references()
    assert refs["SLURM_JOB_ID"] == "policy.env.JOB"


class _Svc:
    def __init__(self, **kw: object) -> None:
        self.container = kw.get("container")
        self.container_mounts = ()
        self.pre_command = kw.get("pre_command")
        self.env = kw.get("env", {})


def test_pre_command_and_runtime_env_reach_the_service(tmp_path: Path) -> None:
    from launch.spec.service_process import service_process

    svc = _Svc(pre_command="export GREETING=hello\ncd /", env={"TAG": "runtime:JOB_TAG", "PLAIN": "p"})
    proc = service_process("policy", svc, ["sh", "-c", 'echo "$GREETING $TAG $PLAIN $(pwd)"'], {"JOB_TAG": "j7"})
    assert dict(proc.env) == {"TAG": "j7", "PLAIN": "p"}
    got = subprocess.run(list(proc.argv), env=dict(proc.env), capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "hello j7 p /"
    # A failing pre_command fails the service: its command never runs.
    failing = service_process("policy", _Svc(pre_command="false"), ["echo", "ran"], {})
    done = subprocess.run(list(failing.argv), capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "ran" not in done.stdout


def test_a_container_service_runs_as_a_step_on_the_agents_node(tmp_path: Path) -> None:
    from launch.spec.service_process import ServiceProcessError, service_process

    svc = _Svc(container="img", pre_command="true")
    words = "srun --overlap --nodes=1 --ntasks=1 --job-name=policy --container-image=img"
    environ = {JobEnv.container_step("policy"): words, "SLURMD_NODENAME": "n3"}
    argv = service_process("policy", svc, ["vllm", "serve"], environ, devices="2,3").argv
    assert argv[:7] == (*words.split(), "--nodelist=n3")
    assert argv[7:9] == ("bash", "-c") and argv[9].startswith("export CUDA_VISIBLE_DEVICES=2,3\n")
    assert argv[-2:] == ("vllm", "serve")
    with pytest.raises(ServiceProcessError, match=r"policy\.container .* gym-launch submit --backend slurm"):
        service_process("policy", svc, ["vllm"], {})
    with pytest.raises(ServiceProcessError, match=r"judges\.j\.env\.TAG takes JOB_TAG"):
        service_process("judges.j", _Svc(env={"TAG": "runtime:JOB_TAG"}), ["x"], {})


def test_asking_the_head_answers_only_where_its_gcs_listens() -> None:
    # A real listening socket answers; an address where nothing listens says why, within the bound.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        assert ray_node.head_answers(f"127.0.0.1:{srv.getsockname()[1]}") is None
    t0 = time.monotonic()
    got = ray_node.head_answers("127.0.0.1:9", timeout=1.0)
    assert got is not None and "ConnectionRefusedError" in got and time.monotonic() - t0 < 1.5
    assert ray_node.head_answers("no-port") is not None


# --- item 3: a health check that never passes, in a real local run ------------------------------

NEVER_HEALTHY = f"""
name = "never-healthy"
[launch]
gpus_per_replica = 1
node_gpus = 1
[launch.coordination]
startup_timeout = 120
heartbeat_timeout = 6
heartbeat_interval = 0.5
poll_interval = 0.25
teardown_grace = 4.0
[trainer]
nodes = 0
gpus_per_node = 1
[inference]
gpus = 0
[driver]
command = ["{sys.executable}", "-c", "pass"]
trains = false
[pools.node]
nodes = 1
gpus_per_node = 1
""" + judge_tables().replace("timeout = 30\n", 'timeout = 30\nhealth_path = "/ready"\nhealth_timeout = 4\n', 1)


@pytest.mark.slow
def test_a_judge_whose_health_check_never_passes_fails_the_run_named_in_the_audit(tmp_path: Path) -> None:
    run = launch_local(tmp_path, NEVER_HEALTHY, uid("never-healthy"))
    assert run.wait(120) == 1, run.text[-3000:]
    result = audit(run.run_dir, verdict="fail", rank=0, kind=FailureKind.STARTUP_TIMEOUT)
    cause = result.first_cause
    assert cause is not None
    # Which service, which node, what the check got.
    assert "judge general's health check (GET http://127." in cause.cause
    assert "/ready) on node 0 (127." in cause.cause
    assert "UnhealthyStatus: HTTP 404" in cause.cause and "health_timeout 4s" in cause.cause
    assert_nothing_left(run.run_dir)


# The same judge, healthy, with its own env (a runtime: value) and pre_command, under real agents.
JUDGE_WITH_ENV = NEVER_HEALTHY.replace(
    'health_path = "/ready"\nhealth_timeout = 4\n',
    'pre_command = "printf \'%s %s\' \\"$JOB_TAG_SEEN\\" \\"$PLAIN\\" > \\"$PRE_OUT\\""\n'
    'env = {JOB_TAG_SEEN = "runtime:JOB_TAG", PLAIN = "plain"}\n',
)


@pytest.mark.slow
def test_a_judges_env_and_pre_command_reach_it_and_the_runtime_value_is_not_recorded(tmp_path: Path) -> None:
    out = tmp_path / "pre.out"
    secret = "tag-7f3a9c"
    run = launch_local(tmp_path, JUDGE_WITH_ENV, uid("judge-env"), env={"JOB_TAG": secret, "PRE_OUT": str(out)})
    assert run.wait(120) == 0, run.text[-3000:]
    audit(run.run_dir, verdict="pass")
    assert out.read_text() == f"{secret} plain"
    # The spec keeps the reference; no record of the run holds the value.
    assert not [p for p in run.run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert_nothing_left(run.run_dir)
