"""Ray settings for a large cluster, and the jittered backoff its workers join with.

Past some tens of nodes, every raylet registering with the one GCS at once, and every worker
process registering with its raylet, makes a burst Ray's defaults are not sized for: RPCs queue
on the GCS, registrations time out, raylets kill workers, and collectives hang (NeMo RL ray.sub,
PRs #3089/#3158: the burst past ~64 nodes; SkyPilot PR #9192: GCS at ~10 CPUs and 2 GB with 2,000
nodes, `ray start` retried 5 times with `attempt * 5 + random(0..9)` s of backoff). A cluster of
more than `[ray] large_cluster_nodes` Ray nodes gets the settings below as `RAY_<name>` variables
(Ray reads every `ray_config_def.h` entry from its environment), each kept when the job's
environment already sets it. bench/ray_large.py checks every name against the installed Ray's
own binaries.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

__all__ = [
    "JOIN_SPREAD_MAX_S",
    "JOIN_SPREAD_PER_NODE_S",
    "RETRY_ATTEMPTS",
    "RETRY_JITTER_S",
    "RETRY_STEP_S",
    "RaySetting",
    "SETTINGS",
    "apply",
    "is_large",
    "join_delay",
    "settings",
]


@dataclass(frozen=True)
class RaySetting:
    name: str  # the ray_config_def.h entry; the variable is RAY_<name>
    value: str
    head_only: bool  # read by the GCS server alone
    default: str  # Ray's own default (2.60), for people
    why: str

    @property
    def variable(self) -> str:
        return f"RAY_{self.name}"


SETTINGS: tuple[RaySetting, ...] = (
    RaySetting(
        "gcs_rpc_server_connect_timeout_s",
        "120",
        False,
        "5",
        "a raylet's first connection to a GCS busy with hundreds of registrations",
    ),
    RaySetting(
        "gcs_rpc_server_reconnect_timeout_s",
        "120",
        False,
        "60",
        "a GCS that stalls in the burst is not taken for dead (raylets exit when it is)",
    ),
    RaySetting(
        "gcs_server_request_timeout_seconds",
        "120",
        False,
        "60",
        "requests to the GCS queued behind the burst",
    ),
    RaySetting(
        "worker_register_timeout_seconds",
        "120",
        False,
        "60",
        "workers registering with their raylet while it waits on the GCS; past it the raylet kills them",
    ),
    RaySetting(
        "health_check_period_ms",
        "10000",
        True,
        "3000",
        "fewer health RPCs from the GCS to every raylet: a dead node is seen later (~30-60 s instead of ~15 s)",
    ),
    RaySetting(
        "gcs_server_rpc_server_thread_num",
        "64",
        True,
        "CPUs / 4",
        "more GCS threads drain a registration burst faster",
    ),
    RaySetting(
        "grpc_keepalive_time_ms",
        "60000",
        True,
        "10000",
        "the GCS server's keepalive pings on each connection are a steady load at many nodes",
    ),
    RaySetting(
        "raylet_report_resources_period_milliseconds",
        "500",
        False,
        "100",
        "resource reports from every raylet, 5x fewer",
    ),
    RaySetting(
        "task_events_report_interval_ms",
        "5000",
        False,
        "1000",
        "task events reported to the GCS, 5x fewer",
    ),
)

JOIN_SPREAD_PER_NODE_S = 0.01  # a worker's first start waits a random part of this x nodes
JOIN_SPREAD_MAX_S = 10.0
RETRY_ATTEMPTS = 5  # a large cluster's worker starts Ray this often (ports taken, GCS busy)
RETRY_STEP_S = 5.0
RETRY_JITTER_S = 10.0


def is_large(ray_nodes: int, threshold: int) -> bool:
    return ray_nodes > threshold


def settings(is_head: bool) -> dict[str, str]:
    """The variables of a large cluster's node: the head gets the GCS server's too."""
    return {s.variable: s.value for s in SETTINGS if is_head or not s.head_only}


def apply(env: MutableMapping[str, str], wanted: Mapping[str, str], job_env: Mapping[str, str]) -> dict[str, str]:
    """Put `wanted` into `env`, except where the job's own environment sets a variable (kept);
    returns every variable with the value used."""
    used = {}
    for var, value in wanted.items():
        if var in job_env:
            used[var] = job_env[var]
        else:
            env[var] = value
            used[var] = value
    return used


def join_delay(attempt: int, ray_nodes: int, rng: random.Random) -> float:
    """Seconds a worker of a large cluster waits before start `attempt` (1-based): the first within
    a random spread growing with the cluster (registrations arrive spread out, not all at once),
    later ones after an exponential-ish backoff with jitter, as SkyPilot's retry does."""
    if attempt <= 1:
        return rng.uniform(0.0, min(JOIN_SPREAD_MAX_S, JOIN_SPREAD_PER_NODE_S * ray_nodes))
    return RETRY_STEP_S * (attempt - 1) + rng.uniform(0.0, RETRY_JITTER_S)
