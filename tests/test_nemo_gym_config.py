"""NeMo Gym submission configs read as written (issue 50, items 1 and 4; seed 001's system).

A ``.yaml``/``.yml`` file whose top level has ``compute`` and ``services`` is a NeMo Gym config:
every command that takes a spec reads it, every key is carried to its meaning or refused naming its
YAML path (the one table: launch/spec/_seed_layout.py, printed in docs/guides/nemo-gym.md). The
examples are seed 001's two (as written, plus the keys NeMo Gym requires and the two gym-agent needs
of a vLLM service) and a CPU-pool variant, which runs here to an audit PASS with the reference judge.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.ray import node as ray_node
from agent.ray.node import pick_ports
from launch.cli import main
from launch.spec import _seed_layout as layout
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import load_spec
from launch.spec.plan import plan as make_plan
from launch.spec.reference import NEMO_GYM_DOC_PATH, nemo_gym_markdown
from launch.spec.vllm_argv import ENGINE_PYTHON_ENV
from schemas import DriverEnv, JobEnv, names
from tests.harness import (
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    kill_tree_by_session,
    launch_local,
    uid,
)
from tests.harness.engines import ENGINE_ENV, require_engine, tiny_model
from tests.test_policy_service import free_policy_port

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "nemo_gym"
GYM_LAUNCH = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "gym-launch"


def example(name: str) -> dict[str, Any]:
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return data


def write(tmp: Path, data: dict[str, Any], name: str = "run.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def config_of(tmp: Path, data: dict[str, Any], *overrides: str) -> RunConfig:
    return RunConfig.from_spec(load_spec(write(tmp, data), overrides))


def problems_of(tmp: Path, data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        config_of(tmp, data)
    return {p.key: p.message for p in err.value.problems}


def render(tmp: Path, path: Path) -> str:
    out = tmp / "job.sh"
    assert main(["render", str(path), "--backend", "slurm", "--output-root", str(tmp / "out"), "-o", str(out)]) == 0
    return out.read_text()


# --- the examples -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["judge_node", "ray_pools", "cpu_pool"])
@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_each_example_validates_plans_and_renders_from_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, suffix: str
) -> None:
    path = write(tmp_path, example(name), f"{name}{suffix}")
    assert main(["validate", str(path)]) == 0
    assert main(["plan", str(path)]) == 0
    assert "read as a NeMo Gym submission config" in capsys.readouterr().out
    assert main(["plan", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "nemo-gym"
    assert render(tmp_path, path).startswith("#!/bin/bash")


def test_seed_001_judge_node_the_policy_spans_its_pool_the_judge_has_the_third_node(tmp_path: Path) -> None:
    config = config_of(tmp_path, example("judge_node"))
    p = make_plan(config)
    assert [(n.pool, n.policy_gpus, dict(n.judges)) for n in p.nodes] == [
        ("policy", 8, {}),
        ("policy", 8, {}),
        ("judge", 0, {"judge": 8}),
    ]
    assert p.policy_nodes == (0, 1) and p.driver_node == 0  # the first node of the policy's pool
    assert not config.ray.enabled  # no ray service: NeMo Gym starts no Ray
    pol, judge = config.policy, config.judges["judge"]
    assert (pol.model, pol.tensor_parallel_size, pol.port, pol.node_pool) == ("my-org/policy-model", 16, 8000, "policy")
    assert (judge.backend, judge.gpus, judge.tensor_parallel_size, judge.node_pool) == ("vllm", 8, 8, "judge")
    assert pol.container == judge.container == "vllm/vllm-openai:v0.9.0"
    assert (pol.health_path, pol.health_timeout) == ("/health", 60)  # NeMo Gym's default check
    assert config.driver.env == {"JUDGE_HOST": f"runtime:{JobEnv.pool_nodes('judge')}"}
    assert (config.name, config.output.root, config.launch.slurm.account) == (
        "gym-my-benchmark",
        "/shared/gym-runs",
        "my-account",
    )
    command = config.driver.command
    assert isinstance(command, str) and command.startswith("gym eval run ")
    for word in (
        '"+output_jsonl_fpath=$GYM_RUN_DIR/nemo-gym/rollouts.jsonl"',
        "--model-type openai_model",
        "'+config_paths=[path/to/config.yaml]'",
        f'"+policy_base_url=${DriverEnv.POLICY_URL}"',
        "+policy_model_name=my-org/policy-model",
        "+require_complete=True",
    ):
        assert word in command, command

    script = render(tmp_path, write(tmp_path, example("judge_node")))
    assert "#SBATCH --job-name=gym-my-benchmark" in script and "#SBATCH --nodes=3" in script
    assert "#SBATCH --account=my-account" in script and "#SBATCH --partition=batch" in script
    assert 'export GYM_POOL_POLICY_NODES=$(IFS=,; echo "${gym_node[*]:0:2}")' in script
    assert 'export GYM_POOL_JUDGE_NODES=$(IFS=,; echo "${gym_node[*]:2:1}")' in script
    assert 'export GYM_DRIVER_HOST="${gym_node[0]}"' in script
    steps = [line for line in script.splitlines() if line.startswith("srun ")]
    assert [s.split("--job-name=")[1].split()[0] for s in steps] == ["policy", "judge"]
    assert "--container-image=vllm/vllm-openai:v0.9.0" in script
    assert "GYM_RAY_ADDRESS" not in script


def test_seed_001_ray_pools_one_cluster_over_both_pools_with_the_aux_resources(tmp_path: Path) -> None:
    config = config_of(tmp_path, example("ray_pools"))
    assert config.ray.enabled and config.ray.name == "cluster" and config.ray.node_pools == ("main", "aux")
    assert config.ray.container == "rayproject/ray:latest"
    p = make_plan(config)
    assert [n.pool for n in p.nodes] == ["main", "aux", "aux"] and p.driver_node == 0
    # Ray's argv on each node: its pool's custom resources (a benchmark's own device placement).
    ports = pick_ports("nemo-ray", 0, 1)
    for n in p.nodes:
        spec = ray_node.RayNodeSpec(
            is_head=n.index == p.driver_node,
            address=f"10.0.0.{n.index}",
            head_address="10.0.0.0:6379",
            ports=ports,
            num_gpus=n.ray_gpus,
            num_cpus=config.ray.num_cpus,
            object_store_memory=None,
            temp_dir="/tmp/r",
            resources={k: float(v) for k, v in config.ray.resources.get(n.pool or "", {}).items()},
            extra_args=config.ray.extra_args,
        )
        argv = ray_node.ray_start_argv(spec)
        assert f"--num-gpus={n.ray_gpus}" in argv
        assert any('"extra_gpu": 8' in a for a in argv) is (n.pool == "aux"), argv
    command = config.driver.command
    assert isinstance(command, str) and command.startswith(f'export NEMO_GYM_BENCH_DIR="${DriverEnv.RUN_DIR}"\n')
    assert command.endswith('python my_benchmark.py --ray-address "$GYM_RAY_ADDRESS_CLUSTER"')

    script = render(tmp_path, write(tmp_path, example("ray_pools")))
    assert f"export {DriverEnv.ray_address('cluster')}=" in script
    assert 'export GYM_POOL_MAIN_NODES=$(IFS=,; echo "${gym_node[*]:0:1}")' in script
    assert 'export GYM_POOL_AUX_NODES=$(IFS=,; echo "${gym_node[*]:1:2}")' in script
    assert 'export GYM_RAY_CLUSTER_AUX_WORKERS=$(IFS=,; echo "${gym_node[*]:1:2}")' in script
    steps = [line for line in script.splitlines() if line.startswith("srun ")]
    assert [s.split("--job-name=")[1].split()[0] for s in steps] == ["cluster_main_workers", "cluster_aux_workers"]


def test_the_cpu_pool_variant_has_a_cpu_pool_and_the_reference_judge(tmp_path: Path) -> None:
    config = config_of(tmp_path, example("cpu_pool"))
    assert [(p.name, p.gpus_per_node) for p in config.pool_list] == [("main", 1), ("readers", 0)]
    assert config.judges["judge"].backend == "reference" and config.judges["judge"].container is None
    p = make_plan(config)
    assert [dict(n.judges) for n in p.nodes] == [{"judge": 1}, {}]


# --- key by key ---------------------------------------------------------------------------------


def test_keys_in_our_spelling_are_reported_at_the_nemo_gym_path(tmp_path: Path) -> None:
    data = example("judge_node")
    data["compute"]["cluster"]["node_pools"]["policy"]["nodes"] = 0
    data["services"]["policy"]["tensor_paralel_size"] = 2
    problems = problems_of(tmp_path, data)
    assert "must be a positive integer" in problems["compute.cluster.node_pools.policy.nodes"]
    assert "did you mean tensor_parallel_size?" in problems["services.policy.tensor_paralel_size"]
    data = example("judge_node")
    data["services"]["judge"]["node_pool"] = "nope"
    assert "not 'nope'" in problems_of(tmp_path, data)["services.judge.node_pool"]


def test_what_nemo_gym_requires_is_required(tmp_path: Path) -> None:
    data = example("judge_node")
    del data["job"], data["compute"]["cluster"]["node_pools"]["judge"]["partition"]
    del data["services"]["judge"]["model"], data["driver"]["benchmarks"]
    problems = problems_of(tmp_path, data)
    for key in ("job", "compute.cluster.node_pools.judge.partition", "services.judge.model", "driver.benchmarks"):
        assert "required by NeMo Gym" in problems[key], problems


def test_env_prefixes_and_mounts_are_nemo_gyms(tmp_path: Path) -> None:
    data = example("judge_node")
    data["services"]["policy"] |= {"env": {"A": "lit:x y", "B": "runtime:HOME"}, "mounts": ["/data", "/a:/b:ro"]}
    data["services"]["policy"]["pre_command"] = "export X=1"
    pol = config_of(tmp_path, data).policy
    assert dict(pol.env) == {"A": "x y", "B": "runtime:HOME"}
    assert pol.container_mounts == ("/data:/data", "/a:/b:ro") and pol.pre_command == "export X=1"
    data["services"]["policy"]["env"] = {"A": "x"}
    assert "must start with lit:" in problems_of(tmp_path, data)["services.policy.env.A"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return change


# Every refused key (layout.REFUSED) -> (example, change, the key path the problem names).
REFUSALS: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "compute.CLUSTER.hostname": ("judge_node", _set("compute.cluster.hostname", "login"), "compute.cluster.hostname"),
    "compute.CLUSTER.node_pools.NAME.extra_args": (
        "judge_node",
        _set("compute.cluster.node_pools.judge.extra_args", {"mem": "0"}),
        "compute.cluster.node_pools.judge.extra_args",
    ),
    "services.NAME.type = vllm_pd": ("judge_node", _set("services.judge.type", "vllm_pd"), "services.judge.type"),
    "services.NAME.number_of_instances": (
        "judge_node",
        _set("services.policy.number_of_instances", 2),
        "services.policy.number_of_instances",
    ),
    "services.NAME.use_ray_serve": (
        "judge_node",
        _set("services.judge.use_ray_serve", True),
        "services.judge.use_ray_serve",
    ),
    "services.NAME.pipeline_parallel_size": (
        "judge_node",
        _set("services.policy.pipeline_parallel_size", 2),
        "services.policy.pipeline_parallel_size",
    ),
    "services.NAME.data_parallel_rpc_port": (
        "judge_node",
        _set("services.policy.data_parallel_rpc_port", 13345),
        "services.policy.data_parallel_rpc_port",
    ),
    "services.NAME.health_check.port": (
        "judge_node",
        _set("services.judge.health_check", {"port": 9000}),
        "services.judge.health_check.port",
    ),
    "services.NAME.health_check (ray)": (
        "ray_pools",
        _set("services.cluster.health_check", {"path": "/"}),
        "services.cluster.health_check",
    ),
    "services.NAME.port (ray)": ("ray_pools", _set("services.cluster.port", 6379), "services.cluster.port"),
    "services.NAME.num_gpus (ray)": ("ray_pools", _set("services.cluster.num_gpus", 8), "services.cluster.num_gpus"),
    "services.NAME.node_pool (ray)": (
        "ray_pools",
        _set("services.cluster.node_pool", "main"),
        "services.cluster.node_pool",
    ),
    "services.NAME.env host:VAR": (
        "judge_node",
        _set("services.judge.env", {"X": "host:HOME"}),
        "services.judge.env.X",
    ),
    "services.NAME (two ray services)": (
        "ray_pools",
        _set("services.second", {"type": "ray", "container": "r", "node_pools": ["aux"]}),
        "services.second",
    ),
    "driver.benchmarks (more than one)": (
        "judge_node",
        _set("driver.benchmarks.other", {"command": "true"}),
        "driver.benchmarks",
    ),
    "driver.benchmarks.NAME.prepare": (
        "judge_node",
        _set("driver.benchmarks.my-benchmark.prepare", {"x": 1}),
        "driver.benchmarks.my-benchmark.prepare",
    ),
    "driver.benchmarks.NAME.resumable": (
        "judge_node",
        _set("driver.benchmarks.my-benchmark.resumable", True),
        "driver.benchmarks.my-benchmark.resumable",
    ),
    "driver.container": ("judge_node", _set("driver.container", "python:3.12"), "driver.container"),
    "driver.mounts": ("judge_node", _set("driver.mounts", ["/data"]), "driver.mounts"),
    "driver.gym_install": ("judge_node", _set("driver.gym_install", {"ref": "v0.7.0"}), "driver.gym_install"),
    "driver.policy_host": ("judge_node", _set("driver.policy_host", "10.0.0.1"), "driver.policy_host"),
    "driver.env host:VAR": ("judge_node", _set("driver.env", {"X": "host:HOME"}), "driver.env.X"),
    "otel": ("judge_node", _set("otel", {"enabled": True, "endpoint": "http://x"}), "otel"),
}


def test_every_refused_key_has_a_case() -> None:
    assert set(REFUSALS) == set(layout.REFUSED)


@pytest.mark.parametrize("refused", sorted(REFUSALS))
def test_each_refused_nemo_gym_key_is_named_with_why(tmp_path: Path, refused: str) -> None:
    name, change, key = REFUSALS[refused]
    data = copy.deepcopy(example(name))
    change(data)
    problems = problems_of(tmp_path, data)
    assert problems.get(key) == layout.REFUSED[refused], problems


def test_validate_names_the_refused_key_and_exits_2(tmp_path: Path) -> None:
    data = example("judge_node")
    data["services"]["policy"]["number_of_instances"] = 4
    r = subprocess.run([GYM_LAUNCH, "validate", str(write(tmp_path, data))], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "services.policy.number_of_instances: multi-instance vLLM" in r.stderr, r.stderr


def test_a_yaml_file_that_is_not_a_nemo_gym_config_or_not_yaml_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("compute:\n  cluster: [1,\n")
    with pytest.raises(UsageError, match=r"invalid YAML: .*\(at line \d+, column \d+\)"):
        load_spec(bad)
    bad.write_text("name: x\n")
    with pytest.raises(UsageError, match="top level has compute and services"):
        load_spec(bad)


def test_a_benchmark_command_gets_the_policys_address_and_name(tmp_path: Path) -> None:
    data = example("judge_node")
    data["driver"]["benchmarks"]["my-benchmark"] = {"command": "python bench.py"}
    command = config_of(tmp_path, data).driver.command
    assert command == (
        f'export NEMO_GYM_BENCH_DIR="${DriverEnv.RUN_DIR}" NEMO_GYM_POLICY_BASE_URL="${DriverEnv.POLICY_URL}" '
        "NEMO_GYM_POLICY_MODEL_NAME=my-org/policy-model\npython bench.py"
    )


def test_set_overrides_use_nemo_gyms_keys(tmp_path: Path) -> None:
    config = config_of(tmp_path, example("judge_node"), "services.policy.port=8001")
    assert config.policy.port == 8001


def test_the_guide_is_generated_from_the_table() -> None:
    text = NEMO_GYM_DOC_PATH.read_text(encoding="utf-8")
    assert text == nemo_gym_markdown(), "docs/guides/nemo-gym.md is stale: run python -m launch.spec.reference"
    for key in layout.REFUSED:
        assert f"| `{key}` |" in text


# --- a local run ---------------------------------------------------------------------------------


def run_to_pass(tmp: Path, data: dict[str, Any], tag: str, env: dict[str, str], timeout: float) -> Path:
    """`gym-launch local` of the NeMo Gym config ``data`` (as a .yaml): exit 0, valid artifacts, an audit
    PASS, nothing left running. Returns the run directory."""
    run = launch_local(tmp, yaml.safe_dump(data, sort_keys=False), uid(tag), env=env, suffix=".yaml")
    try:
        code = run.wait(timeout)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 0, (failures(run.run_dir), run.text[-3000:])
    assert_artifacts_valid(run.run_dir)
    audit(run.run_dir, verdict="pass")
    assert_nothing_left(run.run_dir)
    return run.run_dir


@pytest.mark.ray(seconds=60)
def test_the_cpu_pool_variant_runs_locally_to_an_audit_pass(tmp_path: Path) -> None:
    data = example("cpu_pool")
    data["driver"]["benchmarks"]["smoke"]["command"] = f"python {EXAMPLES / 'smoke_benchmark.py'}"
    data["launch"] = {"coordination": {"heartbeat_interval": 0.5, "poll_interval": 0.25, "teardown_grace": 4.0}}
    smoke = tmp_path / "smoke.json"
    env = {"SMOKE_OUT": str(smoke), "PYTHONPATH": str(REPO)}
    run_dir = run_to_pass(tmp_path, data, "nemo", env, 300)
    facts = json.loads(smoke.read_text())
    assert facts["judge_model"] == "reference-judge" and "SCORE" in facts["judge_said"]
    assert len(facts["ray_nodes"]) == 2  # the ray service spans both pools, the CPU pool's node too
    assert facts["bench_dir"] == str(run_dir)
    assert json.loads((run_dir / names.SPEC).read_text())["spec"]["services"]["judge"]["backend"] == "reference"


# Asks the policy one question at the address NeMo Gym's benchmark command is given, keeps the reply.
ASKER = """
import json, os, urllib.request
url, name = os.environ["NEMO_GYM_POLICY_BASE_URL"], os.environ["NEMO_GYM_POLICY_MODEL_NAME"]
body = {"model": name, "messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 16}
req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
with open(os.environ["POLICY_REPLY"], "w") as f:
    json.dump({"url": url, "reply": json.loads(urllib.request.urlopen(req, timeout=120).read())}, f)
"""


@pytest.mark.engines
def test_a_nemo_gym_config_serves_its_vllm_policy_to_the_benchmark_to_an_audit_pass(tmp_path: Path) -> None:
    python = require_engine()
    model, revision = tiny_model(python)
    asker = tmp_path / "ask.py"
    asker.write_text(ASKER)
    policy = {
        "type": "vllm",
        "model": str(model),  # an absolute path: the staged weights themselves
        "served_model_name": "tiny-policy",
        "revision": revision,
        "port": free_policy_port(),
        "node_pool": "policy",
        "extra_args": "--load-format dummy",
        "health_check": {"timeout_seconds": 600},  # vLLM's CPU build starts in 68-126 s here
    }
    data = {
        "compute": {
            "cluster": {
                "type": "slurm",
                "account": "a",
                "node_pools": {"policy": {"partition": "batch", "nodes": 1, "gpus_per_node": 1}},
            }
        },
        "services": {"policy": policy},
        "driver": {"policy_model": "policy", "benchmarks": {"ask": {"command": f"{sys.executable} {asker}"}}},
        "job": {"output_path": str(tmp_path / "out")},
        "otel": {"enabled": False},
        "launch": {"coordination": {"startup_timeout": 600, "heartbeat_interval": 0.5, "teardown_grace": 4.0}},
    }
    reply = tmp_path / "reply.json"
    env = {**ENGINE_ENV, ENGINE_PYTHON_ENV: python, "POLICY_REPLY": str(reply)}
    run_dir = run_to_pass(tmp_path, data, "nemo-vllm", env, 900)
    got = json.loads(reply.read_text())
    assert got["url"].endswith(f":{policy['port']}/v1") and got["reply"]["model"] == "tiny-policy"
    assert "vllm" in (run_dir / names.policy_log(0)).read_text().lower()
