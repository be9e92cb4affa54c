"""SGLang argv for every seed case, checked against the recorded 0.5.23 flag list always and
against the real SGLang parser when an interpreter with sglang is available (this one, or the
one named by GYM_SGLANG_PYTHON); skipped otherwise."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import resolved_from_dict
from launch.spec.sections import JudgeConfig
from launch.spec.sglang_argv import (
    MEM_FRACTION_STATIC,
    SGLANG_VERSION,
    JudgeCommandError,
    argv_flags,
    bound_ports,
    chat_template_path,
    judge_command,
    recorded_flags,
    reference_command,
    sglang_command,
)

BASE: dict[str, Any] = {
    "mode": "managed",
    "model": "Qwen/Qwen3-32B",
    "revision": "0123456789abcdef0123456789abcdef01234567",
    "prepared_dir": "/prepared/qwen3-32b",
    "gpus": 1,
    "tensor_parallel_size": 1,
    "chat_template": "qwen3-no-thinking",
    "max_context_length": 32768,
    "max_concurrent_calls": 32,
    "timeout": 600,
}

SEED_CASES: dict[str, dict[str, Any]] = {
    "eager-default": dict(BASE),
    "cuda-graphs-64": {**BASE, "cuda_graphs": True, "max_concurrent_calls": 64},
    "explicit-eager": {**BASE, "cuda_graphs": False},
    "yarn-128k": {
        **BASE,
        "cuda_graphs": True,
        "max_concurrent_calls": 64,
        "context_extension": "qwen3-yarn-128k",
        "max_context_length": 131072,
    },
    "tp2": {**BASE, "gpus": 2, "tensor_parallel_size": 2},
}

YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}


def judge_config(table: dict[str, Any], name: str = "general") -> JudgeConfig:
    """The resolved model of one judge table (the argv builder reads nothing else)."""
    data = {
        "trainer": {"gpus_per_node": 1},
        "inference": {"gpus": 0},
        "driver": {"command": "true"},
        "judges": {name: table},
    }
    return RunConfig.from_spec(resolved_from_dict(data)).judges[name]


def build(case: str) -> tuple[str, ...]:
    return sglang_command(judge_config(SEED_CASES[case]), host="127.0.0.1", port=30000, python="python").argv


def value(argv: tuple[str, ...], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("case", sorted(SEED_CASES))
def test_common_shape(case: str) -> None:
    judge = SEED_CASES[case]
    command = sglang_command(judge_config(judge), host="10.0.0.5", port=31000, python="python")
    argv = command.argv
    assert argv[:3] == ("python", "-m", "sglang.launch_server")
    assert value(argv, "--model-path") == judge["prepared_dir"]
    assert value(argv, "--served-model-name") == "Qwen/Qwen3-32B"
    assert value(argv, "--host") == "10.0.0.5"
    assert value(argv, "--port") == "31000"
    assert value(argv, "--nccl-port") == "31001"  # never SGLang's own random pick: see bound_ports
    assert value(argv, "--tp-size") == str(judge["tensor_parallel_size"])
    assert value(argv, "--context-length") == str(judge["max_context_length"])
    assert value(argv, "--max-running-requests") == str(judge["max_concurrent_calls"])
    assert value(argv, "--mem-fraction-static") == MEM_FRACTION_STATIC == "0.85"
    assert Path(value(argv, "--chat-template")).is_file()
    assert dict(command.env) == {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"}
    assert "CUDA_VISIBLE_DEVICES" not in command.env  # the agent adds the judge's own devices
    assert "--disable-cuda-graph" not in argv  # deprecated in the pinned release


@pytest.mark.parametrize("case", sorted(SEED_CASES))
def test_every_flag_is_in_the_recorded_release(case: str) -> None:
    known = recorded_flags()
    unknown = [flag for flag in argv_flags(build(case)) if flag not in known]
    assert not unknown, f"flags not in SGLang {SGLANG_VERSION}: {unknown}"


def test_recorded_list_knows_the_removed_flag() -> None:
    known = recorded_flags()
    assert "--cuda-graph-max-bs" not in known  # removed in 0.5.20: argparse calls it ambiguous
    assert {
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-backend-prefill",
        "--json-model-override-args",
    } <= known


def test_eager_by_default() -> None:
    argv = build("eager-default")
    assert value(argv, "--cuda-graph-backend-decode") == "disabled"
    assert value(argv, "--cuda-graph-backend-prefill") == "disabled"
    assert "--cuda-graph-max-bs-decode" not in argv


def test_explicit_false_is_eager_with_the_same_argv() -> None:
    assert build("explicit-eager") == build("eager-default")


def test_cuda_graphs_bound_decode_capture_by_concurrency() -> None:
    argv = build("cuda-graphs-64")
    assert value(argv, "--cuda-graph-max-bs-decode") == "64"
    assert value(argv, "--max-running-requests") == "64"
    # Prefill keeps SGLang's default backend and capture sizes: no prefill or decode backend flags.
    assert not [flag for flag in argv if flag.startswith("--cuda-graph-backend")]
    assert "--cuda-graph-max-bs-prefill" not in argv


def test_yarn_override_is_factor_four_from_32k() -> None:
    argv = build("yarn-128k")
    assert value(argv, "--context-length") == "131072"
    assert json.loads(value(argv, "--json-model-override-args")) == YARN
    assert value(argv, "--model-path") == BASE["prepared_dir"]  # weights are served as prepared


def test_no_override_without_extension() -> None:
    assert "--json-model-override-args" not in build("eager-default")


def test_tensor_parallel_two() -> None:
    assert value(build("tp2"), "--tp-size") == "2"


def test_default_interpreter_is_this_one() -> None:
    argv = sglang_command(judge_config(BASE), host="127.0.0.1", port=1).argv
    assert argv[0] == sys.executable


def test_tensor_parallel_size_defaults_to_gpus() -> None:
    # Two GPUs and no tensor_parallel_size: one server spans both (it once launched --tp-size 1).
    table = {k: v for k, v in BASE.items() if k != "tensor_parallel_size"}
    argv = sglang_command(judge_config({**table, "gpus": 2}), host="h", port=1).argv
    assert value(argv, "--tp-size") == "2"


def test_chat_template_is_always_passed_for_managed_judges() -> None:
    # Without it Qwen3 grades in thinking mode.
    table = {k: v for k, v in BASE.items() if k != "chat_template"}
    argv = sglang_command(judge_config(table), host="h", port=1).argv
    assert value(argv, "--chat-template") == chat_template_path("qwen3-no-thinking")


def test_every_port_sglang_binds_is_on_its_command_line_next_to_the_http_port() -> None:
    """What the agent reserves (bound_ports) is what the argv gives SGLang: its HTTP server and
    torch.distributed's store (--nccl-port, else a random port SGLang checks and releases)."""
    judge = judge_config(BASE)
    argv = sglang_command(judge, host="h", port=12050).argv
    assert bound_ports(judge, 12050) == {"--port": 12050, "--nccl-port": 12051}
    for flag, port in bound_ports(judge, 12050).items():
        assert value(argv, flag) == str(port)
    assert {"--port", "--nccl-port"} <= recorded_flags()
    reference = judge_config({"mode": "managed", "backend": "reference", "model": "m"})
    assert bound_ports(reference, 12050) == {}  # it binds port 0 itself


@pytest.mark.parametrize("port", [0, 65535, 70000])
def test_a_port_whose_nccl_neighbour_cannot_exist_is_refused(port: int) -> None:
    with pytest.raises(JudgeCommandError, match=f"port {port} for judge general"):
        sglang_command(judge_config(BASE), host="h", port=port)


def test_rejects_judges_it_does_not_launch() -> None:
    external = {"mode": "external", "model": "m", "endpoint": "http://judge:8000/v1"}
    with pytest.raises(JudgeCommandError, match="only managed judges"):
        sglang_command(judge_config(external), host="127.0.0.1", port=1)
    reference = {"mode": "managed", "backend": "reference", "model": "m"}
    with pytest.raises(JudgeCommandError, match="backend"):
        sglang_command(judge_config(reference), host="127.0.0.1", port=1)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"context_extension": "llama-rope-1m"}, "context_extension"),
        ({"chat_template": "chatml"}, "chat_template"),
        ({"cuda_graphs": "yes"}, "cuda_graphs"),
        ({"max_concurrent_calls": 0}, "max_concurrent_calls"),
        ({"prepared_dir": "relative/dir"}, "prepared_dir"),
    ],
)
def test_what_cannot_be_launched_never_resolves(change: dict[str, Any], key: str) -> None:
    with pytest.raises(SpecError) as err:
        judge_config({**BASE, **change})
    assert [p.key for p in err.value.problems] == [f"judges.general.{key}"]


def test_chat_template_file_renders_no_thinking() -> None:
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    assert jinja2  # the sandbox is how Hugging Face tokenizers render chat templates
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(Path(chat_template_path("qwen3-no-thinking")).read_text())
    text = template.render(
        messages=[
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "Q"}]},
        ],
        add_generation_prompt=True,
    )
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_reference_command() -> None:
    judge = judge_config(
        {"mode": "managed", "backend": "reference", "model": "ref-judge", "max_context_length": 8192}, "demo"
    )
    command = reference_command(judge, host="127.0.0.1", port_file="judge-demo.port", faults=["slow=2", "wrong"])
    assert command.argv[:3] == (sys.executable, "-m", "agent.judges.reference_server")
    assert value(command.argv, "--port") == "0"
    assert value(command.argv, "--port-file") == "judge-demo.port"
    assert value(command.argv, "--model") == "ref-judge"
    assert value(command.argv, "--context-length") == "8192"
    assert command.argv[-5:] == ("--fault", "slow", "2", "--fault", "wrong")
    assert judge_command(judge, host="h", port=5, port_file="p").argv[2] == "agent.judges.reference_server"
    assert judge_command(judge_config(BASE), host="h", port=5, port_file="p").argv[2] == "sglang.launch_server"
    assert command.to_json()["argv"][0] == sys.executable


# ---- the real parser -------------------------------------------------------------------------

_PARSE_SCRIPT = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
results = []
for argv in json.load(sys.stdin):
    ns = parser.parse_args(argv)
    results.append({k: (v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v))
                    for k, v in vars(ns).items()})
json.dump(results, sys.stdout)
"""


def _sglang_python() -> str | None:
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    return os.environ.get("GYM_SGLANG_PYTHON") or None


def test_argv_against_the_real_sglang_parser() -> None:
    python = _sglang_python()
    if python is None:
        pytest.skip("sglang is not importable here and GYM_SGLANG_PYTHON is not set")
    cases = sorted(SEED_CASES)
    server_argvs = [list(build(case)[3:]) for case in cases]  # drop "python -m sglang.launch_server"
    proc = subprocess.run(
        [python, "-c", _PARSE_SCRIPT],
        input=json.dumps(server_argvs),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = dict(zip(cases, json.loads(proc.stdout), strict=True))
    for case, ns in parsed.items():
        judge = SEED_CASES[case]
        assert ns["model_path"] == judge["prepared_dir"]
        assert ns["served_model_name"] == judge["model"]
        assert ns["tp_size"] == judge["tensor_parallel_size"]
        assert int(ns["context_length"]) == judge["max_context_length"]
        assert ns["max_running_requests"] == judge["max_concurrent_calls"]
        assert float(ns["mem_fraction_static"]) == 0.85
        assert ns["chat_template"] == chat_template_path("qwen3-no-thinking")
        assert (ns["port"], ns["nccl_port"]) == (30000, 30001)
    for case in ("eager-default", "explicit-eager", "tp2"):
        assert parsed[case]["cuda_graph_backend_decode"] == "disabled"
        assert parsed[case]["cuda_graph_backend_prefill"] == "disabled"
        assert parsed[case]["cuda_graph_max_bs_decode"] is None
    for case in ("cuda-graphs-64", "yarn-128k"):
        assert parsed[case]["cuda_graph_backend_decode"] is None
        assert parsed[case]["cuda_graph_backend_prefill"] is None
        assert parsed[case]["cuda_graph_max_bs_decode"] == 64
    override = parsed["yarn-128k"]["json_model_override_args"]
    assert (json.loads(override) if isinstance(override, str) else override) == YARN
