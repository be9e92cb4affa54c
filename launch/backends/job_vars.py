"""The variables a job exports to every node from its plan (seed 001), named and placed in one place.

``GYM_NODES`` (every node, in the agents' node order), ``GYM_POOL_<POOL>_NODES`` (each pool's),
``GYM_RAY_<SERVICE>_<POOL>_WORKERS`` (each pool's nodes that join Ray as workers), ``GYM_DRIVER_RANK``
and ``GYM_DRIVER_HOST``, and ``GYM_RAY_ADDRESS_<SERVICE>`` (the Ray head's host:port). A host list
is a tuple of planned node indices; each backend writes the hosts its own way: the Slurm script as
shell expressions over the allocation's hostnames, ``gym-launch local`` as each replica's loopback
address. A backend that cannot know a variable before the job starts refuses a ``runtime:``
reference to it (``unexported_problems``), naming the key and the backend, instead of a run that
fails on an unset variable.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from launch.spec.config import RunConfig
from launch.spec.errors import Problem
from launch.spec.plan import Plan
from schemas.vocab import DriverEnv, JobEnv

__all__ = [
    "HostList",
    "host_values",
    "job_variables",
    "pool_host_lists",
    "ray_address_variable",
    "ray_worker_lists",
    "unexported_problems",
]


@dataclass(frozen=True)
class HostList:
    """A variable whose value is hosts of the job, comma-separated: these planned nodes', in order."""

    name: str
    nodes: tuple[int, ...]


def pool_host_lists(config: RunConfig, plan: Plan) -> tuple[HostList, ...]:
    """GYM_NODES, then GYM_POOL_<POOL>_NODES for each pool in declaration order (pools take
    contiguous ranges of the node order, in that order)."""
    out = [HostList(JobEnv.NODES, tuple(range(plan.replicas)))]
    offset = 0
    for pool in config.pool_list:
        out.append(HostList(JobEnv.pool_nodes(pool.name), tuple(range(offset, offset + pool.nodes))))
        offset += pool.nodes
    return tuple(out)


def ray_worker_lists(config: RunConfig, plan: Plan) -> tuple[HostList, ...]:
    """GYM_RAY_<SERVICE>_<POOL>_WORKERS for every pool with nodes that join Ray as workers (the
    head's node, the driver's, left out)."""
    joined = set(plan.ray_nodes) - {plan.driver_node}
    out = []
    for pool in config.pool_list:
        workers = tuple(n.index for n in plan.nodes if n.pool == pool.name and n.index in joined)
        if workers:
            out.append(HostList(JobEnv.ray_workers(config.ray.name, pool.name), workers))
    return tuple(out)


def ray_address_variable(config: RunConfig, plan: Plan) -> str | None:
    """GYM_RAY_ADDRESS_<SERVICE> when Ray starts, else None."""
    return DriverEnv.ray_address(config.ray.name) if plan.ray_nodes else None


def _host_lists(config: RunConfig, plan: Plan) -> tuple[HostList, ...]:
    driver = HostList(JobEnv.DRIVER_HOST, (plan.driver_node,))
    return (*pool_host_lists(config, plan), driver, *ray_worker_lists(config, plan))


def job_variables(config: RunConfig, plan: Plan) -> tuple[str, ...]:
    """Every variable a job of this plan exports to every node (the Slurm script exports them all)."""
    ray = ray_address_variable(config, plan)
    return (*(h.name for h in _host_lists(config, plan)), JobEnv.DRIVER_RANK, *([ray] if ray else []))


def host_values(config: RunConfig, plan: Plan, hosts: Sequence[str]) -> dict[str, str]:
    """The host lists and the driver's rank, valued with ``hosts[i]`` as planned node i's host (the
    Ray head's address is not among them: its port is the head's to choose where nothing fixes it)."""
    out = {h.name: ",".join(hosts[i] for i in h.nodes) for h in _host_lists(config, plan)}
    out[JobEnv.DRIVER_RANK] = str(plan.driver_node)
    return out


def unexported_problems(config: RunConfig, plan: Plan, exported: Collection[str], backend: str) -> list[Problem]:
    """A problem for each key that takes a job variable ``backend`` does not export from the job's
    environment (``runtime:VAR``, ``${runtime:VAR}``): on such a backend it would never be set."""
    refs = config.environment_references()
    return [
        Problem(
            refs[var],
            f"takes {var} from the job's environment, which {backend} does not set (a rendered Slurm job "
            f"exports it): {_why(var, config, backend)}",
        )
        for var in job_variables(config, plan)
        if var in refs and var not in exported
    ]


def _why(var: str, config: RunConfig, backend: str) -> str:
    if var == DriverEnv.ray_address(config.ray.name):
        return (
            "the Ray head picks its port when it starts; the driver gets the address as "
            f"{var} (and {DriverEnv.RAY_ADDRESS}) without it: remove the reference, or submit with --backend slurm"
        )
    return f"{backend} picks the nodes when the job starts; remove the reference, or submit with --backend slurm"
