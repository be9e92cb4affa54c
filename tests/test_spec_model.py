"""The resolved spec model: bounds, credentials, agent-owned flags, name lengths, timeouts,
declaration-ordered pools, driver placement, and hostile input that must never hang or crash."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec, resolved_from_dict, spec_record
from launch.spec.plan import plan
from launch.spec.sections import MAX_NAME
from launch.spec.validate import validate

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
THREE_NODE = load_spec(ROOT / "examples" / "three-node.toml").data


def three_node() -> dict[str, Any]:
    return copy.deepcopy(dict(THREE_NODE))


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    return {p.key: p.message for p in validate(data)}


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    # The timeout is a hang guard, not a speed target (speed is make bench's).
    return subprocess.run([str(BIN / "gym-launch"), *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


# --- bounds: absurd sizes are refused at once, never planned ------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.nodes=100000000", "trainer.nodes"),
        ("inference.gpus=1000000000000", "inference.gpus"),
        ("launch.node_gpus=2000000000", "launch.node_gpus"),
        ("judges.general.max_concurrent_calls=99999999", "judges.general.max_concurrent_calls"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "validate"])
def test_absurd_sizes_are_refused_naming_the_key(command: str, override: str, key: str) -> None:
    out = cli(command, "examples/three-node.toml", "--set", override)
    assert out.returncode == 2, out.stdout
    assert "Traceback" not in out.stderr
    assert any(line.startswith(f"{key}:") for line in out.stderr.splitlines()), out.stderr


def test_a_request_needing_too_many_nodes_is_refused_before_packing() -> None:
    data = three_node()
    data["launch"].update(gpus_per_replica=1, node_gpus=1, backend="local")
    data["trainer"]["gpus_per_node"] = 1
    data["inference"]["gpus"] = 200_000  # within the key's own bound, but 200000 one-GPU nodes
    data["judges"]["general"].pop("context_extension", None)
    found = problems_of(data)
    assert "at most 4096" in found["inference.gpus"], found


# --- credentials never enter a spec -------------------------------------------------------------


def test_credential_names_and_values_in_env_are_refused() -> None:
    data = three_node()
    data["driver"]["env"] = {
        "OPENAI_API_KEY": "sk-live-123",
        "HF_TOKEN": "hf_abc",
        "INNOCENT": "sk-live-456",
        "TOKENIZERS_PARALLELISM": "false",
        "FROM_THE_JOB": "runtime:HF_TOKEN",
        "WANDB_API_KEY": "runtime:WANDB_API_KEY",
    }
    found = problems_of(data)
    assert set(found) == {"driver.env.OPENAI_API_KEY", "driver.env.HF_TOKEN", "driver.env.INNOCENT"}
    assert all("scheduler's secrets" in msg for msg in found.values())


def test_credential_override_is_refused_and_never_written(tmp_path: Path) -> None:
    out = cli(
        "local",
        "examples/demo.toml",
        "--output-root",
        str(tmp_path),
        "--set",
        'driver.env={OPENAI_API_KEY="sk-live-123",HF_TOKEN="hf_abc"}',
    )
    assert out.returncode == 2 and "driver.env.OPENAI_API_KEY" in out.stderr
    assert "sk-live-123" not in out.stderr + out.stdout
    assert not any(tmp_path.rglob("spec.json"))


# --- flags the agent owns ------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--port=6379", "--node-ip-address=10.9.9.9", "--temp-dir=/x", "--num-gpus=8"])
def test_ray_extra_args_may_not_set_agent_owned_flags(flag: str) -> None:
    data = three_node()
    data["ray"] = {"extra_args": ["--log-style=record", flag]}
    found = problems_of(data)
    assert list(found) == ["ray.extra_args"] and flag in found["ray.extra_args"]


def test_ray_extra_args_may_pass_other_flags() -> None:
    data = three_node()
    data["ray"] = {"extra_args": ["--log-style=record", "--redis-shard-ports=6380"]}
    assert problems_of(data) == {}


# --- names fit every derived file name -----------------------------------------------------------


def test_long_judge_names_are_refused_at_validation() -> None:
    data = three_node()
    long = "j" * 300
    data["judges"] = {long: data["judges"]["general"]}
    for b in data["judging"]["bindings"].values():
        b["judge"] = long
    found = problems_of(data)
    assert f"at most {MAX_NAME} characters" in found[f"judges.{long}"]
    ok = "j" * MAX_NAME
    data["judges"] = {ok: data["judges"][long]}
    for b in data["judging"]["bindings"].values():
        b["judge"] = ok
    assert problems_of(data) == {}
    assert len(f"judge-{ok}-4095.log".encode()) < 255


# --- timeouts have sane bounds ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coordination", "key", "fragment"),
    [
        ({"startup_timeout": 1e-9}, "startup_timeout", "at least 1 seconds"),
        ({"heartbeat_timeout": 1e300}, "heartbeat_timeout", "at most 86400 seconds"),
        ({"heartbeat_timeout": 5, "heartbeat_interval": 2}, "heartbeat_interval", "heartbeat_timeout / 3"),
        ({"poll_interval": 0}, "poll_interval", "positive number"),
    ],
)
def test_timeouts_are_bounded(coordination: dict[str, float], key: str, fragment: str) -> None:
    data = three_node()
    data["launch"]["coordination"] = coordination
    found = problems_of(data)
    assert fragment in found[f"launch.coordination.{key}"], found


# --- pools in declaration order, kept through spec.json -------------------------------------------


def pooled(order: list[str]) -> dict[str, Any]:
    data = three_node()
    data["judges"]["general"]["node_pool"] = "aa"
    sizes = {"zz": 3, "aa": 1}
    data["pools"] = {name: {"nodes": sizes[name], "gpus_per_node": 8} for name in order}
    return data


def test_pools_take_node_ranges_in_declaration_order() -> None:
    zz_first = plan(RunConfig.from_spec(resolved_from_dict(pooled(["zz", "aa"]))))
    aa_first = plan(RunConfig.from_spec(resolved_from_dict(pooled(["aa", "zz"]))))
    assert [n.pool for n in zz_first.nodes] == ["zz", "zz", "zz", "aa"]
    assert [n.pool for n in aa_first.nodes] == ["aa", "zz", "zz", "zz"]
    # One fingerprint, one plan: the order is part of the run's identity.
    assert resolved_from_dict(pooled(["zz", "aa"])).fingerprint != resolved_from_dict(pooled(["aa", "zz"])).fingerprint


def test_spec_json_keeps_the_pool_order(tmp_path: Path) -> None:
    from schemas import RunDir, Writer, names

    resolved = resolved_from_dict(pooled(["zz", "aa"]))
    run = RunDir.create(tmp_path, "order-test", mode=0o750)
    run.write_artifact(names.SPEC, Writer(resolved.fingerprint, 0, "i"), spec_record(resolved, "x.toml"))
    again = load_spec(run.path / names.SPEC)
    assert again.fingerprint == resolved.fingerprint
    assert list(again.data["pools"]) == ["zz", "aa"]


# --- driver placement ------------------------------------------------------------------------------


def test_inference_placement_has_no_effect_without_an_inference_node() -> None:
    # Two trainer nodes of 4; the 4 rollout GPUs fit the last trainer node's spare GPUs.
    data = three_node()
    data["trainer"] = {"nodes": 2, "gpus_per_node": 4}
    data["inference"]["gpus"] = 4
    data.pop("judging")
    data["driver"]["placement"] = "inference"
    p = plan(RunConfig.from_spec(resolved_from_dict(data)))
    assert [(n.trainer_gpus, n.rollout_gpus) for n in p.nodes] == [(4, 0), (4, 4)]
    assert p.driver_node == 0


# --- hostile specs: no traceback, no hang ------------------------------------------------------------

KEYS = st.sampled_from(
    [
        "name",
        "launch",
        "trainer",
        "inference",
        "driver",
        "judges",
        "rubrics",
        "judging",
        "pools",
        "ray",
        "data",
        "gpus",
        "nodes",
        "gpus_per_node",
        "gpus_per_replica",
        "node_gpus",
        "tensor_parallel_size",
        "bindings",
        "mode",
        "command",
        "env",
        "coordination",
        "startup_timeout",
        "general",
        "x",
        "node_pool",
        "resources",
    ]
)
SCALARS = st.one_of(
    st.integers(min_value=-(10**15), max_value=10**15),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=20),
    st.sampled_from(["managed", "external", "reference", "colocated", "inference", "http://j:1/v1", "/abs"]),
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5), max_leaves=30
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=8))
def test_random_specs_never_raise(data: dict[str, Any]) -> None:
    problems = validate(data)
    if not problems:
        plan(RunConfig.from_spec(resolved_from_dict(data)))


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "launch": st.fixed_dictionaries(
                {"gpus_per_replica": st.integers(-5, 10**12), "node_gpus": st.integers(-5, 10**12)}
            ),
            "trainer": st.fixed_dictionaries(
                {"nodes": st.integers(-5, 10**12), "gpus_per_node": st.integers(-5, 10**12)}
            ),
            "inference": st.fixed_dictionaries(
                {"gpus": st.integers(-5, 10**15), "tensor_parallel_size": st.integers(-5, 10**6)}
            ),
            "driver": st.just({"command": "true"}),
        }
    )
)
def test_random_sizes_plan_or_are_refused(data: dict[str, Any]) -> None:
    try:
        config = RunConfig.from_spec(resolved_from_dict(data))
    except SpecError:
        return
    problems = validate(data)
    if not problems:
        assert len(plan(config).nodes) <= 4096


# --- rules across keys read the resolved model: its defaults, never their own copy ----------------


def test_a_rule_across_keys_reads_the_models_defaults() -> None:
    from launch.spec.sections import JudgeConfig, RubricConfig

    context = JudgeConfig.__dataclass_fields__["max_context_length"].default
    reserve = RubricConfig.__dataclass_fields__["max_output_tokens"].default
    data = three_node()
    data["judges"]["general"].pop("max_context_length")  # the judge's default context
    data["rubrics"]["general-quality"]["max_output_tokens"] = context
    found = problems_of(data)
    assert (
        f"must be smaller than judges.general.max_context_length ({context})"
        in found["rubrics.general-quality.max_output_tokens"]
    )
    data = three_node()
    data["judges"]["general"]["max_context_length"] = reserve  # against the rubric's default reservation
    for rubric in data["rubrics"].values():
        rubric.pop("max_output_tokens")
    assert f"({reserve}) must be smaller" in problems_of(data)["rubrics.general-quality.max_output_tokens"]


def test_a_rule_across_tables_waits_for_the_tables_own_problems() -> None:
    # launch.hostnames' duplicate is reported once the launch table's own type error is fixed.
    data = three_node()
    data["launch"]["hostnames"] = ["a", "a"]
    data["launch"]["gpus_per_replica"] = "8"
    assert set(problems_of(data)) == {"launch.gpus_per_replica"}
    data["launch"]["gpus_per_replica"] = 8
    assert set(problems_of(data)) == {"launch.hostnames"}


def test_rubric_reply_format_scale_and_extraction_keys() -> None:
    data = three_node()
    name = next(iter(data["rubrics"]))
    rubric = RunConfig.from_spec(resolved_from_dict(data)).rubrics[name]
    assert (rubric.reply_format, rubric.score_scale, rubric.extract_answer) == ("score_line", (0, 10), True)
    data["rubrics"][name].update(reply_format="json", score_scale=[1, 10], extract_answer=False)
    rubric = RunConfig.from_spec(resolved_from_dict(data)).rubrics[name]
    assert (rubric.reply_format, rubric.score_scale, rubric.extract_answer) == ("json", (1, 10), False)
    data["rubrics"][name].update(reply_format="xml", score_scale=[10, 1], extract_answer="yes")
    problems = problems_of(data)
    assert "score_line" in problems[f"rubrics.{name}.reply_format"]
    assert "0 <= MIN < MAX <= 100" in problems[f"rubrics.{name}.score_scale"]
    assert "true or false" in problems[f"rubrics.{name}.extract_answer"]


# --- credentials never enter a command line (issue 47) ----------------------------------------

# (arguments, index of the credential, the secret it carries): each kind the one rule knows.
ARGV_KINDS = [
    (["--api-key", "live-123-abc"], 1, "live-123-abc"),
    (["--hub_token=s3cr3t-value"], 0, "s3cr3t-value"),
    (["HF_TOKEN=abc123xyz"], 0, "abc123xyz"),
    (["hf_abcdefghijklmnop"], 0, "hf_abcdefghijklmnop"),
    (["--password", "hunter2hunter2"], 1, "hunter2hunter2"),
    (["--wandb-secret=hunter2"], 0, "hunter2"),
]


def _with_argv(field: str, args: list[str]) -> tuple[dict[str, Any], str, int]:
    """The three-node example with `args` after an innocent first argument of one argv field."""
    data = three_node()
    if field == "driver.command":
        data["driver"]["command"] = ["python", *args]
    elif field == "driver.command (shell)":
        data["driver"]["command"] = "python " + " ".join(args)
        return data, "driver.command", 1
    else:
        data["ray"] = {"extra_args": ["--log-style=record", *args]}
    return data, field, 1


@pytest.mark.parametrize("field", ["driver.command", "driver.command (shell)", "ray.extra_args"])
@pytest.mark.parametrize(("args", "index", "secret"), ARGV_KINDS)
def test_a_literal_credential_in_any_argv_is_refused_by_index(
    field: str, args: list[str], index: int, secret: str
) -> None:
    data, key, offset = _with_argv(field, args)
    found = problems_of(data)
    assert set(found) == {f"{key}.{index + offset}"}, found
    message = found[f"{key}.{index + offset}"]
    assert "${runtime:NAME}" in message and secret not in message


@pytest.mark.parametrize("field", ["driver.command", "ray.extra_args"])
def test_references_and_innocent_flags_pass(field: str) -> None:
    args = [
        "--api-key",
        "${runtime:OPENAI_API_KEY}",
        "--hub_token=${runtime:HF_TOKEN}",
        "HF_TOKEN=${runtime:HF_TOKEN}",
        "--max-tokens",
        "512",
        "--tokenizer=/models/tok",
        "--password",
        "--next-flag",
    ]
    data, _, _ = _with_argv(field, args)
    assert problems_of(data) == {}


def test_validate_exits_2_naming_the_index_never_the_value() -> None:
    out = cli(
        "validate",
        "examples/three-node.toml",
        "--set",
        'driver.command=["python", "train.py", "--api-key", "sk-live-123", "--password=hunter2", "HF_TOKEN=hf_abc"]',
    )
    assert out.returncode == 2, out.stdout
    assert "Traceback" not in out.stderr
    for i in (3, 4, 5):
        assert f"driver.command.{i}:" in out.stderr, out.stderr
    for secret in ("sk-live-123", "hunter2", "hf_abc"):
        assert secret not in out.stderr + out.stdout
