"""Validation of every key: types, names, references, unsupported keys, all problems at once."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec, resolved_from_dict
from launch.spec.plan import plan
from launch.spec.sections import Coordination
from launch.spec.validate import validate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
THREE_NODE = load_spec(EXAMPLES / "three-node.toml").data
REVISION = "0123456789abcdef0123456789abcdef01234567"


def three_node() -> dict[str, Any]:
    return copy.deepcopy(dict(THREE_NODE))


def external_judge(**extra: Any) -> dict[str, Any]:
    return {
        "mode": "external",
        "endpoint": "http://judge.internal:8000/v1",
        "model": "Qwen/Qwen3-32B",
        "max_context_length": 32768,
        "max_concurrent_calls": 16,
        **extra,
    }


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    return {p.key: p.message for p in validate(data)}


def with_change(change: Callable[[dict[str, Any]], None]) -> dict[str, str]:
    data = three_node()
    change(data)
    return problems_of(data)


@pytest.mark.parametrize("name", ["node.toml", "three-node.toml", "demo.toml"])
def test_examples_are_valid(name: str) -> None:
    assert validate(load_spec(EXAMPLES / name).data) == []


# --- unknown keys and did-you-mean --------------------------------------------


@pytest.mark.parametrize(
    ("key_path", "suggestion"),
    [
        (("nmae",), "did you mean name?"),
        (("judgse",), "did you mean judges?"),
        (("launch", "gpus_per_replika"), "did you mean launch.gpus_per_replica?"),
        (
            ("launch", "coordination", "heartbeat_timout"),
            "did you mean launch.coordination.heartbeat_timeout?",
        ),
        (("judges", "general", "timout"), "did you mean judges.general.timeout?"),
        (("judges", "general", "max_context_len"), "did you mean judges.general.max_context_length?"),
        (
            ("rubrics", "general-quality", "max_output_token"),
            "did you mean rubrics.general-quality.max_output_tokens?",
        ),
        (
            ("judging", "bindings", "general-quality", "rubic"),
            "did you mean judging.bindings.general-quality.rubric?",
        ),
        (("judging", "binding"), "did you mean judging.bindings?"),
        (("trainer", "gpus_per_nodes"), "did you mean trainer.gpus_per_node?"),
        (("driver", "placment"), "did you mean driver.placement?"),
        (("ray", "num_cpu"), "did you mean ray.num_cpus?"),
    ],
)
def test_typo_names_full_path_and_suggests(key_path: tuple[str, ...], suggestion: str) -> None:
    data = three_node()
    node = data
    for part in key_path[:-1]:
        node = node.setdefault(part, {})
    node[key_path[-1]] = 1
    found = problems_of(data)
    full = ".".join(key_path)
    assert full in found, found
    assert found[full] == f"unknown key; {suggestion}"


def test_unknown_key_without_close_match_lists_known_keys() -> None:
    found = with_change(lambda d: d["trainer"].update(zzz=1))
    assert "trainer.zzz" in found
    assert "gpus_per_node" in found["trainer.zzz"] and "nodes" in found["trainer.zzz"]


def test_several_problems_are_reported_together() -> None:
    def change(d: dict[str, Any]) -> None:
        d["trainer"]["gpus_per_node"] = "4"
        d["judges"]["general"]["timeout"] = 0
        d["judges"]["general"]["timout"] = 30
        d["driver"]["placement"] = "head"
        d["rubrics"]["general-quality"]["file"] = "my-rubric.txt"

    found = with_change(change)
    assert set(found) == {
        "trainer.gpus_per_node",
        "judges.general.timeout",
        "judges.general.timout",
        "driver.placement",
        "rubrics.general-quality.file",
    }


# --- sections and types --------------------------------------------------------


def _set(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        node = d
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value

    return change


def _drop(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        node = d
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return change


@pytest.mark.parametrize(
    ("change", "key", "fragment"),
    [
        (_set("name", value="has space"), "name", "letters, digits"),
        (_set("output", "root", value=""), "output.root", "non-empty string"),
        (_set("output", "dir_mode", value=0o777), "output.dir_mode", "world-writable"),
        (_set("output", "dir_mode", value=0o550), "output.dir_mode", "owner rwx"),
        (_set("launch", value=[1]), "launch", "must be a table"),
        (_set("launch", "gpus_per_replica", value=0), "launch.gpus_per_replica", "positive integer"),
        (_set("launch", "gpus_per_replica", value=8.0), "launch.gpus_per_replica", "positive integer"),
        (_set("launch", "node_gpus", value=True), "launch.node_gpus", "not the boolean true"),
        (_set("launch", "node_gpus", value=4), "launch.node_gpus", "Beaker"),
        (_set("launch", "backend", value="k8s"), "launch.backend", '"local" or "beaker" or "slurm"'),
        (_set("launch", "hostnames", value=["a", "a"]), "launch.hostnames", "more than once"),
        (_set("launch", "hostnames", value="a"), "launch.hostnames", "array of non-empty strings"),
        (
            _set("launch", "coordination", "startup_timeout", value=-1),
            "launch.coordination.startup_timeout",
            "positive number",
        ),
        (
            _set("launch", "coordination", "heartbeat_timeout", value="120"),
            "launch.coordination.heartbeat_timeout",
            "positive number",
        ),
        (
            _set("launch", "coordination", "poll_interval", value=1.5),
            "launch.coordination.poll_interval",
            "at most 1",
        ),
        (
            _set("launch", "coordination", "heartbeat_interval", value=50),
            "launch.coordination.heartbeat_interval",
            "smaller than heartbeat_timeout",
        ),
        (
            _set("launch", "coordination", "ack_timeout", value=False),
            "launch.coordination.ack_timeout",
            "positive number",
        ),
        (_set("launch", "beaker", "priority", value="max"), "launch.beaker.priority", '"low"'),
        (_set("launch", "slurm", "time", value="4 hours"), "launch.slurm.time", "Slurm time"),
        (_drop("trainer"), "trainer", "is required"),
        (_drop("trainer", "gpus_per_node"), "trainer.gpus_per_node", "is required; add it to [trainer]"),
        # No trainer and no rollout: a judge-only job, whose pools state its nodes (with rollout engines it
        # is an evaluation run, placed as rollout is: tests/test_plan.py).
        (
            lambda d: (_set("trainer", "nodes", value=0)(d), _set("inference", "gpus", value=0)(d)),
            "trainer.nodes",
            "no [pools.NAME] states the job's nodes",
        ),
        (_drop("inference"), "inference", "is required"),
        (_set("inference", "gpus", value=-1), "inference.gpus", "non-negative integer"),
        (_set("inference", "placement_mode", value="mixed"), "inference.placement_mode", '"disaggregated"'),
        (_set("inference", "eval_gpus", value=8), "inference.eval_gpus", "separate evaluation GPU pools"),
        (_set("inference", "nnodes", value=2), "inference.nnodes", "cross-node serving tensor parallelism"),
        (_drop("driver"), "driver", "is required"),
        (_set("driver", "command", value=[]), "driver.command", "non-empty array"),
        (_set("driver", "command", value=["python", 3]), "driver.command", "non-empty array"),
        (_set("driver", "placement", value="head"), "driver.placement", '"trainer" or "inference"'),
        (_set("driver", "env", value={"A": 1}), "driver.env.A", "must be a string"),
        (_set("driver", "env", value={"1A": "x"}), "driver.env.1A", "environment variable name"),
        (
            _set("driver", "env", value={"CUDA_VISIBLE_DEVICES": "0"}),
            "driver.env.CUDA_VISIBLE_DEVICES",
            "from the plan",
        ),
        (_set("data", "train", value=3), "data.train", "(or one string)"),
        (_set("ray", "num_cpus", value=-1), "ray.num_cpus", "non-negative integer"),
        (_set("ray", "object_store_memory", value=0), "ray.object_store_memory", "positive integer"),
        (_set("ray", "extra_args", value=["--num-gpus=8"]), "ray.extra_args", "--num-gpus"),
        (_set("ray", "resources", value={"nope": {"x": 1}}), "ray.resources.nope", "names no [pools.nope]"),
    ],
)
def test_section_rules(change: Callable[[dict[str, Any]], None], key: str, fragment: str) -> None:
    found = with_change(change)
    assert key in found, found
    assert fragment in found[key]


# --- judges --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key", "fragment"),
    [
        (_drop("judges", "general", "mode"), "judges.general.mode", "is required"),
        (_set("judges", "general", "mode", value="hosted"), "judges.general.mode", '"managed" or "external"'),
        (_drop("judges", "general", "revision"), "judges.general.revision", "is required"),
        (_set("judges", "general", "revision", value="main"), "judges.general.revision", "40 lowercase hex"),
        (
            _set("judges", "general", "revision", value=REVISION.upper()),
            "judges.general.revision",
            "40 lowercase",
        ),
        (_drop("judges", "general", "prepared_dir"), "judges.general.prepared_dir", "is required"),
        (
            _set("judges", "general", "prepared_dir", value="models/q"),
            "judges.general.prepared_dir",
            "absolute",
        ),
        (_set("judges", "general", "gpus", value=0), "judges.general.gpus", "positive integer"),
        (
            _set("judges", "general", "tensor_parallel_size", value=2),
            "judges.general.tensor_parallel_size",
            "must equal gpus (1)",
        ),
        (
            _set("judges", "general", "chat_template", value="chatml"),
            "judges.general.chat_template",
            '"qwen3-no-thinking"',
        ),
        (
            _set("judges", "general", "max_context_length", value=1 << 30),
            "judges.general.max_context_length",
            "from 1 to",
        ),
        (
            _set("judges", "general", "max_concurrent_calls", value=0),
            "judges.general.max_concurrent_calls",
            "positive integer",
        ),
        (_set("judges", "general", "timeout", value=0), "judges.general.timeout", "positive integer"),
        (_set("judges", "general", "timeout", value=-5), "judges.general.timeout", "positive integer"),
        (_set("judges", "general", "timeout", value=30.5), "judges.general.timeout", "positive integer"),
        (_set("judges", "general", "timeout", value=True), "judges.general.timeout", "not the boolean true"),
        (
            _set("judges", "general", "cuda_graphs", value="yes"),
            "judges.general.cuda_graphs",
            "true or false",
        ),
        (
            _set("judges", "general", "engine", value="vllm"),
            "judges.general.engine",
            'backend = "vllm"',
        ),
        (
            _set("judges", "general", "extra_args", value=["--max-num-batched-tokens", "64", "--port=9"]),
            "judges.general.extra_args.2",
            "--port is set by the agent",
        ),
        (
            _set("judges", "general", "extra_args", value=["--api-key", "x"]),
            "judges.general.extra_args.0",
            "--api-key is set by the agent",
        ),
        (
            _set("judges", "general", "backend", value="tgi"),
            "judges.general.backend",
            '"sglang" or "vllm" or "reference"',
        ),
        (
            _set("judges", "general", "endpoint", value="http://x:1"),
            "judges.general.endpoint",
            'only for mode = "external"',
        ),
        (
            _set("judges", "general", "node_pool", value="judge"),
            "judges.general.node_pool",
            "must name a [pools.NAME] table",
        ),
        (_set("judges", "general", "nnodes", value=2), "judges.general.nnodes", "cross-node"),
        (_set("judges", "Gen", value={}), "judges.Gen", "[a-z][a-z0-9_-]*"),
        (_set("judges", "gen.eral", value={}), 'judges."gen.eral"', "[a-z][a-z0-9_-]*"),
    ],
)
def test_managed_judge_rules(change: Callable[[dict[str, Any]], None], key: str, fragment: str) -> None:
    found = with_change(change)
    assert key in found, found
    assert fragment in found[key]


@pytest.mark.parametrize("key", ["api_key", "api_key_env", "headers", "token", "password"])
@pytest.mark.parametrize("mode", ["managed", "external"])
def test_credentialed_judges_are_rejected(key: str, mode: str) -> None:
    def change(d: dict[str, Any]) -> None:
        if mode == "external":
            d["judges"]["general"] = external_judge()
        d["judges"]["general"][key] = "secret"

    found = with_change(change)
    assert "credentialed judges are not supported" in found[f"judges.general.{key}"]


def test_judge_and_rubric_defaults() -> None:
    # Decided per key (docs/spec.md): context, concurrency and output reservation have defaults,
    # the same as the MILES run file's, so both spellings resolve alike.
    data = three_node()
    for k in ("gpus", "tensor_parallel_size", "chat_template", "max_context_length", "max_concurrent_calls"):
        data["judges"]["general"].pop(k)
    for r in data["rubrics"].values():
        r.pop("max_output_tokens")
        r.pop("temperature")
    assert problems_of(data) == {}
    config = RunConfig.from_spec(resolved_from_dict(data))
    judge, rubric = config.judges["general"], config.rubrics["general-quality"]
    assert (judge.gpus, judge.tensor_parallel_size, judge.chat_template, judge.timeout) == (
        1,
        1,
        "qwen3-no-thinking",
        600,
    )
    assert (judge.max_context_length, judge.max_concurrent_calls) == (40960, 16)
    assert (rubric.max_output_tokens, rubric.temperature) == (2048, 1.0)


def test_external_judge_is_valid_and_takes_no_gpu() -> None:
    data = three_node()
    data["judges"]["general"] = external_judge(timeout=120)
    assert problems_of(data) == {}
    config = RunConfig.from_spec(resolved_from_dict(data))
    judge = config.judges["general"]
    assert (judge.mode, judge.endpoint, judge.timeout, judge.gpus, judge.backend) == (
        "external",
        "http://judge.internal:8000/v1",
        120,
        0,
        None,
    )
    assert config.gpu_judges == ()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cuda_graphs", False),
        ("cuda_graphs", True),
        ("gpus", 1),
        ("tensor_parallel_size", 1),
        ("node_pool", "judge"),
        ("prepared_dir", "/models/q"),
        ("revision", REVISION),
        ("backend", "sglang"),
        ("context_extension", "qwen3-yarn-128k"),
        ("chat_template", "qwen3-no-thinking"),
    ],
)
def test_external_judge_rejects_serving_and_placement_keys(key: str, value: Any) -> None:
    found = with_change(lambda d: d["judges"].update(general=external_judge(**{key: value})))
    assert list(found) == [f"judges.general.{key}"]
    if key == "cuda_graphs":
        assert "even when false" in found["judges.general.cuda_graphs"]
    else:
        assert "not allowed for an external judge" in found[f"judges.general.{key}"]


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://user:pw@judge:8000/v1", "user:password@"),
        ("http://user@judge:8000/v1", "user:password@"),
        ("https://judge/v1?api_key=abc", "query string"),
        ("ftp://judge/v1", "http:// or https://"),
        ("judge:8000", "http:// or https://"),
        ("http://judge:99999999/v1", "not a valid URL"),
        (8000, "URL string"),
    ],
)
def test_external_endpoint_rules(url: Any, fragment: str) -> None:
    found = with_change(lambda d: d["judges"].update(general=external_judge(endpoint=url)))
    assert fragment in found["judges.general.endpoint"]


def test_external_judge_requires_endpoint() -> None:
    judge = external_judge()
    del judge["endpoint"]
    found = with_change(lambda d: d["judges"].update(general=judge))
    assert "is required" in found["judges.general.endpoint"]


def test_timeout_default_and_override() -> None:
    config = RunConfig.from_spec(resolved_from_dict(three_node()))
    assert config.judges["general"].timeout == 600
    resolved = load_spec(EXAMPLES / "three-node.toml", ["judges.general.timeout=300"])
    assert RunConfig.from_spec(resolved).judges["general"].timeout == 300


def test_cuda_graphs_absent_is_none_not_false() -> None:
    config = RunConfig.from_spec(resolved_from_dict(three_node()))
    assert config.judges["general"].cuda_graphs is None
    data = three_node()
    data["judges"]["general"]["cuda_graphs"] = False
    assert RunConfig.from_spec(resolved_from_dict(data)).judges["general"].cuda_graphs is False


# --- context extension -----------------------------------------------------------


def _long_context(**judge: Any) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        d["judges"]["general"].update(context_extension="qwen3-yarn-128k", max_context_length=131072)
        d["judges"]["general"].update(judge)

    return change


def test_context_extension_for_qwen3_32b_is_valid() -> None:
    assert with_change(_long_context()) == {}


@pytest.mark.parametrize(
    ("judge", "key", "fragment"),
    [
        (
            {"model": "Qwen/Qwen3-8B"},
            "judges.general.context_extension",
            'only supported for model "Qwen/Qwen3-32B"',
        ),
        ({"max_context_length": 131073}, "judges.general.max_context_length", "at most 131072"),
        ({"context_extension": "yarn-256k"}, "judges.general.context_extension", '"qwen3-yarn-128k"'),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            "judges.general.rope_scaling",
            "scale RoPE twice",
        ),
        ({"json_model_override_args": "{}"}, "judges.general.json_model_override_args", "scale RoPE twice"),
    ],
)
def test_context_extension_rules(judge: dict[str, Any], key: str, fragment: str) -> None:
    found = with_change(_long_context(**judge))
    assert fragment in found[key]


def test_rope_scaling_without_extension_points_to_context_extension() -> None:
    found = with_change(_set("judges", "general", "rope_scaling", value={"factor": 2.0}))
    assert "context_extension" in found["judges.general.rope_scaling"]


# --- reference backend -------------------------------------------------------------


def test_reference_judge_needs_no_weights_but_counts_gpus() -> None:
    data = load_spec(EXAMPLES / "demo.toml").data
    assert validate(data) == []
    config = RunConfig.from_spec(resolved_from_dict(data))
    judge = config.judges["general"]
    assert (judge.backend, judge.revision, judge.prepared_dir, judge.gpus) == ("reference", None, None, 1)
    assert config.gpu_judges == (judge,)


def test_reference_judge_checks_optional_weights_when_given() -> None:
    data = load_spec(EXAMPLES / "demo.toml").data
    data["judges"]["general"].update(revision="main", prepared_dir="rel/path")
    found = problems_of(data)
    assert "40 lowercase hex" in found["judges.general.revision"]
    assert "absolute" in found["judges.general.prepared_dir"]


# --- rubrics and bindings -------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key", "fragment"),
    [
        (
            _set("rubrics", "general-quality", "file", value="r.txt"),
            "rubrics.general-quality.file",
            "is named by template_file",
        ),
        (
            _set("rubrics", "general-quality", "path", value="r.txt"),
            "rubrics.general-quality.path",
            "is named by template_file",
        ),
        (
            _set("rubrics", "general-quality", "profile", value="custom"),
            "rubrics.general-quality.profile",
            '"general-quality" or "general-quality-ref"',
        ),
        (
            _set("rubrics", "general-quality", "max_output_tokens", value=0),
            "rubrics.general-quality.max_output_tokens",
            "positive integer",
        ),
        (
            _set("rubrics", "general-quality", "temperature", value=3),
            "rubrics.general-quality.temperature",
            "from 0 to 2",
        ),
        (
            _set("rubrics", "general-quality", "max_output_tokens", value=32768),
            "rubrics.general-quality.max_output_tokens",
            "smaller than judges.general.max_context_length (32768)",
        ),
        (
            _set("judging", "bindings", "general-quality", "judge", value="missing"),
            "judging.bindings.general-quality.judge",
            "names no [judges.missing]",
        ),
        (
            _set("judging", "bindings", "general-quality", "rubric", value="missing"),
            "judging.bindings.general-quality.rubric",
            "names no [rubrics.missing]",
        ),
        (
            _drop("judging", "bindings", "general-quality", "rubric"),
            "judging.bindings.general-quality.rubric",
            "is required",
        ),
        (
            _set("judging", "bindings", "General", value={"judge": "general", "rubric": "general-quality"}),
            "judging.bindings.General",
            "[a-z][a-z0-9_-]*",
        ),
        (
            _set(
                "judging",
                "bindings",
                "general quality",
                value={"judge": "general", "rubric": "general-quality"},
            ),
            'judging.bindings."general quality"',
            "[a-z][a-z0-9_-]*",
        ),
        (
            _set("judging", "bindings", "general-quality", value="general"),
            "judging.bindings.general-quality",
            "must be a table",
        ),
        (
            _set("rubrics", "Quality", value={"profile": "general-quality", "max_output_tokens": 10}),
            "rubrics.Quality",
            "[a-z][a-z0-9_-]*",
        ),
    ],
)
def test_rubric_and_binding_rules(change: Callable[[dict[str, Any]], None], key: str, fragment: str) -> None:
    found = with_change(change)
    assert key in found, found
    assert fragment in found[key]


def test_output_reservation_checked_per_binding() -> None:
    # The same rubric is fine against a big judge and too big for a small one.
    def change(d: dict[str, Any]) -> None:
        d["judges"]["small"] = external_judge(max_context_length=1024)
        d["judging"]["bindings"]["small-quality"] = {"judge": "small", "rubric": "general-quality"}

    found = with_change(change)
    assert list(found) == ["rubrics.general-quality.max_output_tokens"]
    assert "judges.small.max_context_length (1024)" in found["rubrics.general-quality.max_output_tokens"]
    assert "judging.bindings.small-quality" in found["rubrics.general-quality.max_output_tokens"]


def test_two_rubrics_share_one_judge_and_unbound_judges_take_no_gpus() -> None:
    data = three_node()
    data["judges"]["spare"] = copy.deepcopy(data["judges"]["general"])
    data["judges"]["spare"].update(gpus=8, tensor_parallel_size=8)
    config = RunConfig.from_spec(resolved_from_dict(data))
    assert [(b.verifier, b.judge, b.rubric) for b in config.bindings] == [
        ("general-quality", "general", "general-quality"),
        ("general-quality_ref", "general", "general-quality-ref"),
    ]
    assert [j.name for j in config.bound_judges] == ["general"]
    assert validate(data) == []


# --- pools ---------------------------------------------------------------------------


def test_pools_must_agree_on_gpus_per_node() -> None:
    def change(d: dict[str, Any]) -> None:
        d["pools"] = {"policy": {"nodes": 3, "gpus_per_node": 8}, "judge": {"nodes": 1, "gpus_per_node": 4}}

    found = with_change(change)
    assert list(found) == ["pools.judge.gpus_per_node"]
    assert "launch.gpus_per_replica is 8" in found["pools.judge.gpus_per_node"]


@pytest.mark.parametrize(
    ("pool", "key", "fragment"),
    [
        ({"gpus_per_node": 8}, "pools.p.nodes", "is required"),
        ({"nodes": 0, "gpus_per_node": 8}, "pools.p.nodes", "positive integer"),
        ({"nodes": 1, "gpus_per_node": 8, "partition": ""}, "pools.p.partition", "non-empty string"),
        ({"nodes": 1, "gpus_per_node": 8, "node": 1}, "pools.p.node", "did you mean pools.p.nodes?"),
    ],
)
def test_pool_rules(pool: dict[str, Any], key: str, fragment: str) -> None:
    found = with_change(lambda d: d.update(pools={"p": pool}))
    assert fragment in found[key]


# --- config ----------------------------------------------------------------------------


def test_config_defaults() -> None:
    data = load_spec(EXAMPLES / "node.toml").data
    data.pop("output")
    config = RunConfig.from_spec(resolved_from_dict(data))
    assert config.coordination == Coordination(
        startup_timeout=1200,
        heartbeat_timeout=120,
        heartbeat_interval=2.0,
        poll_interval=1.0,
        teardown_grace=10.0,
        ack_timeout=60.0,
    )
    assert (config.output_root, config.dir_mode, config.node_gpus, config.backend) == (
        "output",
        0o750,
        8,
        "local",
    )
    assert config.driver.command == ("python", "train.py")
    assert config.driver.placement == "trainer"
    assert config.judges == {} and config.bound_judges == ()
    assert config.fingerprint == resolved_from_dict(data).fingerprint


def test_config_is_immutable() -> None:
    config = RunConfig.from_spec(resolved_from_dict(load_spec(EXAMPLES / "demo.toml").data))
    with pytest.raises(TypeError):
        config.judges["x"] = config.judges["general"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        config.name = "other"  # type: ignore[misc]
    assert config.ray.object_store_memory == 100_000_000 and config.ray.num_cpus == 1


def test_from_spec_raises_with_every_problem() -> None:
    data = three_node()
    data["trainer"]["gpus_per_node"] = 0
    data["judges"]["general"]["timeout"] = "600"
    with pytest.raises(SpecError) as info:
        RunConfig.from_spec(resolved_from_dict(data))
    assert [p.key for p in info.value.problems] == ["trainer.gpus_per_node", "judges.general.timeout"]


# --- robustness: validation never crashes, and a clean spec always plans -------------------

_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 40)
    | st.floats(-1, 200, allow_nan=False)
    | st.sampled_from(["", "x", "general", "q", "managed", "external", "reference", "vllm", "http://h:1/v1"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["a", "general"]), children),
    max_leaves=6,
)
_PATHS = [
    ("name",),
    ("output",),
    ("output", "dir_mode"),
    ("launch",),
    ("launch", "gpus_per_replica"),
    ("launch", "node_gpus"),
    ("launch", "hostnames"),
    ("launch", "coordination"),
    ("launch", "coordination", "heartbeat_timeout"),
    ("launch", "beaker"),
    ("trainer",),
    ("trainer", "nodes"),
    ("trainer", "gpus_per_node"),
    ("inference", "gpus"),
    ("inference", "tensor_parallel_size"),
    ("inference", "placement_mode"),
    ("driver", "command"),
    ("driver", "env"),
    ("driver", "placement"),
    ("judges",),
    ("judges", "general"),
    ("judges", "general", "mode"),
    ("judges", "general", "gpus"),
    ("judges", "general", "tensor_parallel_size"),
    ("judges", "general", "max_context_length"),
    ("judges", "general", "node_pool"),
    ("judges", "general", "backend"),
    ("judges", "general", "endpoint"),
    ("rubrics",),
    ("rubrics", "general-quality", "max_output_tokens"),
    ("judging",),
    ("judging", "bindings"),
    ("judging", "bindings", "general-quality"),
    ("judging", "bindings", "general-quality", "judge"),
    ("pools",),
    ("pools", "a"),
    ("pools", "a", "nodes"),
    ("ray", "resources"),
    ("ray", "extra_args"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PATHS), _VALUES), min_size=1, max_size=4))
def test_validate_never_crashes_and_clean_specs_plan(changes: list[tuple[tuple[str, ...], Any]]) -> None:
    data = three_node()
    for path, value in changes:
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    problems = validate(data)  # must not raise, whatever the types
    if not problems:
        plan(RunConfig.from_spec(resolved_from_dict(data)))


# --- seed rules across sections (issue 51) ---------------------------------------------------------


def _with_cpu_pool(d: dict[str, Any]) -> None:
    d["pools"] = {"policy": {"nodes": 3, "gpus_per_node": 8}, "readers": {"nodes": 1, "gpus_per_node": 0}}


def test_ray_resources_on_a_cpu_pool_without_node_pools_are_refused() -> None:
    # Seed 001: every pool named under resources is also in node_pools; absent, a CPU pool never joins Ray.
    found = with_change(lambda d: (_with_cpu_pool(d), _set("ray", "resources", value={"readers": {"x": 1}})(d)))
    assert "is a CPU pool" in found["ray.resources.readers"] and "ray.node_pools" in found["ray.resources.readers"]
    # A GPU pool joins without node_pools; a CPU pool named in node_pools joins too.
    assert with_change(lambda d: (_with_cpu_pool(d), _set("ray", "resources", value={"policy": {"x": 1}})(d))) == {}
    spanned = with_change(
        lambda d: (
            _with_cpu_pool(d),
            _set("ray", "resources", value={"readers": {"x": 1}})(d),
            _set("ray", "node_pools", value=["policy", "readers"])(d),
        )
    )
    assert spanned == {}


LOG_EVIDENCE = {"log_step_pattern": r"^step \d+ loss (?P<loss>\S+)$", "refresh": "none"}


def test_refresh_none_is_refused_where_rollout_has_gpus_of_its_own() -> None:
    # Seed 000: a successful run shows a policy refresh; only a trainer whose rollouts use its own weights has none.
    found = with_change(_set("driver", "evidence", value=dict(LOG_EVIDENCE)))
    assert "19 rollout GPU(s) of their own" in found["driver.evidence.refresh"], found
    colocated = with_change(
        lambda d: (
            _set("driver", "evidence", value=dict(LOG_EVIDENCE))(d),
            _set("inference", "placement_mode", value="colocated")(d),
            _set("inference", "gpus", value=4)(d),
        )
    )
    assert "driver.evidence.refresh" not in colocated, colocated
    no_rollout = with_change(
        lambda d: (_set("driver", "evidence", value=dict(LOG_EVIDENCE))(d), _set("inference", "gpus", value=0)(d))
    )
    assert "driver.evidence.refresh" not in no_rollout, no_rollout
