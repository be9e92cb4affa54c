"""The command line of the policy service's engine on each node it spans (seed 001). Pure.

One engine serves the policy: on one node, or over whole nodes of its pool when its
``tensor_parallel_size`` is larger than a node (every node runs the command with its own node rank;
node 0 serves HTTP, on ``port``, and is where the driver runs). The flags are the engines' own
(SGLang's recorded in ``launch/spec/data``); the judges' argv modules own the rest.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from launch.spec import sglang_argv, vllm_argv
from launch.spec._engine_command import JudgeCommand, JudgeCommandError, loaded_weights
from launch.spec.sglang_argv import MEM_FRACTION_STATIC, NCCL_PORT_OFFSET
from launch.spec.vllm_argv import VllmServe, vllm_env

if TYPE_CHECKING:
    from launch.spec.sections import PolicyConfig

__all__ = [
    "DIST_INIT_OFFSET",
    "PolicyNode",
    "owned_flags",
    "policy_command",
    "policy_url",
]

# SGLang over several nodes meets at --dist-init-addr (torch.distributed's store on node 0): the
# port after --nccl-port, so the policy's ports stay together, below the agents' port blocks.
DIST_INIT_OFFSET = 2


@dataclass(frozen=True)
class PolicyNode:
    """One node of the policy's engine: its rank among the engine's ``nodes``, its own address
    (``host``) and node 0's (``leader``), where the others meet it."""

    rank: int = 0
    nodes: int = 1
    host: str = "127.0.0.1"
    leader: str = "127.0.0.1"


def owned_flags(backend: str | None) -> frozenset[str]:
    """The flags the agent sets for a server on ``backend`` (a judge's and the policy's alike), which
    extra_args may not repeat or override."""
    return vllm_argv.OWNED_FLAGS if backend == "vllm" else sglang_argv.OWNED_FLAGS


def policy_url(host: str, port: int) -> str:
    """GYM_POLICY_URL: the policy's OpenAI base URL."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def policy_command(policy: PolicyConfig, node: PolicyNode, *, python: str | None = None) -> JudgeCommand:
    """What the agent executes on ``node`` of the policy's engine (``python``: the interpreter with
    the engine installed; default this one). JudgeCommandError names what cannot be."""
    if not policy.managed or policy.model is None:
        raise JudgeCommandError("policy: only a managed policy with a model is launched")
    loaded_weights(policy, "policy")  # its weights, or the error naming the key
    if not 0 <= node.rank < node.nodes:
        raise JudgeCommandError(f"policy node rank {node.rank} is not one of its {node.nodes} nodes")
    if policy.backend == "vllm":
        return _vllm(policy, node, python)
    if policy.backend != "sglang":
        raise JudgeCommandError(f"policy.backend {policy.backend!r} is not an engine the agent launches")
    return _sglang(policy, node, python)


def _sglang(policy: PolicyConfig, node: PolicyNode, python: str | None) -> JudgeCommand:
    port = policy.port
    model, revision = loaded_weights(policy, "policy")
    argv = [
        python or sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        *(("--revision", revision) if revision is not None else ()),
        "--served-model-name",
        str(policy.model),
        "--host",
        node.host,
        "--port",
        str(port),
        "--nccl-port",
        str(port + NCCL_PORT_OFFSET),
        "--tp-size",
        str(policy.tensor_parallel_size),
        "--mem-fraction-static",
        MEM_FRACTION_STATIC,
    ]
    if node.nodes > 1:
        leader = f"[{node.leader}]" if ":" in node.leader else node.leader
        argv += ["--nnodes", str(node.nodes), "--node-rank", str(node.rank)]
        argv += ["--dist-init-addr", f"{leader}:{port + DIST_INIT_OFFSET}"]
    argv += policy.extra_args
    return JudgeCommand(argv=tuple(argv), env=MappingProxyType({}))


def _vllm(policy: PolicyConfig, node: PolicyNode, python: str | None) -> JudgeCommand:
    model, revision = loaded_weights(policy, "policy")
    serve = VllmServe(
        model=model,
        served_name=str(policy.model),
        revision=revision,
        tensor_parallel_size=policy.tensor_parallel_size,
        host=node.host,
        port=policy.port,
        enforce_eager=False,
        extra_args=policy.extra_args,
        nodes=node.nodes,
        node_rank=node.rank,
        master_addr=node.leader if node.nodes > 1 else None,
        master_port=policy.port + DIST_INIT_OFFSET if node.nodes > 1 else None,
    )
    return JudgeCommand(argv=vllm_argv.vllm_argv(serve, python=python), env=MappingProxyType(vllm_env(serve)))
