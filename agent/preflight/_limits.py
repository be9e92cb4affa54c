"""The limits check: the open-files and locked-memory limits this node gives the run's processes
(they inherit the agent's).

Open files: Ray and PyTorch's data loaders open many; below `min_open_files` (Ray's large-cluster
guidance is 65536) they fail with "Too many open files" under load. Locked memory: RDMA pins its
buffers, so a node with RDMA devices (/sys/class/infiniband) needs `min_locked_memory`
(unlimited by default); elsewhere it is only reported. The soft limit is what a process gets; the
hard one is how far it may raise it itself (the message says both).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from agent.preflight._outcome import Observed, gib

__all__ = ["RDMA_CLASS", "check_limits", "rdma_devices"]

RDMA_CLASS = Path("/sys/class/infiniband")


def _shown(n: int, unit_bytes: bool = False) -> str:
    if n == resource.RLIM_INFINITY:
        return "unlimited"
    return gib(n) if unit_bytes else str(n)


def rdma_devices(root: Path = RDMA_CLASS) -> list[str]:
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def check_limits(min_open_files: int, min_locked: int | None) -> Observed:
    """`min_locked` None: unlimited is required (on RDMA nodes)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    rdma = rdma_devices()
    problems = []
    soft, hard = nofile
    if soft != resource.RLIM_INFINITY and soft < min_open_files:
        admins = (
            ", so the admins must raise that first" if hard != resource.RLIM_INFINITY and hard < min_open_files else ""
        )
        problems.append(
            f"open files: the soft limit is {soft} (ulimit -n), below [launch.preflight] min_open_files = "
            f"{min_open_files}: raise it in the job (ulimit -n {min_open_files}; the hard limit here is "
            f"{_shown(hard)}{admins})"
        )
    lsoft, lhard = memlock
    if rdma:
        short = lsoft != resource.RLIM_INFINITY and (min_locked is None or lsoft < min_locked)
        if short:
            want = "unlimited" if min_locked is None else gib(min_locked)
            problems.append(
                f"locked memory: the soft limit is {_shown(lsoft, True)} (ulimit -l) on a node with RDMA devices "
                f"({', '.join(rdma[:4])}), below [launch.preflight] min_locked_memory = {want}: RDMA cannot pin "
                f"its buffers; set ulimit -l unlimited in the job (the hard limit here is {_shown(lhard, True)})"
            )
    summary = (
        f"open files {_shown(soft)} (hard {_shown(hard)}); locked memory {_shown(lsoft, True)} "
        f"(hard {_shown(lhard, True)}); {'RDMA: ' + ', '.join(rdma[:4]) if rdma else 'no RDMA device'}"
    )
    facts = {
        "nofile": {"soft": soft, "hard": hard},
        "memlock": {"soft": lsoft, "hard": lhard},
        "rdma_devices": rdma[:32],
    }
    return Observed(summary, tuple(problems), facts)
