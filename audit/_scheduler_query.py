"""Ask the scheduler why the job ended, when the run's own files do not say.

The job output's slurmstepd line (audit/_scheduler_ending.py) is the best evidence, but it is not
always there: a Beaker task's output lives in Beaker, a Slurm job may write its output elsewhere,
and when the batch host itself dies nobody writes the line. Then the scheduler still knows, for a
while. The agents record their scheduler job and node in their address records (SchedulerJob),
which is what is asked about: the questions and the reading of the answers are each backend's
(``launch/backends/*/query.py``); this module picks what to ask from the run's records. Asking is
bounded in time and never fails the audit: an unreachable scheduler is a note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from audit._model import Cause
from audit._views import AddressRec
from schemas import FailureKind

if TYPE_CHECKING:
    from launch.backends.answers import Answer

__all__ = ["ask", "recorded_job", "scheduler_of", "silent_ranks"]

# Kinds of a rank that stopped without saying why itself: its node is worth asking about.
_SILENT = ("silent", FailureKind.AGENT_DIED, FailureKind.PEER_SILENT)


def silent_ranks(causes: Iterable[Cause]) -> list[int]:
    out = []
    for c in causes:
        rank = c.reacting_to if c.kind == FailureKind.PEER_SILENT else c.rank
        if c.kind in _SILENT and rank is not None and rank not in out:
            out.append(rank)
    return out


def _slurm_nodes(silent: Iterable[int], addresses: Mapping[int, AddressRec]) -> list[str]:
    """The nodes the silent ranks ran on: the scheduler's own name for it, else the hostname."""
    out = []
    for rank in silent:
        addr = addresses.get(rank)
        node = (addr.job.node if addr and addr.job else None) or (addr.hostname if addr else None)
        if node:
            out.append(node)
    return out


def _beaker_jobs(addresses: Mapping[int, AddressRec]) -> list[tuple[str, str | None]]:
    """The replicas' Beaker jobs and their nodes, by rank."""
    return [(a.job.job, a.job.node) for _, a in sorted(addresses.items()) if a.job and a.job.scheduler == "beaker"]


def scheduler_of(backend: str | None, addresses: Mapping[int, AddressRec]) -> str | None:
    """The scheduler the run was submitted to, or, without a submission record, the one the
    agents say they ran under."""
    if backend in ("slurm", "beaker", "skypilot"):
        return backend
    found = sorted({a.job.scheduler for a in addresses.values() if a.job})
    return found[0] if found else None


def recorded_job(addresses: Mapping[int, AddressRec]) -> str | None:
    """The Slurm job the agents ran in (one job: a requeue keeps its id)."""
    jobs = sorted({a.job.job for a in addresses.values() if a.job and a.job.scheduler == "slurm"})
    return jobs[0] if len(jobs) == 1 else None


def ask(
    scheduler: str | None, job_id: str | None, causes: Iterable[Cause], addresses: Mapping[int, AddressRec]
) -> Answer:
    """The scheduler's own account of the ending (`scheduler`: scheduler_of's answer)."""
    # Each backend's query module (subprocess and all) is imported only when that scheduler is
    # asked: most audits never ask (issue 51: the audit's start-up time).
    if scheduler == "slurm":
        from launch.backends.slurm import query as slurm

        return slurm.ending(job_id, _slurm_nodes(silent_ranks(causes), addresses))
    if scheduler == "beaker":
        from launch.backends.beaker import query as beaker

        return beaker.ending(_beaker_jobs(addresses))
    if scheduler == "skypilot":
        from launch.backends.skypilot import query as skypilot

        return skypilot.ending(job_id)
    from launch.backends.answers import Answer

    return Answer(None)
