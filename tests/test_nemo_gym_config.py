"""NeMo Gym submission configs read as written (issue 50, items 1 and 4; seed 001's system).

A ``.yaml``/``.yml`` file whose top level has ``compute`` and ``services`` is a NeMo Gym config:
every command that takes a spec reads it, every key is carried to its meaning or refused naming its
YAML path (the one table: launch/spec/_seed_layout.py, printed in docs/guides/nemo-gym.md). The
examples are seed 001's two (as written, plus the keys NeMo Gym requires) and a CPU-pool variant,
which runs here to an audit PASS with the reference judge. A vLLM service's model is loaded as given,
as NeMo Gym runs it, with a warning that its weights are not pinned.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from agent.ray import node as ray_node
from agent.ray.node import pick_ports
from launch.cli import main
from launch.spec import _seed_layout as layout
from launch.spec import sglang_argv
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import load_spec
from launch.spec.plan import plan as make_plan
from launch.spec.policy_argv import PolicyNode, policy_command
from launch.spec.reference import NEMO_GYM_DOC_PATH, nemo_gym_markdown
from launch.spec.validate import validate
from launch.spec.vllm_argv import ENGINE_PYTHON_ENV
from schemas import DriverEnv, names
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
from tests.test_policy_service import REVISION, SEED_001, free_policy_port

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
    # As NeMo Gym runs them: vLLM loads each model as given (a hub id), nothing staged or pinned.
    assert (pol.weights, pol.revision, pol.prepared_dir) == ("my-org/policy-model", None, None)
    assert (judge.weights, judge.revision, judge.prepared_dir) == ("my-org/judge-model", None, None)
    assert [str(w) for w in config.warnings] == [
        f"services.{name}.model: the weights are not pinned: vLLM downloads my-org/{name}-model as it starts, "
        "and what the hub serves under that name may change between attempts and nodes; to pin them add "
        "revision: COMMIT (40 hex digits), and prepared_dir: DIR to serve weights staged before the job "
        "(gym-agent extensions)"
        for name in ("policy", "judge")
    ]
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


# Seed 001's "Give a judge its own node", as the seed writes it.
SEED_001_JUDGE_NODE = """
compute:
  cluster:
    type: slurm
    account: my-account
    node_pools:
      policy:
        partition: batch
        nodes: 2
        gpus_per_node: 8
      judge:
        partition: batch
        nodes: 1
        gpus_per_node: 8
services:
  policy:
    type: vllm
    container: vllm/vllm-openai:v0.9.0
    model: my-org/policy-model
    tensor_parallel_size: 16
    node_pool: policy
  judge:
    type: vllm
    container: vllm/vllm-openai:v0.9.0
    model: my-org/judge-model
    tensor_parallel_size: 8
    port: 8100
    node_pool: judge
driver:
  policy_model: policy
  benchmarks:
    my-benchmark:
      run:
        config_paths:
          - path/to/config.yaml
"""


def test_judge_node_is_the_seeds_example_plus_only_what_nemo_gym_requires() -> None:
    assert example("judge_node") == yaml.safe_load(SEED_001_JUDGE_NODE) | {"job": {"output_path": "/shared/gym-runs"}}


def test_validate_accepts_unpinned_weights_with_a_warning_naming_each_key(tmp_path: Path) -> None:
    path = EXAMPLES / "judge_node.yaml"
    r = subprocess.run([GYM_LAUNCH, "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == load_spec(path).fingerprint + "\n"  # stdout stays the fingerprint alone
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert [w.split(": ")[1] for w in warned] == ["services.policy.model", "services.judge.model"], r.stderr
    assert all("the weights are not pinned" in w and "add revision: COMMIT" in w for w in warned)
    r = subprocess.run([GYM_LAUNCH, "plan", str(path), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    listed = json.loads(r.stdout)["warnings"]
    assert [w["key"] for w in listed] == ["services.policy.model", "services.judge.model"]
    assert all(w["message"].startswith("the weights are not pinned: vLLM downloads my-org/") for w in listed)


def _argvs(tmp: Path, data: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """The vLLM command of each service, as the agent builds it (gym-launch judge-command for the judge)."""
    path = write(tmp, data)
    capsys.readouterr()
    assert main(["judge-command", str(path), "judge"]) == 0
    judge = json.loads(capsys.readouterr().out)["argv"]
    policy = RunConfig.from_spec(load_spec(path)).policy
    return {"judge": judge, "policy": list(policy_command(policy, PolicyNode(0, 2, "h", "h")).argv)}


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_vllm_loads_the_model_as_given_with_revision_only_when_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = example("judge_node")
    argvs = _argvs(tmp_path, data, capsys)
    for name in ("policy", "judge"):
        argv = argvs[name]
        assert (_value(argv, "--model"), _value(argv, "--served-model-name")) == (f"my-org/{name}-model",) * 2
        assert "--revision" not in argv
    # revision alone: the hub id at that commit, no warning for it.
    data["services"]["judge"]["revision"] = REVISION
    data["services"]["policy"] |= {"revision": REVISION, "served_model_name": "policy"}
    argvs = _argvs(tmp_path, data, capsys)
    assert (_value(argvs["judge"], "--model"), _value(argvs["judge"], "--revision")) == ("my-org/judge-model", REVISION)
    assert [_value(argvs["policy"], f) for f in ("--model", "--served-model-name", "--revision")] == [
        "my-org/policy-model",
        "policy",
        REVISION,
    ]
    assert config_of(tmp_path, data).warnings == ()
    # revision and prepared_dir (the extensions): the staged directory, which is its revision.
    data["services"]["judge"]["prepared_dir"] = "/models/judge-model"
    argvs = _argvs(tmp_path, data, capsys)
    assert _value(argvs["judge"], "--model") == "/models/judge-model" and "--revision" not in argvs["judge"]
    judge = config_of(tmp_path, data).judges["judge"]
    assert (judge.weights, judge.prepared_dir, judge.revision) == (None, "/models/judge-model", REVISION)
    # A directory as the model, unpinned: loaded from there, and the warning says what to add.
    data["services"]["judge"] = {k: v for k, v in data["services"]["judge"].items() if k != "revision"}
    data["services"]["judge"] |= {"model": "/models/judge-model"}
    del data["services"]["judge"]["prepared_dir"]
    config = config_of(tmp_path, data)
    assert config.judges["judge"].prepared_dir == "/models/judge-model" and config.judges["judge"].weights is None
    (warning,) = config.warnings
    assert warning.key == "services.judge.model" and "loads the files in /models/judge-model" in warning.message
    assert "add revision: COMMIT" in warning.message


def test_a_judge_on_sglang_loads_the_model_as_given_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = example("judge_node")
    data["services"]["judge"]["backend"] = "sglang"
    argv = _argvs(tmp_path, data, capsys)["judge"]
    assert _value(argv, "--model-path") == "my-org/judge-model" and "--revision" not in argv
    assert not [f for f in sglang_argv.argv_flags(argv) if f not in sglang_argv.recorded_flags()]
    data["services"]["judge"]["revision"] = REVISION
    argv = _argvs(tmp_path, data, capsys)["judge"]
    assert (_value(argv, "--model-path"), _value(argv, "--revision")) == ("my-org/judge-model", REVISION)


# Seed 001's judge in a TOML spec, on vLLM.
TOML_JUDGE = SEED_001.replace("[judges.judge]\n", '[judges.judge]\nbackend = "vllm"\n')


def test_a_toml_spec_still_requires_pinned_staged_weights_and_refuses_weights(tmp_path: Path) -> None:
    def problems(text: str) -> dict[str, str]:
        return {p.key: p.message for p in validate(tomllib.loads(text))}

    assert TOML_JUDGE != SEED_001 and problems(TOML_JUDGE) == {}
    judge = TOML_JUDGE.split("[judges.judge]")[1]
    unpinned = problems(TOML_JUDGE.replace(judge, judge.replace(f'revision = "{REVISION}"\n', "", 1)))
    assert unpinned == {"judges.judge.revision": "is required for a managed vllm judge; add it to [judges.judge]"}
    hub = problems(TOML_JUDGE.replace('prepared_dir = "/models/judge"', 'weights = "my-org/judge-model"'))
    assert "is a NeMo Gym config's unpinned model" in hub["judges.judge.weights"], hub
    assert "is required for a managed vllm judge" in hub["judges.judge.prepared_dir"]
    policy = problems(SEED_001.replace('prepared_dir = "/models/policy"', 'weights = "my-org/policy-model"'))
    assert "set revision and prepared_dir" in policy["policy.weights"], policy
    assert "is required for a managed policy" in policy["policy.prepared_dir"]


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
    # Seed 001: driver.env's runtime:GYM_POOL_MAIN_NODES is the judge's pool's hosts, the judge's own host.
    assert facts["judge_host"] == urlsplit(facts["judge_url"]).hostname == "127.0.0.2"
    assert json.loads((run_dir / names.SPEC).read_text())["spec"]["services"]["judge"]["backend"] == "reference"


# A stand-in for vLLM's OpenAI server (a mock: vLLM cannot download a hub model here): it refuses a
# flag the pinned vLLM lacks, records its argv, and serves the reference judge under --served-model-name.
VLLM_STAND_IN = """
import json, os, sys
from agent.judges import reference_server
from launch.spec.vllm_argv import recorded_flags
argv = sys.argv[1:]
unknown = [a.split("=", 1)[0] for a in argv if a.startswith("--") and a.split("=", 1)[0] not in recorded_flags()]
if unknown:
    sys.exit(f"api_server.py: error: unrecognized arguments: {unknown}")
with open(os.environ["VLLM_STARTS"], "a") as f:
    f.write(json.dumps(argv) + "\\n")
value = lambda flag: argv[argv.index(flag) + 1]
served = ["--host", value("--host"), "--port", value("--port"), "--model", value("--served-model-name")]
context = ["--context-length", value("--max-model-len")] if "--max-model-len" in argv else []
sys.exit(reference_server.main(served + context))
"""


def vllm_stand_in(site: Path) -> Path:
    """``site`` on PYTHONPATH gives ``python -m vllm.entrypoints.openai.api_server`` the stand-in."""
    pkg = site / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (site / "vllm", site / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(VLLM_STAND_IN)
    return site


@pytest.mark.slow
def test_a_nemo_gym_config_s_unpinned_vllm_services_start_with_the_model_as_given(tmp_path: Path) -> None:
    """Seed 001's judge_node on one node: the agents start both vLLM services (the stand-in) with the
    hub ids as written, no --revision and nothing staged, and the run passes its audit."""
    data = example("judge_node")
    data["compute"]["cluster"]["node_pools"] = {"main": {"partition": "batch", "nodes": 1, "gpus_per_node": 2}}
    for svc in data["services"].values():
        svc |= {"node_pool": "main", "tensor_parallel_size": 1}
        del svc["container"]  # no Pyxis here: the services run in the agents' environment
    data["services"]["policy"]["port"] = free_policy_port()
    asker = tmp_path / "ask.py"
    asker.write_text(ASKER)
    data["driver"]["benchmarks"]["my-benchmark"] = {"command": f"{sys.executable} {asker}"}
    data["job"]["output_path"] = str(tmp_path / "out")
    data["launch"] = {"coordination": {"heartbeat_interval": 0.5, "poll_interval": 0.25, "teardown_grace": 4.0}}
    starts, reply = tmp_path / "starts.jsonl", tmp_path / "reply.json"
    site = vllm_stand_in(tmp_path / "site")
    env = {"PYTHONPATH": f"{site}:{REPO}", "VLLM_STARTS": str(starts), "POLICY_REPLY": str(reply)}
    run_dir = run_to_pass(tmp_path, data, "nemo-hub", env, 300)
    by_model = {a[a.index("--served-model-name") + 1]: a for a in map(json.loads, starts.read_text().splitlines())}
    assert sorted(by_model) == ["my-org/judge-model", "my-org/policy-model"]
    for served, argv in by_model.items():
        assert argv[argv.index("--model") + 1] == served and "--revision" not in argv, argv
    assert json.loads(reply.read_text())["reply"]["model"] == "my-org/policy-model"
    services = json.loads((run_dir / names.SPEC).read_text())["spec"]["services"]
    assert not {"revision", "prepared_dir"} & {k for svc in services.values() for k in svc}


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
