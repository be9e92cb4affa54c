"""A run rendered as one SkyPilot task (YAML; pure); submit.py hands it to SkyPilot's Python API
(``sky.jobs.launch``, or ``sky.launch`` with ``managed = false``).

One task of ``num_nodes`` = the plan's replicas, ``accelerators`` NAME:COUNT with the plan's GPUs per
node; every node runs ``gym-agent --uuid U --output-root ROOT --expect-fingerprint F``. Rank, count,
address and GPUs come from SkyPilot's environment (SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES,
SKYPILOT_NODE_IPS, SKYPILOT_NUM_GPUS_PER_NODE; agent/coord/identity.py), the attempt token from
SKYPILOT_TASK_ID, which a managed job keeps across its recoveries. The run spec travels inline as
Beaker's does (launch/backends/inline_spec.py). The run directory lives on the mount the user names
(``[launch.skypilot.mount]``: a SkyPilot volume, or a host path on Slurm); bucket mounts are refused
by the resolver, since an object store has no atomic rename.

Recovery: a managed job that SkyPilot recovers (a preempted node: the whole task is started again) or
restarts (``max_restarts_on_errors``, written from ``[launch] max_retries``) runs the same command and
environment under the same SKYPILOT_TASK_ID, so the task carries restart mode (GYM_RESUME=restart,
agent/coord/attempts/_decide.py) as Beaker's does: a restart starts the next attempt of the run by itself.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

from launch.backends.base import Rendered, RenderRequest, container_problems, pinned_agent_argv, shared_root_problem
from launch.backends.inline_spec import RESERVED_ENV, inline_spec
from launch.backends.job_vars import unexported_problems
from launch.backends.yamltext import dump
from launch.spec.config import RunConfig
from launch.spec.errors import Problem
from launch.spec.load import SPEC_JSON_ENV
from launch.spec.restarts import max_retries
from schemas import names
from schemas.vocab import DriverEnv, ResumeEnv

__all__ = ["cli_command", "cluster_name", "job_name", "render", "run_command", "task"]

FILE_SUFFIX = ".skypilot.yaml"
RESERVED_PREFIXES = ("SKYPILOT_",)  # SkyPilot sets these on every node
CLUSTER_NAME_MAX = 40  # SkyPilot appends its own suffixes; Kubernetes names stop at 63
SLURM_INFRA = re.compile(r"(?i)slurm(/.*)?")
VOLUME_INFRA = re.compile(r"(?i)(k8s|kubernetes|runpod)(/.*)?")


def _accelerator_count(spelled: str) -> int | None:
    _, _, count = spelled.partition(":")
    return int(count) if count else None


def _mount_problems(request: RenderRequest) -> Iterator[Problem]:
    sky = request.config.launch.skypilot
    mount, plan = sky.mount, request.plan
    if mount.volume and mount.host_path:
        yield Problem("launch.skypilot.mount.host_path", "and volume are both set; the mount is one of them")
    if (mount.volume or mount.host_path) and not mount.path:
        yield Problem("launch.skypilot.mount.path", "is required with volume or host_path: where every node mounts it")
    if mount.path and not (mount.volume or mount.host_path):
        yield Problem(
            "launch.skypilot.mount.path",
            "names no filesystem: add volume (a SkyPilot volume) or host_path (Slurm: the nodes' own shared "
            "filesystem)",
        )
    if mount.host_path and not (sky.infra and SLURM_INFRA.fullmatch(sky.infra)):
        yield Problem(
            "launch.skypilot.mount.host_path",
            'is bound by SkyPilot only for tasks on Slurm (infra = "slurm/CLUSTER"); on Kubernetes create a '
            "SkyPilot volume of type k8s-hostpath (or a ReadWriteMany PVC) and name it in volume",
        )
    if mount.volume and sky.infra and not VOLUME_INFRA.fullmatch(sky.infra):
        yield Problem(
            "launch.skypilot.mount.volume",
            f"is a SkyPilot volume, which exists on Kubernetes and RunPod only, but infra is {sky.infra!r}; "
            "set infra to the volume's Kubernetes context (k8s/CONTEXT)",
        )
    mounts = [mount.path] if mount.path else []
    absolute = "inside launch.skypilot.mount.path (pass --output-root /shared/... or set output.root)"
    problem = shared_root_problem(request, "SkyPilot", mounts, "launch.skypilot.mount.path", absolute)
    if problem is not None:
        yield problem
    elif plan.replicas > 1 and not mount.path:
        yield Problem(
            "launch.skypilot.mount",
            f"is required for {plan.replicas} nodes: the replicas coordinate through {request.output_root}, "
            "which must be one shared POSIX filesystem; set path and volume (or host_path on Slurm)",
        )


def _problems(request: RenderRequest) -> list[Problem]:
    config, plan = request.config, request.plan
    sky = config.launch.skypilot
    out = [
        *_mount_problems(request),
        *container_problems(config, "SkyPilot"),
        *unexported_problems(config, plan, (), "SkyPilot"),
    ]
    if plan.gpus_per_replica and not sky.accelerators:
        out.append(
            Problem(
                "launch.skypilot.accelerators",
                f'is required: the plan needs {plan.gpus_per_replica} GPU(s) per node; name their type ("H100")',
            )
        )
    count = _accelerator_count(sky.accelerators) if sky.accelerators else None
    if count is not None and count != plan.gpus_per_replica:
        out.append(
            Problem(
                "launch.skypilot.accelerators",
                f"asks for {count} per node but the plan places {plan.gpus_per_replica}; write the type alone",
            )
        )
    if sky.managed and sky.cluster:
        out.append(
            Problem(
                "launch.skypilot.cluster",
                "names sky.launch's cluster; a managed job has none: set managed = false or remove it",
            )
        )
    if not sky.managed and sky.recovery:
        out.append(
            Problem(
                "launch.skypilot.recovery",
                "is a managed job's recovery strategy; with managed = false nothing recovers the task",
            )
        )
    if config.hostnames:
        out.append(
            Problem("launch.hostnames", "cannot be pinned through SkyPilot (it picks the nodes); remove the allowlist")
        )
    if config.launch.weka_mounts:
        out.append(
            Problem(
                "launch.weka_mounts",
                "are Beaker's Weka datasets; a SkyPilot task mounts its shared filesystem from "
                "[launch.skypilot.mount] (a volume or host_path): remove them",
            )
        )
    for table in ("env", "secrets"):
        given: Mapping[str, str] = getattr(config.launch, table)
        for name in given:
            if name in RESERVED_ENV or name.startswith(RESERVED_PREFIXES):
                out.append(Problem(f"launch.{table}.{name}", "is set by the SkyPilot task or by SkyPilot; remove it"))
    for var, secret in config.launch.secrets.items():
        if var != secret:
            out.append(
                Problem(
                    f"launch.secrets.{var}",
                    f"names SkyPilot secret {secret!r}; SkyPilot gives a secret to the task under its own name: "
                    f'name the variable after it (launch.secrets.{secret} = "{secret}")',
                )
            )
    return out


def cluster_name(config: RunConfig, uuid: str) -> str:
    """sky.launch's cluster: the one given, else the run's name and uuid in SkyPilot's alphabet."""
    given = config.launch.skypilot.cluster
    if given:
        return given
    text = re.sub(r"[^a-z0-9-]+", "-", f"{config.name}-{uuid}".lower()).strip("-")
    text = text[:CLUSTER_NAME_MAX].rstrip("-")
    return text if text[:1].isalpha() else f"gym-{text}"[:CLUSTER_NAME_MAX].rstrip("-")


def job_name(config: RunConfig, uuid: str) -> str:
    """The managed job's (or the task's) name: the run's name and uuid."""
    return f"{config.name}-{uuid}"


def _resources(request: RenderRequest) -> dict[str, Any]:
    sky, plan = request.config.launch.skypilot, request.plan
    out: dict[str, Any] = {}
    if sky.infra:
        out["infra"] = sky.infra
    if sky.accelerators and plan.gpus_per_replica:
        kind = sky.accelerators.partition(":")[0]
        out["accelerators"] = f"{kind}:{plan.gpus_per_replica}"
    if sky.cpus:
        out["cpus"] = sky.cpus
    if sky.memory:
        out["memory"] = sky.memory
    if sky.image:
        out["image_id"] = sky.image if sky.image.startswith("docker:") else f"docker:{sky.image}"
    if sky.use_spot is not None:
        out["use_spot"] = sky.use_spot
    if sky.managed:
        recovery: dict[str, Any] = {}
        if sky.recovery:
            recovery["strategy"] = sky.recovery
        cap = max_retries(request.config)
        if cap is not None:
            # SkyPilot restarts a failed managed job this many times; the agents count the same
            # attempts (and preemption recoveries too) and refuse one past the cap.
            recovery["max_restarts_on_errors"] = cap
        if recovery:
            out["job_recovery"] = recovery
    return out


def _volumes(request: RenderRequest) -> dict[str, Any]:
    mount = request.config.launch.skypilot.mount
    if not mount.path:
        return {}
    if mount.volume:
        return {mount.path: mount.volume}
    # SkyPilot binds a host path read-only unless told otherwise; the run directory is written.
    return {mount.path: {"host_path": mount.host_path, "mode": "rw"}}


# SkyPilot's runtime runs the task as a task of its own Ray cluster and passes that Ray job's variables
# on (log_lib.add_ray_env_vars); the agents start a Ray cluster of their own, which must not inherit them.
SKYPILOT_RAY_ENV = (DriverEnv.RAY_ADDRESS, "RAY_JOB_ID", "RAY_CLIENT_MODE")


def run_command(request: RenderRequest) -> str:
    """What every node runs: exec the agent, so SkyPilot's signals reach it directly."""
    argv = pinned_agent_argv(request, request.config.launch.skypilot.agent)
    return f"unset {' '.join(SKYPILOT_RAY_ENV)}; exec " + shlex.join(argv)


def task(request: RenderRequest, spec_json: str) -> dict[str, Any]:
    config, plan = request.config, request.plan
    sky = config.launch.skypilot
    envs = dict(sorted(config.launch.env.items()))
    envs[SPEC_JSON_ENV] = spec_json
    # A recovery or restart runs the same task again under the same SKYPILOT_TASK_ID.
    envs[ResumeEnv.RESUME] = ResumeEnv.RESTART
    out: dict[str, Any] = {"name": job_name(config, request.uuid), "num_nodes": plan.replicas}
    resources = _resources(request)
    if resources:
        out["resources"] = resources
    volumes = _volumes(request)
    if volumes:
        out["volumes"] = volumes
    out["envs"] = envs
    if config.launch.secrets:
        # A null value: a reference SkyPilot resolves (--secret NAME, or its secrets store).
        out["secrets"] = dict.fromkeys(sorted(config.launch.secrets), None)
    if sky.setup:
        out["setup"] = sky.setup
    out["run"] = run_command(request)
    return out


def cli_command(config: RunConfig, uuid: str, job_path: str) -> tuple[str, ...]:
    """The `sky` command line equivalent to what submit does through the Python API."""
    secrets = [a for name in sorted(config.launch.secrets) for a in ("--secret", name)]
    if config.launch.skypilot.managed:
        return ("sky", "jobs", "launch", "--name", job_name(config, uuid), *secrets, "--yes", job_path)
    return ("sky", "launch", "--cluster", cluster_name(config, uuid), *secrets, "--yes", job_path)


def render(request: RenderRequest) -> Rendered:
    spec_json = inline_spec(request, "a SkyPilot task", _problems(request))
    config, plan = request.config, request.plan
    sky = config.launch.skypilot
    where = posixpath.join(request.output_root, "cluster", request.uuid, names.job_file(FILE_SUFFIX))
    cap = max_retries(config)
    comments = (
        f"gym-agent run {config.name}: {plan.replicas} node(s) x {plan.gpus_per_replica} GPUs, uuid {request.uuid}",
        f"fingerprint {config.fingerprint}",
        f"gym-launch submit runs the equivalent of: {shlex.join(cli_command(config, request.uuid, where))}",
        f"OUTPUT ROOT {request.output_root} MUST BE A SHARED POSIX FILESYSTEM mounted at this path on every node:",
        f"the replicas coordinate through {posixpath.join(request.output_root, 'cluster', request.uuid)}.",
        f"The run spec is carried inline ({SPEC_JSON_ENV}); every node checks its fingerprint.",
        "Identity from SkyPilot: SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES, SKYPILOT_NODE_IPS; token SKYPILOT_TASK_ID.",
        *_restart_comments(sky.managed, cap),
    )
    return Rendered(backend="skypilot", text=dump(task(request, spec_json), comments), file_name=FILE_SUFFIX)


def _restart_comments(managed: bool, cap: int | None) -> tuple[str, ...]:
    if not managed:
        return ("Not a managed job: nothing restarts the task; a new launch of it needs gym-launch submit --resume.",)
    allowed = (
        f"SkyPilot restarts a failed job up to {cap} time(s) (job_recovery.max_restarts_on_errors)"
        if cap is not None
        else "no [launch] max_retries: SkyPilot recovers preemptions only"
    )
    return (
        f"Restarts: {allowed}; each recovery or restart is a new attempt of the run",
        f"({ResumeEnv.RESUME}={ResumeEnv.RESTART}, token skypilot-$SKYPILOT_TASK_ID), counted by the agents from "
        "attempts/.",
    )
