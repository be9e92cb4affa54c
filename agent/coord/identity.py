"""Who this replica is: rank, replica count, address and visible GPUs, from flags or environment.

Schedulers' environments, in this order (the first that names a rank wins): ours (GYM_REPLICA_*),
SkyPilot's (SKYPILOT_NODE_RANK/NUM_NODES; the address is this rank's line of SKYPILOT_NODE_IPS, the
GPUs SKYPILOT_NUM_GPUS_PER_NODE), Beaker's, Slurm's. SkyPilot comes before Slurm because a SkyPilot
task on a Slurm cluster runs inside a Slurm job whose ranks are not the task's.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from agent.ground.nvml import nvml_device_count
from launch.spec.errors import GymError
from schemas import JobEnv, order

__all__ = [
    "Identity",
    "IdentityError",
    "RANK_SOURCES",
    "SKYPILOT_COUNT",
    "SKYPILOT_GPUS",
    "SKYPILOT_IPS",
    "SKYPILOT_RANK",
    "SKYPILOT_TASK_ID",
    "SchedulerJob",
    "TEST_ADDRESS_ENV",
    "address_sort_key",
    "resolve",
    "resolve_address",
    "resolve_rank",
    "scheduler_job",
    "skypilot_address",
    "visible_devices",
]


class IdentityError(GymError):
    """A user-fixable problem with rank, count, address or GPUs; the message says what to set."""


@dataclass(frozen=True)
class SchedulerJob:
    """The scheduler's name for where this replica runs: what the audit asks the scheduler about
    afterwards (audit/_scheduler_query.py) when the run's own files do not say why it ended."""

    scheduler: str  # "slurm", "beaker" or "skypilot"
    job: str  # Slurm: the job id; Beaker: this replica's job id (one per replica and per retry); SkyPilot: the task id
    node: str | None  # Slurm: SLURMD_NODENAME; Beaker: BEAKER_NODE_ID; SkyPilot: SKYPILOT_NODE_RANK
    restart: int | None = None  # Slurm: SLURM_RESTART_COUNT (requeues so far)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"scheduler": self.scheduler, "job": self.job}
        if self.node:
            out["node"] = self.node
        if self.restart is not None:
            out["restart"] = self.restart
        return out


def scheduler_job(env: Mapping[str, str]) -> SchedulerJob | None:
    if env.get(SKYPILOT_TASK_ID):
        rank = env.get(SKYPILOT_RANK)
        return SchedulerJob("skypilot", env[SKYPILOT_TASK_ID], f"rank-{rank}" if rank else None)
    if env.get("SLURM_JOB_ID"):
        restart = env.get("SLURM_RESTART_COUNT", "0")
        return SchedulerJob(
            "slurm", env["SLURM_JOB_ID"], env.get("SLURMD_NODENAME"), int(restart) if restart.isdigit() else None
        )
    if env.get("BEAKER_JOB_ID"):
        return SchedulerJob("beaker", env["BEAKER_JOB_ID"], env.get("BEAKER_NODE_ID"))
    return None


@dataclass(frozen=True)
class Identity:
    rank: int
    count: int
    address: str  # numeric IPv4 or IPv6
    address_explicit: bool
    hostname: str
    visible_devices: tuple[str, ...]
    scheduler_job: SchedulerJob | None = None
    pool: str | None = None  # GYM_POOL: the [pools.NAME] this node's job step runs (Slurm, with pools)


SKYPILOT_RANK = "SKYPILOT_NODE_RANK"
SKYPILOT_COUNT = "SKYPILOT_NUM_NODES"
SKYPILOT_IPS = "SKYPILOT_NODE_IPS"  # one IP a line, in rank order
SKYPILOT_GPUS = "SKYPILOT_NUM_GPUS_PER_NODE"
SKYPILOT_TASK_ID = "SKYPILOT_TASK_ID"  # one for every node, kept across a managed job's recoveries

RANK_SOURCES = (
    ("GYM_REPLICA_RANK", "GYM_REPLICA_COUNT"),
    (SKYPILOT_RANK, SKYPILOT_COUNT),
    ("BEAKER_REPLICA_RANK", "BEAKER_REPLICA_COUNT"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise IdentityError(f"{what} must be an integer, got {value!r}") from None


def resolve_rank(rank: int | None, count: int | None, env: Mapping[str, str]) -> tuple[int, int]:
    if rank is None or count is None:
        for rvar, cvar in RANK_SOURCES:
            if rvar in env and cvar in env:
                rank = _int(env[rvar], rvar) if rank is None else rank
                count = _int(env[cvar], cvar) if count is None else count
                break
    if rank is None or count is None:
        raise IdentityError(
            "replica rank/count unknown: pass --rank R --replicas N, or set GYM_REPLICA_RANK/GYM_REPLICA_COUNT "
            "(SkyPilot: SKYPILOT_NODE_RANK/SKYPILOT_NUM_NODES, Beaker: BEAKER_REPLICA_RANK/COUNT, "
            "Slurm: SLURM_PROCID/SLURM_NTASKS)"
        )
    if count < 1 or not 0 <= rank < count:
        raise IdentityError(f"rank {rank} is outside 0..{count - 1} (replica count {count})")
    return rank, count


def _numeric(addr: str) -> str | None:
    try:
        return str(ipaddress.ip_address(addr.split("%")[0]))
    except ValueError:
        return None


# Test hook: several replicas of a rendered job on one machine (the Beaker replay) each get a
# loopback address, as explicitly as --address would, without changing the job's command. Only
# loopback addresses are accepted, so it cannot redirect a real node; a hostname that merely
# resolves to loopback is still refused below.
TEST_ADDRESS_ENV = "GYM_TEST_REPLICA_ADDRESS"


def _test_address(value: str) -> str:
    num = _numeric(value)
    if num is None or not ipaddress.ip_address(num).is_loopback:
        raise IdentityError(f"{TEST_ADDRESS_ENV}={value!r}: a test hook for loopback addresses only; unset it")
    return num


def resolve_address(explicit: str | None, env: Mapping[str, str]) -> tuple[str, bool]:
    """The address peers and Ray use for this node; a loopback result is refused unless explicit."""
    if not explicit and env.get(TEST_ADDRESS_ENV):
        return _test_address(env[TEST_ADDRESS_ENV]), True
    if explicit:
        num = _numeric(explicit)
        if num is None:
            try:
                num = str(socket.getaddrinfo(explicit, None)[0][4][0])
            except OSError as exc:
                raise IdentityError(f"--address {explicit!r} does not resolve: {exc}") from None
        return num, True
    sky = skypilot_address(env)
    if sky is not None:
        return _not_loopback(sky, f"{SKYPILOT_IPS} line {env[SKYPILOT_RANK]} is"), False
    host = env.get("BEAKER_NODE_HOSTNAME") or socket.gethostname()
    try:
        num = _numeric(host) or str(socket.getaddrinfo(host, None)[0][4][0])
    except OSError as exc:
        raise IdentityError(f"hostname {host!r} does not resolve ({exc}); pass --address") from None
    return _not_loopback(num, f"hostname {host!r} resolves to"), False


def _not_loopback(num: str, what: str) -> str:
    if ipaddress.ip_address(num).is_loopback:
        raise IdentityError(
            f"{what} loopback address {num}; peers on other nodes could not reach it. "
            "Pass --address with this node's routable address (or a loopback address explicitly for local runs)"
        )
    return num


def skypilot_address(env: Mapping[str, str]) -> str | None:
    """This node's IP in a SkyPilot task: line SKYPILOT_NODE_RANK of SKYPILOT_NODE_IPS; None outside one."""
    ips_text, rank_text = env.get(SKYPILOT_IPS), env.get(SKYPILOT_RANK)
    if not ips_text or rank_text is None:
        return None
    ips = [line.strip() for line in ips_text.splitlines() if line.strip()]
    rank = _int(rank_text, SKYPILOT_RANK)
    count = env.get(SKYPILOT_COUNT)
    if count is not None and _int(count, SKYPILOT_COUNT) != len(ips):
        raise IdentityError(f"{SKYPILOT_IPS} lists {len(ips)} address(es) but {SKYPILOT_COUNT} is {count}")
    if not 0 <= rank < len(ips):
        raise IdentityError(f"{SKYPILOT_RANK}={rank} has no line in {SKYPILOT_IPS} ({len(ips)} line(s))")
    num = _numeric(ips[rank])
    if num is None:
        raise IdentityError(f"{SKYPILOT_IPS} line {rank} is {ips[rank]!r}, not an IP address")
    return num


# The node order is part of the run-directory contract (the audit re-derives it): one key.
address_sort_key = order.address_key


def visible_devices(env: Mapping[str, str]) -> tuple[str, ...]:
    """CUDA_VISIBLE_DEVICES when set, else the first SKYPILOT_NUM_GPUS_PER_NODE (SkyPilot gave the task
    that many of the node's GPUs), else NVML's device count, else what nvidia-smi lists (a driver
    whose NVML the binding cannot load), else none."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return tuple(d.strip() for d in cvd.split(",") if d.strip())
    sky_gpus = env.get(SKYPILOT_GPUS)
    if sky_gpus is not None:
        return tuple(str(i) for i in range(_int(sky_gpus, SKYPILOT_GPUS)))
    counted = nvml_device_count()
    if counted is not None:
        return tuple(str(i) for i in range(counted))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU "))


def resolve(rank: int | None, count: int | None, address: str | None, env: Mapping[str, str] | None = None) -> Identity:
    env = os.environ if env is None else env
    r, n = resolve_rank(rank, count, env)
    addr, explicit = resolve_address(address, env)
    host = env.get("BEAKER_NODE_HOSTNAME") or socket.gethostname()
    return Identity(r, n, addr, explicit, host, visible_devices(env), scheduler_job(env), env.get(JobEnv.POOL) or None)
