"""Seed 001's layout (``compute:`` / ``services:``) recognised, with our spelling of each of its keys.

A user who types the seed's example gets one problem per top-level key that names the tables of
ours it maps to, instead of "unknown key; did you mean output?". ``MAPPING`` is the one table of
both spellings; docs/spec.md prints it (``launch.spec.reference``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas import DriverEnv

__all__ = ["MAPPING", "TOP_LEVEL", "mapping_table", "problems"]

# (seed 001 key, our key, a note)
MAPPING: tuple[tuple[str, str, str], ...] = (
    ("compute.cluster.type", "launch.backend", '"slurm"; or gym-launch submit --backend slurm'),
    ("compute.cluster.account", "launch.slurm.account", ""),
    ("compute.cluster.node_pools.NAME", "[pools.NAME]", "one table per pool, in the same order"),
    ("compute.cluster.node_pools.NAME.nodes", "pools.NAME.nodes", ""),
    ("compute.cluster.node_pools.NAME.gpus_per_node", "pools.NAME.gpus_per_node", "0: a CPU pool"),
    ("compute.cluster.node_pools.NAME.partition", "pools.NAME.partition", "pools on other partitions: a hetjob"),
    ("services.NAME (the policy, type vllm or sglang)", "[policy]", 'mode = "managed", backend = "vllm" or "sglang"'),
    ("services.NAME.node_pool (the policy)", "policy.node_pool", "the driver runs on its first node"),
    ("services.NAME.tensor_parallel_size (the policy)", "policy.tensor_parallel_size", "above a node: whole nodes"),
    ("services.NAME.port (the policy)", "policy.port", "default 8000"),
    ("driver.policy_model", DriverEnv.POLICY_URL, "the policy's http://HOST:PORT/v1, in the driver's environment"),
    ("services.NAME (a judge)", "[judges.NAME]", 'mode = "managed" (the agent serves it) or "external"'),
    ("services.NAME.node_pool (a judge)", "judges.NAME.node_pool", ""),
    ("services.NAME.type = ray", "[ray]", "name = NAME (GYM_RAY_ADDRESS_<NAME>)"),
    ("services.NAME.node_pools (ray)", "ray.node_pools", "a list; [] = the driver's node alone"),
    ("services.NAME.resources (ray)", "ray.resources", "{POOL = {RESOURCE = amount}}"),
    ("services.NAME.extra_args (ray)", "ray.extra_args", "head-only flags are dropped from workers"),
    ("driver.benchmarks", "driver.command", "the command the agent runs on the driver's node"),
)

TOP_LEVEL = {
    "compute": "is seed 001's layout; ours declares the allocation in [launch] (launch.slurm.account, "
    "launch.backend) and each node pool as its own [pools.NAME] table (nodes, gpus_per_node, partition)",
    "services": "is seed 001's layout; ours serves an evaluation's policy with [policy] (node_pool, "
    "tensor_parallel_size, port) and a training run's with its rollout engines (trainer.node_pool, "
    "inference.node_pool), "
    "each judge is a [judges.NAME] table (with node_pool), and a Ray service is [ray] (name, node_pools, "
    "resources)",
}


def problems(data: Mapping[str, Any]) -> dict[str, str]:
    """Top-level key -> message, for the keys of seed 001's layout ``data`` has."""
    return {k: f"{m} (docs/spec.md, 'Seed 001 layout')" for k, m in TOP_LEVEL.items() if k in data}


def mapping_table() -> list[str]:
    rows = [f"| `{seed}` | `{ours}` | {note} |" for seed, ours, note in MAPPING]
    return ["| seed 001 | gym-agent | note |", "|---|---|---|", *rows]
