"""The scheduler's side of a submitted run for `gym-launch status`: what its job is doing, as the
scheduler the run was submitted to says (submission.json names the backend and the job).

- Slurm: `scontrol show job` (JobState, Reason, NodeList, Restarts).
- Beaker: beaker-py, with the user's own Beaker configuration: the experiment's workload status and
  its task's replica jobs (the newest launch's: status, node, cancelation code read as the audit
  reads it; earlier launches are Beaker's retries).
- SkyPilot: its Python API through the configured API server: the managed job's record (status,
  recoveries, failure reason), or the cluster job's for ``CLUSTER/N`` (``managed = false``).

Asked at each look, bounded in time; without a client (no package, no configuration, no server
answering) the view says why and what it would have asked (`asks`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from audit import scheduler_clients as clients

# Slurm job states in which the job may still run its agents (the rest are endings).
LIVE_JOB_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"})
BEAKER_ENDED = frozenset({"CANCELED", "SUCCEEDED", "FAILED"})


@dataclass(frozen=True)
class SchedulerView:
    """The scheduler's side of a submitted run, asked at each look. `error` when it could not be asked."""

    backend: str
    job_id: str
    state: str | None = None  # as the scheduler spells it: PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    reason: str | None = None  # why it pends or ended, in the scheduler's words
    nodes: str | None = None  # the nodes it got
    restarts: int | None = None  # requeues (Slurm), retries (Beaker), recoveries (SkyPilot)
    error: str | None = None
    asks: str = ""  # what is (or, without a client, would be) asked
    ended_: bool = False  # the job has ended (set for the backends whose states are not Slurm's)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "nodes": self.nodes,
            "restarts": self.restarts,
            "error": self.error,
            "asks": self.asks,
        }

    @property
    def ended(self) -> bool:
        if self.backend == "slurm":
            return self.state is not None and self.state not in LIVE_JOB_STATES
        return self.ended_

    def describe(self) -> str:
        head = f"{self.backend} job {self.job_id}"
        if self.error:
            return f"{head}: state unknown ({self.error}; would ask {self.asks})"
        text = f"{head} {self.state or '?'}"
        if self.reason and self.reason != "None":
            text += f" ({self.reason})"
        if self.nodes and self.nodes != "(null)":
            text += f" on {self.nodes}"
        if self.restarts:
            text += f"; {'requeued' if self.backend == 'slurm' else 'restarted'} {self.restarts} time(s)"
        return text


def scheduler_view(submission: dict[str, Any] | None, replicas: int | None) -> SchedulerView | None:
    """Ask the scheduler about the submitted run's job; None for a run that was not submitted (local)."""
    if not submission or not isinstance(submission.get("job_id"), str):
        return None
    backend, job = str(submission.get("backend")), str(submission["job_id"])
    if backend == "slurm":
        return slurm_view(job)
    if backend == "beaker":
        return beaker_view(job, replicas)
    if backend == "skypilot":
        return skypilot_view(job)
    return SchedulerView(backend, job, error=f"gym-launch status knows no scheduler {backend!r}", asks="nothing")


def slurm_view(job: str) -> SchedulerView:
    from launch.backends.slurm import job_record

    asks = f"scontrol show job {job}"
    rec = job_record(job)
    if isinstance(rec, str):
        return SchedulerView("slurm", job, error=rec, asks=asks)
    restarts = rec.get("Restarts")
    return SchedulerView(
        "slurm",
        job,
        state=rec.get("JobState"),
        reason=rec.get("Reason"),
        nodes=rec.get("NodeList") or None,
        restarts=int(restarts) if restarts and restarts.isdigit() else None,
        asks=asks,
    )


def _counted(values: list[str]) -> str:
    """RUNNING, or RUNNING x2, QUEUED x1 when the replicas differ."""
    counts = Counter(values)
    if len(counts) == 1:
        return values[0]
    return ", ".join(f"{v} x{n}" for v, n in counts.most_common())


def beaker_view(experiment: str, replicas: int | None) -> SchedulerView:
    from audit.scheduler_query import BEAKER_CODES, beaker_code_label  # the codes as the audit reads them

    asks = clients.beaker_would_ask(experiment)
    asked = clients.then(clients.beaker_client(), lambda client: clients.beaker_experiment(client, experiment))
    if asked.value is None:
        return SchedulerView("beaker", experiment, error=asked.why_not, asks=asks)
    workload, jobs = asked.value
    # The newest launch: one job per replica (jobs come newest first); older ones are Beaker's retries.
    size = replicas or len(jobs)
    current = jobs[:size]
    state = clients.beaker_status_name(workload.status) if workload.status else None
    job_states = [clients.beaker_status_name(j.status.status) for j in current]
    if not state or state == "UNSPECIFIED":
        state = _counted(job_states) if job_states else "no job yet"
    reasons = []
    for code in dict.fromkeys(c for j in current if (c := clients.beaker_cancelation(j))):
        kind = BEAKER_CODES.get(code)
        reasons.append(f"canceled: {beaker_code_label(code)}" + (f" ({kind})" if kind else ""))
    reasons += list(dict.fromkeys(m for j in current if (m := j.status.failed_scheduling_message or j.status.message)))
    if job_states and _counted(job_states) != state:
        reasons.insert(0, f"jobs {_counted(job_states)}")
    nodes = ",".join(dict.fromkeys(n for j in current if (n := j.assignment_details.node_id))) or None
    return SchedulerView(
        "beaker",
        experiment,
        state=state,
        reason="; ".join(reasons) or None,
        nodes=nodes,
        restarts=max(0, len(jobs) // size - 1) if size else None,
        asks=asks,
        ended_=state in BEAKER_ENDED,
    )


def skypilot_view(job: str) -> SchedulerView:
    from audit.scheduler_query import skypilot_ending  # the ending as the audit reads it

    asks = clients.skypilot_would_ask(job)
    found = clients.then(clients.skypilot_ready(), lambda sky: clients.skypilot_job(sky, job))
    if found.value is None:
        return SchedulerView("skypilot", job, error=found.why_not, asks=asks)
    record = found.value
    reason = clients.field(record, "failure_reason") or clients.field(record, "details")
    kind = skypilot_ending(record)
    if kind is not None:
        reason = f"{reason} ({kind})" if reason else str(kind)
    infra = clients.field(record, "infra") or clients.field(record, "cluster_resources")
    recoveries = clients.field(record, "recovery_count")
    return SchedulerView(
        "skypilot",
        job,
        state=clients.skypilot_status_name(record),
        reason=reason or None,
        nodes=clients.field(record, "node_names") or (str(infra) if infra else None),
        restarts=int(recoveries) if isinstance(recoveries, int) else None,
        asks=asks,
        ended_=clients.skypilot_terminal(record),
    )
