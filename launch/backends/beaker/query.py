"""The read-only questions to Beaker (beaker-py, with the user's own configuration) and the reading
of its answers: an experiment's workload and its task's replica jobs for `gym-launch status`, the
replicas' jobs and their cancelation codes for the audit (why the job ended). Every question is
bounded in time and never raises (launch/backends/asking.py); nothing here changes anything in Beaker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from launch.backends.answers import Answer, SchedulerView, asked_ending
from launch.backends.asking import Asked, bounded, then
from schemas import FailureKind

__all__ = ["CODES", "INSTALL_HINT", "client", "code_label", "ending", "view"]

INSTALL_HINT = "pip install 'gym-agent[beaker]'"
NO_CONFIG = "no Beaker configuration here (~/.beaker/config.yml, $BEAKER_CONFIG or BEAKER_TOKEN)"
JOBS_LIMIT = 256  # a task's jobs, newest first: every replica of its latest launches
ENDED = frozenset({"CANCELED", "SUCCEEDED", "FAILED"})  # workload states that are an ending
# Beaker's cancelation codes (beaker-py's protobuf CancelationCode), by the ending they are.
# SIBLING_TASK_FAILED / SIBLING_TASK_RETRY are left out: a sibling's own failure is the cause then.
CODES = {
    "CANCELATION_CODE_SYSTEM_PREEMPTION": FailureKind.PREEMPTED,
    "CANCELATION_CODE_USER_PREEMPTION": FailureKind.PREEMPTED,
    "CANCELATION_CODE_SIBLING_TASK_PREEMPTION": FailureKind.PREEMPTED,
    "CANCELATION_CODE_MANUAL": FailureKind.CANCELLED,
    "CANCELATION_CODE_IDLE": FailureKind.CANCELLED,
    "CANCELATION_CODE_TIMEOUT": FailureKind.TIME_LIMIT,
    "CANCELATION_CODE_NODE_UNAVAILABLE": FailureKind.NODE_FAILURE,
    "CANCELATION_CODE_NODE_UNHEALTHY": FailureKind.NODE_FAILURE,
    "CANCELATION_CODE_HEALTHCHECK_FAILED": FailureKind.NODE_FAILURE,
}


def client() -> Asked[Any]:
    """A beaker-py client from the user's own configuration, or why there is none."""
    try:
        from beaker import Beaker
    except ImportError:
        return Asked(None, f"beaker-py is not installed ({INSTALL_HINT})")
    try:
        return Asked(Beaker.from_env(check_for_upgrades=False))
    except Exception:  # noqa: BLE001 - no configuration, a broken one
        return Asked(None, NO_CONFIG)


def would_ask(experiment: str) -> str:
    return f"Beaker for experiment {experiment} and its task's jobs (beaker-py: workload.get, job.list)"


def _experiment(beaker: Any, experiment: str) -> Asked[tuple[Any, list[Any]]]:
    """The experiment's workload and its task's jobs (a replica group: one job per replica and launch),
    newest first."""

    def question() -> tuple[Any, list[Any]]:
        workload = beaker.workload.get(experiment)
        jobs = [job for task in workload.experiment.tasks for job in beaker.job.list(task=task, limit=JOBS_LIMIT)]
        return workload, jobs

    return bounded(question, "Beaker")


def _jobs(beaker: Any, job_ids: list[str]) -> Asked[list[tuple[str, Any]]]:
    """Each of ``job_ids``' job (those Beaker still knows)."""

    def question() -> list[tuple[str, Any]]:
        found = []
        for job_id in job_ids:
            try:
                found.append((job_id, beaker.job.get(job_id)))
            except Exception:  # noqa: BLE001 - one job Beaker no longer knows is no answer for the others
                continue
        return found

    return bounded(question, "Beaker")


def status_name(value: int) -> str:
    """A WorkloadStatus number as Beaker spells it, less its prefix (STATUS_RUNNING -> RUNNING)."""
    from beaker import beaker_pb2 as pb2

    return str(pb2.WorkloadStatus.Name(int(value))).removeprefix("STATUS_")


def cancelation(job: Any) -> str | None:
    """A job's cancelation code as Beaker spells it (CANCELATION_CODE_MANUAL, ...), None when unset."""
    from beaker import beaker_pb2 as pb2

    code = int(getattr(getattr(job, "status", None), "canceled_code", 0) or 0)
    return pb2.CancelationCode.Name(code) if code else None


def code_label(code: str) -> str:
    """CANCELATION_CODE_SYSTEM_PREEMPTION -> system preemption."""
    return code.removeprefix("CANCELATION_CODE_").lower().replace("_", " ")


def ending(jobs: Sequence[tuple[str, str | None]]) -> Answer:
    """Beaker's account of how the replicas' jobs ended (``jobs``: each job id and its node): the
    first job Beaker canceled for a reason of its own."""
    if not jobs:
        return Answer(None)
    beaker = client()
    if beaker.value is None:
        return Answer(None, f"Beaker was not asked: {beaker.why_not}")
    asked = _jobs(beaker.value, [job_id for job_id, _ in jobs])
    if not asked.value:
        return Answer(None, "Beaker was asked about the replicas' jobs and did not answer")
    node_of = dict(jobs)
    for job_id, job in asked.value:
        code = cancelation(job)
        kind = CODES.get(code or "")
        if code is None or kind is None:
            continue
        words = f"job {job_id} canceled: {code_label(code)}"
        why = str(getattr(getattr(job, "status", None), "canceled_for", "") or "")
        if why:
            words += f" ({why})"
        return Answer(asked_ending(kind, job_id, node_of.get(job_id), words, "Beaker job status"))
    return Answer(None, "Beaker says the replicas' jobs were not canceled by Beaker")


def _counted(values: list[str]) -> str:
    """RUNNING, or RUNNING x2, QUEUED x1 when the replicas differ."""
    counts = Counter(values)
    if len(counts) == 1:
        return values[0]
    return ", ".join(f"{v} x{n}" for v, n in counts.most_common())


def _reasons(current: list[Any], state: str, job_states: list[str]) -> list[str]:
    """Why the newest launch's jobs stand where they do: cancelation codes read as the audit reads
    them, Beaker's own messages, and the jobs' states when they differ from the workload's."""
    reasons = []
    for code in dict.fromkeys(c for j in current if (c := cancelation(j))):
        kind = CODES.get(code)
        reasons.append(f"canceled: {code_label(code)}" + (f" ({kind})" if kind else ""))
    reasons += list(dict.fromkeys(m for j in current if (m := j.status.failed_scheduling_message or j.status.message)))
    if job_states and _counted(job_states) != state:
        reasons.insert(0, f"jobs {_counted(job_states)}")
    return reasons


def view(experiment: str, replicas: int | None) -> SchedulerView:
    """`gym-launch status`'s view of the experiment: the workload's state and the newest launch's
    replica jobs (status, node, cancelation code); earlier launches are Beaker's retries."""
    asks = would_ask(experiment)
    asked = then(client(), lambda beaker: _experiment(beaker, experiment))
    if asked.value is None:
        return SchedulerView("beaker", experiment, error=asked.why_not, asks=asks)
    workload, jobs = asked.value
    # The newest launch: one job per replica (jobs come newest first); older ones are Beaker's retries.
    size = replicas or len(jobs)
    current = jobs[:size]
    state = status_name(workload.status) if workload.status else None
    job_states = [status_name(j.status.status) for j in current]
    if not state or state == "UNSPECIFIED":
        state = _counted(job_states) if job_states else "no job yet"
    nodes = ",".join(dict.fromkeys(n for j in current if (n := j.assignment_details.node_id))) or None
    return SchedulerView(
        "beaker",
        experiment,
        state=state,
        reason="; ".join(_reasons(current, state, job_states)) or None,
        nodes=nodes,
        restarts=max(0, len(jobs) // size - 1) if size else None,
        asks=asks,
        ended=state in ENDED,
    )
