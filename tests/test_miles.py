"""MILES run files (the open-instruct trainer's own format) plan, validate, run and render unchanged.

The fixtures under tests/data/miles are written by us in that format, with our own values."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec, resolved_from_dict
from launch.spec.plan import plan
from launch.spec.validate import validate

ROOT = Path(__file__).resolve().parent.parent
MILES = ROOT / "tests" / "data" / "miles"
BIN = Path(sys.executable).parent


def config_of(name: str, *overrides: str) -> RunConfig:
    return RunConfig.from_spec(load_spec(MILES / name, overrides))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "gym-launch"), *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(
    ("name", "replicas", "allocated", "unused"),
    [("node.toml", 1, 8, 0), ("three-node.toml", 3, 24, 0), ("packed-two-node.toml", 2, 16, 0)],
)
def test_seed_shapes_plan_as_the_seed_table_says(name: str, replicas: int, allocated: int, unused: int) -> None:
    config = config_of(name)
    p = plan(config)
    assert config.source_format == "miles"
    assert (p.replicas, p.allocated_gpus, p.unused_gpus) == (replicas, allocated, unused)


def test_plan_says_which_format_it_read() -> None:
    out = cli("plan", "tests/data/miles/three-node.toml")
    assert out.returncode == 0, out.stderr
    assert "read as a MILES run file" in out.stdout and "optimizer" in out.stdout
    ours = cli("plan", "examples/three-node.toml")
    assert "read as a gym-agent run spec" in ours.stdout
    doc = json.loads(cli("plan", "tests/data/miles/node.toml", "--json").stdout)
    assert doc["format"] == "miles"


def test_both_spellings_resolve_to_the_same_model() -> None:
    miles = config_of("three-node.toml")
    ours: dict[str, Any] = {
        "name": "miles-three-node",
        "output": {"root": "/weka/runs/miles-three-node"},
        "launch": {
            "gpus_per_replica": 8,
            "env": {"NCCL_SOCKET_IFNAME": "ib"},
            "secrets": {"WANDB_API_KEY": "team-wandb-key"},
            "weka_mounts": [{"weka": "training", "mount_path": "/weka"}],
            "coordination": {"startup_timeout": 1800, "heartbeat_timeout": 120},
            "beaker": {
                "workspace": "team/rl",
                "budget": "team/compute",
                "cluster": "gpu-cluster-a",
                "priority": "high",
                "min_runtime": "1h",
                "timeout": "8h",
                "auto_resume": False,
            },
        },
        "trainer": {"nodes": 1, "gpus_per_node": 4},
        "inference": {"gpus": 19, "tensor_parallel_size": 1, "placement_mode": "disaggregated"},
        "driver": {"command": miles.driver.command, "evidence": {"preset": "miles"}},  # the MILES default
        "judges": {"general": tomllib.loads((MILES / "three-node.toml").read_text())["judges"]["general"]},
        "rubrics": {
            "quality": {"profile": "open-instruct/general-quality", "max_output_tokens": 2048, "temperature": 1.0},
            "reference_quality": {
                "profile": "open-instruct/general-quality_ref",
                "max_output_tokens": 2048,
                "temperature": 1.0,
            },
        },
        "judging": {
            "bindings": {
                "general-quality": {"judge": "general", "rubric": "quality"},
                "general-quality_ref": {"judge": "general", "rubric": "reference_quality"},
            }
        },
        "data": {"train": "data/train.jsonl", "eval": ["data/eval.jsonl"]},
    }
    gym = RunConfig.from_spec(resolved_from_dict(ours, str(MILES)))
    for field in ("name", "output", "launch", "trainer", "inference", "driver", "judges", "rubrics", "judging", "data"):
        assert getattr(gym, field) == getattr(miles, field), field
    assert plan(gym) == plan(miles)
    assert gym.data_paths() == miles.data_paths()
    # The fingerprint is the file as spelled: the trainer's sections are part of it.
    assert gym.fingerprint != miles.fingerprint


def test_trainer_sections_are_part_of_the_fingerprint() -> None:
    base = load_spec(MILES / "three-node.toml")
    changed = load_spec(MILES / "three-node.toml", ["optimizer.learning_rate=2e-6"])
    assert base.fingerprint != changed.fingerprint
    assert plan(RunConfig.from_spec(base)) == plan(RunConfig.from_spec(changed))


def test_the_default_driver_is_the_trainer_on_the_original_file() -> None:
    config = config_of("three-node.toml", "optimizer.learning_rate=2e-6", "driver.placement=trainer")
    assert config.driver.command == (
        'exec python -m open_instruct.miles train "$GYM_RUN_FILE" --set optimizer.learning_rate=2e-6'
    )


def test_a_judged_file_gives_the_right_managed_judge_argv() -> None:
    out = cli("judge-command", "tests/data/miles/three-node.toml", "general")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    argv = doc["argv"]

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--model-path") == "/weka/prepared/models/Qwen3-32B"
    assert value("--served-model-name") == "Qwen/Qwen3-32B"
    assert value("--tp-size") == "1" and value("--context-length") == "40960"
    assert value("--max-running-requests") == "16"
    assert value("--chat-template").endswith("qwen3-no-thinking.jinja")
    assert doc["node"] == 2 and doc["env"]["CUDA_VISIBLE_DEVICES"] == "7"
    packed = json.loads(cli("judge-command", "tests/data/miles/packed-two-node.toml", "general").stdout)
    assert "--json-model-override-args" in packed["argv"]  # context_extension, from MILES spelling


@pytest.mark.parametrize(
    ("override", "key", "message"),
    [
        ("trainer.trainer_num_node=2", "trainer.trainer_num_node", "did you mean trainer.trainer_num_nodes?"),
        ("launch.gpus_per_replca=8", "launch.gpus_per_replca", "did you mean launch.gpus_per_replica?"),
        ("inference.rollout_tensor_paralel_size=2", "inference.rollout_tensor_paralel_size", "did you mean"),
        ("rubrics.quality.max_respons_tokens=10", "rubrics.quality.max_respons_tokens", "max_response_tokens"),
        ("judges.general.timout=30", "judges.general.timout", "did you mean judges.general.timeout?"),
        ("trainning.num_rollouts=3", "trainning", "did you mean training?"),
        ("mystery.x=1", "mystery", "unknown section"),
    ],
)
def test_typos_in_owned_keys_and_unknown_sections_fail(override: str, key: str, message: str) -> None:
    data = load_spec(MILES / "three-node.toml", [override]).data
    found = {p.key: p.message for p in validate(data)}
    assert key in found and message in found[key], found


def test_owned_values_are_checked_and_reported_in_miles_spelling() -> None:
    data = load_spec(MILES / "three-node.toml", ["trainer.gpus=16", "rubrics.quality.max_response_tokens=0"]).data
    found = {p.key: p.message for p in validate(data)}
    assert "rubrics.quality.max_response_tokens" in found
    assert "positive integer" in found["rubrics.quality.max_response_tokens"]
    only_size = load_spec(MILES / "three-node.toml", ["trainer.gpus=16"]).data
    sizes = {p.key: p.message for p in validate(only_size)}
    assert "trainer.gpus" in sizes and "larger than a node" in sizes["trainer.gpus"], sizes


def test_trainer_keys_in_shared_sections_pass() -> None:
    data = load_spec(MILES / "three-node.toml", ["trainer.packing_max_tokens=4096", "inference.radix_cache=true"]).data
    assert validate(data) == []


def test_every_open_instruct_profile_is_accepted_and_an_unknown_one_named() -> None:
    verifier = load_spec(
        MILES / "three-node.toml", ['rubrics.quality.profile="open-instruct/general-web_instruct_general_verifier"']
    ).data
    assert not validate(verifier)
    data = load_spec(MILES / "three-node.toml", ['rubrics.quality.profile="open-instruct/general-qualty"']).data
    found = {p.key: p.message for p in validate(data)}
    assert "rubrics.quality.profile" in found and "open-instruct/general-quality" in found["rubrics.quality.profile"]


def test_partial_node_multi_node_file_is_refused_naming_the_key() -> None:
    with pytest.raises(SpecError) as err:
        plan(config_of("partial-node.toml"))
    assert [p.key for p in err.value.problems] == ["launch.gpus_per_replica"]
    out = cli("validate", "tests/data/miles/partial-node.toml")
    assert out.returncode == 2 and "launch.gpus_per_replica" in out.stderr and "whole nodes" in out.stderr


def test_placement_mode_follows_the_miles_rule_when_absent() -> None:
    assert config_of("packed-two-node.toml").inference.placement_mode == "disaggregated"  # fully_async
    colocated = config_of("node.toml", "async.fully_async=false", 'inference.placement_mode="colocated"')
    assert colocated.inference.placement_mode == "colocated"


def test_a_miles_file_renders_for_slurm_unchanged(tmp_path: Path) -> None:
    out = cli(
        "render",
        "tests/data/miles/three-node.toml",
        "--backend",
        "slurm",
        "--uuid",
        "miles-u",
        "--output-root",
        str(tmp_path),
        "-o",
        str(tmp_path / "job.sbatch"),
    )
    assert out.returncode == 0, out.stderr
    script = (tmp_path / "job.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], capture_output=True).returncode == 0
    assert "#SBATCH --nodes=3" in script and "#SBATCH --gpus-per-node=8" in script
    assert "export NCCL_SOCKET_IFNAME=ib" in script  # [launch.env] of the MILES file
    assert f"--config {MILES / 'three-node.toml'}" in script  # every node loads the file itself, unedited


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ('miles.extra_args=["--lr", "1e-6", "--hub_token", "abc123secret"]', "miles.extra_args.3"),
        ('miles.extra_args=["--wandb-key=abc123secret"]', "miles.extra_args.0"),
        ('runtime.launcher_args=["HF_TOKEN=abc123secret"]', "runtime.launcher_args.0"),
        ('tracking.wandb_entity="hf_abc123secret"', "tracking.wandb_entity"),
    ],
)
def test_a_credential_in_the_run_files_arguments_is_refused_by_index(override: str, key: str) -> None:
    out = cli("validate", "tests/data/miles/three-node.toml", "--set", override)
    assert out.returncode == 2, out.stdout
    assert f"{key}: looks like a credential" in out.stderr, out.stderr
    assert "abc123secret" not in out.stderr + out.stdout and "Traceback" not in out.stderr


def test_innocent_trainer_arguments_pass() -> None:
    data = load_spec(
        MILES / "three-node.toml", ['miles.extra_args=["--max-tokens", "512", "--tokenizer=/models/tok"]']
    ).data
    assert not any(p.key.startswith("miles.") for p in validate(data))
