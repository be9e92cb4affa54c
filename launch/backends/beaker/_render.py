"""A run rendered as a Beaker experiment spec (YAML: one task, one replica group; pure); submit.py
hands it to beaker-py's client.

Seed 000: "one Beaker task with native replicas, leader selection and a synchronized start",
full eight-GPU nodes, one shared hostname allowlist, failure and preemption propagated to every
replica. Every replica runs ``gym-agent --uuid U``; rank and count come from Beaker's replica
environment (BEAKER_REPLICA_RANK / BEAKER_REPLICA_COUNT, agent/coord/identity.py) and the address from
BEAKER_NODE_HOSTNAME (host networking: the node's own address).

The run spec travels inside the task: the spec record (what the run directory's spec.json
holds) is the value of ``GYM_RUN_SPEC_JSON``, and the command carries its fingerprint
(``--expect-fingerprint``), so every replica loads exactly these bytes or refuses to start.
Nothing has to be readable from the submitting machine.

Credentials never appear: ``[launch] env`` is refused by the resolver when a name or value looks
like one, and ``[launch] secrets`` map a variable to a Beaker secret *name*.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterator, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from launch.backends.base import Rendered, RenderRequest, container_problems, pinned_agent_argv, shared_root_problem
from launch.backends.inline_spec import RESERVED_ENV, inline_spec
from launch.backends.job_vars import unexported_problems
from launch.backends.yamltext import dump
from launch.spec.config import RunConfig
from launch.spec.errors import Problem
from launch.spec.load import SPEC_JSON_ENV
from launch.spec.restarts import max_retries
from schemas.vocab import ResumeEnv

__all__ = ["BEAKER_NODE_GPUS", "RESERVED_ENV", "beaker_duration", "render", "task"]

BEAKER_NODE_GPUS = 8  # Beaker replica groups take whole 8-GPU nodes (seed 000)
RESULT_PATH = "/output"  # Beaker's per-task result directory (unused by the agent)
AGENT = "gym-agent"
RESERVED_PREFIXES = ("BEAKER_",)


def _duration_s(seconds: float) -> str:
    return f"{math.ceil(seconds)}s"


NANOS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9}
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d)")


def beaker_duration(text: str) -> str:
    """A spec duration ("2d", "1h30m", already checked by the resolver) in units Beaker reads:
    Beaker, like Go, has no days, so it is written in the largest of h, m, s, ms, ns that is exact."""
    nanos = sum((Decimal(n) * NANOS[u] for n, u in DURATION_PART.findall(text)), Decimal(0))
    total = int(nanos.to_integral_value(rounding=ROUND_CEILING))
    for unit in ("h", "m", "s", "ms"):
        if total % NANOS[unit] == 0:
            return f"{total // NANOS[unit]}{unit}"
    return f"{total}ns"


def _problems(request: RenderRequest) -> list[Problem]:
    config, plan = request.config, request.plan
    beaker = config.launch.beaker
    out: list[Problem] = []
    if not beaker.image:
        out.append(Problem("launch.beaker.image", "is required for Beaker: the image every replica runs"))
    out += _node_problems(config, plan.replicas)
    out += _where_problems(config, plan.replicas)
    if beaker.preemptible is not None and (beaker.min_runtime is not None or beaker.auto_resume is not None):
        out.append(
            Problem(
                "launch.beaker.preemptible",
                "is Beaker's legacy field and cannot be combined with min_runtime or auto_resume (Beaker refuses "
                "both); remove preemptible",
            )
        )
    out += _output_root_problems(request)
    out += _pool_problems(config)
    out += container_problems(config, "Beaker")
    out += unexported_problems(config, plan, (), "Beaker")
    for table in ("env", "secrets"):
        names: Mapping[str, str] = getattr(config.launch, table)
        for name in names:
            if name in RESERVED_ENV or name.startswith(RESERVED_PREFIXES):
                out.append(Problem(f"launch.{table}.{name}", "is set by the Beaker task or by Beaker; remove it"))
    return out


def _node_problems(config: RunConfig, replicas: int) -> Iterator[Problem]:
    """A Beaker replica group takes whole eight-GPU nodes."""
    if replicas > 1 and config.gpus_per_replica != BEAKER_NODE_GPUS:
        yield Problem(
            "launch.gpus_per_replica",
            f"is {config.gpus_per_replica}, but a Beaker replica group takes whole nodes of "
            f"{BEAKER_NODE_GPUS} GPUs (replicas could otherwise share a physical host); set it to 8",
        )
    if config.node_gpus != BEAKER_NODE_GPUS:
        yield Problem("launch.node_gpus", "Beaker replica groups need full eight-GPU nodes; set node_gpus = 8")


def _where_problems(config: RunConfig, replicas: int) -> Iterator[Problem]:
    """Where the replicas run: Beaker cluster(s) or a hostname allowlist, one or the other, and
    a host for each replica."""
    beaker = config.launch.beaker
    if beaker.cluster and config.hostnames:
        yield Problem(
            "launch.beaker.cluster",
            "and launch.hostnames are both set; they are exclusive Beaker constraints: keep the cluster(s) "
            "or the hostname allowlist, not both",
        )
    elif not beaker.cluster and not config.hostnames:
        yield Problem("launch.beaker.cluster", "is required for Beaker (or set launch.hostnames): where replicas run")
    if config.hostnames and len(config.hostnames) < replicas:
        yield Problem(
            "launch.hostnames",
            f"lists {len(config.hostnames)} host(s) for {replicas} replicas; each replica needs its own "
            "node: list at least as many hosts as replicas",
        )


def _output_root_problems(request: RenderRequest) -> Iterator[Problem]:
    # One replica needs no shared mount; several coordinate through one of launch.weka_mounts.
    mounts = [m["mount_path"] for m in request.config.launch.weka_mounts] if request.plan.replicas > 1 else []
    absolute = "on a shared filesystem mounted in every replica (pass --output-root /weka/... or set output.root)"
    problem = shared_root_problem(request, "Beaker", mounts, "any launch.weka_mounts mount_path", absolute)
    if problem is not None:
        yield problem


def _pool_problems(config: RunConfig) -> Iterator[Problem]:
    """What a Beaker replica group cannot express: it is one task of one shape on every replica,
    queued on clusters (launch.beaker.cluster), not on Slurm partitions."""
    gpu = [p for p in config.pool_list if not p.cpu_only]
    for pool in config.pool_list:
        for k in ("partition", "qos"):
            if getattr(pool, k) is not None:
                yield Problem(
                    f"pools.{pool.name}.{k}",
                    f"is a Slurm {k}; a Beaker replica group has none (it runs on launch.beaker.cluster): "
                    "remove it, or submit with --backend slurm",
                )
        if pool.tasks_per_node != 1:
            yield Problem(
                f"pools.{pool.name}.tasks_per_node",
                f"is {pool.tasks_per_node}: Slurm task slots; a Beaker replica runs one task (set it to 1, or "
                "submit with --backend slurm)",
            )
        if not pool.cpu_only and pool.gpus_per_node != config.gpus_per_replica:
            yield Problem(
                f"pools.{pool.name}.gpus_per_node",
                f"is {pool.gpus_per_node} but launch.gpus_per_replica is {config.gpus_per_replica}: every "
                "replica of a Beaker replica group has the same GPUs; submit with --backend slurm",
            )
        if pool.cpu_only and gpu:
            yield Problem(
                f"pools.{pool.name}.gpus_per_node",
                f"is 0 beside GPU pools ({', '.join(p.name for p in gpu)}): every replica of a Beaker replica "
                "group has the same GPUs, so a CPU pool beside GPU pools needs a Slurm heterogeneous job "
                "(--backend slurm)",
            )


def _env_vars(config: RunConfig, spec_json: str) -> list[dict[str, str]]:
    env = [{"name": k, "value": v} for k, v in sorted(config.launch.env.items())]
    # By name only: Beaker puts the secret's value into the replica's environment.
    env += [{"name": k, "secret": v} for k, v in sorted(config.launch.secrets.items())]
    env.append({"name": SPEC_JSON_ENV, "value": spec_json})
    # Beaker retries a task with the same command and environment: restart mode lets a retry
    # (same workload, so the same attempt token) start the next attempt by itself.
    env.append({"name": ResumeEnv.RESUME, "value": ResumeEnv.RESTART})
    return env


def task(request: RenderRequest, spec_json: str) -> dict[str, Any]:
    config, plan = request.config, request.plan
    beaker = config.launch.beaker
    resources: dict[str, Any] = {"gpuCount": plan.gpus_per_replica}
    if beaker.shared_memory is not None:
        resources["sharedMemory"] = beaker.shared_memory
    out: dict[str, Any] = {
        "name": config.name,
        "image": {"beaker": beaker.image},
        "command": _command(request),
        "envVars": _env_vars(config, spec_json),
        "datasets": [{"mountPath": m["mount_path"], "source": {"weka": m["weka"]}} for m in config.launch.weka_mounts],
        "result": {"path": RESULT_PATH},
        "resources": resources,
        "context": _context(config),
        "constraints": _constraints(config),
        # Peers and Ray reach each other on the nodes' own addresses.
        "hostNetworking": True,
    }
    if not out["datasets"]:
        del out["datasets"]
    if plan.replicas > 1:
        out.update(
            {
                "replicas": plan.replicas,
                "leaderSelection": True,
                "propagateFailure": True,
                "propagatePreemption": True,
                # Beaker starts the replicas together or not at all, within the run's startup deadline.
                "synchronizedStartTimeout": _duration_s(config.coordination.startup_timeout),
            }
        )
    if beaker.timeout is not None:
        out["timeout"] = beaker_duration(beaker.timeout)
    return out


def _command(request: RenderRequest) -> list[str]:
    """Every replica's gym-agent command line."""
    plan = request.plan
    # With one replica there is no replica group, so no BEAKER_REPLICA_* variables: it says who it is.
    alone = plan.replicas == 1
    return list(pinned_agent_argv(request, AGENT, rank="0" if alone else None, replicas=1 if alone else None))


def _context(config: RunConfig) -> dict[str, Any]:
    """The task's scheduling context: priority, preemption, minimum runtime, auto-resume."""
    beaker = config.launch.beaker
    context: dict[str, Any] = {}
    if beaker.priority is not None:
        context["priority"] = beaker.priority
    if beaker.preemptible is not None:
        context["preemptible"] = beaker.preemptible
    if beaker.min_runtime is not None:
        context["minRuntime"] = beaker_duration(beaker.min_runtime)
    if beaker.auto_resume is not None:
        context["autoResume"] = beaker.auto_resume
    return context


def _constraints(config: RunConfig) -> dict[str, list[str]]:
    """Where the replicas may run: the cluster(s), else the hostname allowlist."""
    beaker = config.launch.beaker
    if beaker.cluster:
        clusters = [beaker.cluster] if isinstance(beaker.cluster, str) else list(beaker.cluster)
        return {"cluster": clusters}
    return {"hostname": list(config.hostnames)}


def render(request: RenderRequest) -> Rendered:
    spec_json = inline_spec(request, "a Beaker task", _problems(request))
    config, plan = request.config, request.plan
    doc: dict[str, Any] = {
        "version": "v2",
        "description": f"gym-agent run {config.name} (uuid {request.uuid}, fingerprint {config.fingerprint[:16]})",
    }
    if config.launch.beaker.budget is not None:
        doc["budget"] = config.launch.beaker.budget
    doc["tasks"] = [task(request, spec_json)]
    cap = max_retries(config)
    if cap is not None:
        doc["retry"] = {"allowedTaskRetries": cap}
    workspace = config.launch.beaker.workspace
    comments = (
        f"gym-agent run {config.name}: {plan.replicas} replica(s) x {plan.gpus_per_replica} GPUs, uuid {request.uuid}",
        f"fingerprint {config.fingerprint}",
        f"Beaker workspace: {workspace or '(your Beaker default workspace)'}",
        f"OUTPUT ROOT {request.output_root} MUST BE A SHARED FILESYSTEM mounted at this path in every replica:",
        f"the replicas coordinate through {posixpath.join(request.output_root, 'cluster', request.uuid)}.",
        f"The run spec is carried inline ({SPEC_JSON_ENV}); every replica checks its fingerprint.",
        *_restart_comments(cap),
    )
    return Rendered(backend="beaker", text=dump(doc, comments), file_name=".beaker.yaml")


def _restart_comments(cap: int | None) -> tuple[str, ...]:
    allowed = (
        f"Beaker retries the task up to {cap} time(s) (retry.allowedTaskRetries)"
        if cap is not None
        else "no [launch] max_retries: Beaker's own retry default applies"
    )
    return (
        f"Restarts: {allowed}.",
        f"A retry resumes by itself ({ResumeEnv.RESUME}={ResumeEnv.RESTART}, token beaker-$BEAKER_WORKLOAD_ID).",
        "The agents count attempts from the run directory's attempts/ and refuse one past the caps:",
        "a resubmission resets Beaker's count, not theirs.",
    )
