"""The exact command line and environment of a managed judge. Pure: no I/O but
locating the chat-template file shipped in this package.

SGLang renames and removes flags between releases (``--cuda-graph-max-bs`` disappeared in
0.5.20), so this module targets one pinned release, ``SGLANG_VERSION``. The flags used here are
checked against ``launch/spec/data/sglang-<version>-flags.txt`` (recorded from that release's parser)
on every test run, and against the real parser when sglang is installed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from launch.spec._engine_command import (
    CHAT_TEMPLATES,
    CONTEXT_EXTENSIONS,
    JudgeCommand,
    JudgeCommandError,
    chat_template_path,
    context_override,
    loaded_weights,
)
from launch.spec.vllm_argv import vllm_bound_ports, vllm_judge_command

if TYPE_CHECKING:
    from launch.spec.sections import JudgeConfig

__all__ = [
    "CHAT_TEMPLATES",
    "CONTEXT_EXTENSIONS",
    "JUDGE_ENV",
    "JudgeCommand",
    "JudgeCommandError",
    "MEM_FRACTION_STATIC",
    "NCCL_PORT_OFFSET",
    "OWNED_FLAGS",
    "SGLANG_VERSION",
    "argv_flags",
    "bound_ports",
    "chat_template_path",
    "judge_command",
    "recorded_flags",
    "reference_command",
    "sglang_command",
]

SGLANG_VERSION = "0.5.23"

# Fixed in both eager and graph modes: an explicit fraction bypasses SGLang's automatic choice
# (and its graph-headroom adjustment), so the memory split does not change with cuda_graphs.
MEM_FRACTION_STATIC = "0.85"

# Liveness probes must not generate: with this set, SGLang's /health is a cheap 200 instead of a
# one-token generation that queues behind grading traffic.
JUDGE_ENV: Mapping[str, str] = MappingProxyType({"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"})

# SGLang binds two TCP ports on one node (no DP attention; its zmq sockets are ipc:// files):
# --port (uvicorn, on --host, once the weights are loaded) and --nccl-port (torch.distributed's
# store, on every interface, as its scheduler starts). Left out, --nccl-port is a random port it
# checks free and releases until the scheduler binds it: the race the agent's reservation
# removes. So the judge is given the port next to --port, inside the block reserved for it.
NCCL_PORT_OFFSET = 1

# Flags sglang_command sets from the spec (or that change where and how the server is reached):
# a judge's extra_args may not repeat or override them.
OWNED_FLAGS = frozenset(
    {
        "--model-path",
        "--model",
        "--served-model-name",
        "--revision",
        "--host",
        "--port",
        "--nccl-port",
        "--tp-size",
        "--tensor-parallel-size",
        "--context-length",
        "--max-running-requests",
        "--mem-fraction-static",
        "--chat-template",
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-backend-decode",
        "--cuda-graph-backend-prefill",
        "--disable-cuda-graph",
        "--json-model-override-args",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--api-key",
    }
)

_DATA_DIR = Path(__file__).resolve().parent / "data"


def recorded_flags(version: str = SGLANG_VERSION) -> frozenset[str]:
    """Long flags accepted by ``sglang.launch_server`` at ``version``, as recorded in launch/data."""
    path = _DATA_DIR / f"sglang-{version}-flags.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def argv_flags(argv: Sequence[str]) -> list[str]:
    """The ``--flag`` tokens of an argv (values and ``flag=value`` suffixes dropped)."""
    return [token.split("=", 1)[0] for token in argv if token.startswith("--")]


def bound_ports(judge: JudgeConfig, port: int) -> dict[str, int]:
    """Every port the judge's server binds when started with ``port``, by the flag that gives it
    (none for the reference server, which binds port 0 itself)."""
    if judge.backend == "reference":
        return {}
    if judge.backend == "vllm":
        return vllm_bound_ports(port)
    return {"--port": port, "--nccl-port": port + NCCL_PORT_OFFSET}


def _check_managed(judge: JudgeConfig, backend: str) -> None:
    if not judge.managed:
        raise JudgeCommandError(f"judges.{judge.name} is mode={judge.mode!r}: only managed judges are launched")
    if judge.backend != backend:
        raise JudgeCommandError(f"judges.{judge.name}.backend is {judge.backend!r}, not {backend!r}")


def sglang_command(judge: JudgeConfig, *, host: str, port: int, python: str | None = None) -> JudgeCommand:
    """``python -m sglang.launch_server ...`` for a managed judge of the resolved spec, serving on
    ``port`` (and binding ``bound_ports``).

    ``python`` is the interpreter that has sglang installed (default: this interpreter). Every
    value comes from the resolved model, so its defaults (TP = gpus, the qwen3-no-thinking
    template) are the ones the plan and the docs show.
    """
    _check_managed(judge, "sglang")
    model, revision = loaded_weights(judge, f"judges.{judge.name}")
    if not 0 < port <= 65535 - NCCL_PORT_OFFSET:
        raise JudgeCommandError(f"port {port} for judge {judge.name}: --port and --nccl-port must both be below 65536")
    concurrency = judge.max_concurrent_calls
    argv: list[str] = [
        python or sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        *(("--revision", revision) if revision is not None else ()),
        "--served-model-name",
        judge.model,
        "--host",
        host,
        *(token for flag, bound in bound_ports(judge, port).items() for token in (flag, str(bound))),
        "--tp-size",
        str(judge.tensor_parallel_size),
        "--context-length",
        str(judge.max_context_length),
        "--max-running-requests",
        str(concurrency),
        "--mem-fraction-static",
        MEM_FRACTION_STATIC,
    ]
    # Always passed for a managed judge: without it Qwen3 grades in thinking mode.
    argv += ["--chat-template", chat_template_path(judge.chat_template or "")]
    if judge.cuda_graphs is True:
        # Decode capture never needs a batch larger than the running-request limit; prefill keeps
        # SGLang's default (breakable) graph backend and its own capture sizes.
        argv += ["--cuda-graph-max-bs-decode", str(concurrency)]
    else:
        # Eager when absent or false. The per-phase backends are the 0.5.23 spelling; the older
        # --disable-cuda-graph is deprecated there.
        argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    override = context_override(judge.name, judge.context_extension)
    if override is not None:
        argv += ["--json-model-override-args", json.dumps(_plain(override), sort_keys=True)]
    argv += judge.extra_args
    return JudgeCommand(argv=tuple(argv), env=MappingProxyType(dict(JUDGE_ENV)))


def reference_command(
    judge: JudgeConfig,
    *,
    host: str,
    port_file: str,
    faults: Sequence[str] = (),
    python: str | None = None,
) -> JudgeCommand:
    """The project's reference judge server for a managed judge with ``backend = "reference"``.

    It binds an ephemeral port itself and publishes it atomically in ``port_file`` (no
    pick-then-release race). ``faults`` are ``KIND`` or ``KIND=VALUE`` test hooks
    (see ``agent.judges.reference_server``).
    """
    _check_managed(judge, "reference")
    argv: list[str] = [
        python or sys.executable,
        "-m",
        "agent.judges.reference_server",
        "--host",
        host,
        "--port",
        "0",
        "--port-file",
        port_file,
        "--model",
        judge.model,
        "--context-length",
        str(judge.max_context_length),
    ]
    for fault in faults:
        argv += ["--fault", *fault.split("=", 1)]
    return JudgeCommand(argv=tuple(argv), env=MappingProxyType({}))


def judge_command(
    judge: JudgeConfig,
    *,
    host: str,
    port: int,
    port_file: str,
    python: str | None = None,
) -> JudgeCommand:
    """Dispatch on ``backend``: SGLang and vLLM get ``port``; the reference server reports via ``port_file``."""
    if judge.backend == "reference":
        return reference_command(judge, host=host, port_file=port_file, python=python)
    if judge.backend == "vllm":
        return vllm_judge_command(judge, host=host, port=port, python=python)
    return sglang_command(judge, host=host, port=port, python=python)


def _plain(value: Any) -> Any:
    """Read-only mappings back to dicts so json can encode them."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value
