"""Ask the scheduler why the job ended, when the run's own files do not say.

The job output's slurmstepd line (audit/scheduler_ending.py) is the best evidence, but it is not
always there: a Beaker task's output lives in Beaker, a Slurm job may write its output elsewhere,
and when the batch host itself dies nobody writes the line. Then the scheduler still knows, for a
while: Slurm keeps a finished job's record (MinJobAge, 300 s by default) and a node's state and
reason until an admin resumes it; Beaker keeps every job's cancelation code. The agents record
their scheduler job and node in their address records (SchedulerJob), which is what is asked
about here.

Measured on Slurm 22.05: at the moment an agent's SIGTERM arrives, ``scontrol show job`` says
JobState=COMPLETING Reason=None for a cancel and for a preemption alike, so asking then tells
nothing; afterwards the record says TIMEOUT, CANCELLED, NODE_FAIL or PREEMPTED (a preempted job
that was requeued is PENDING again, and only its output's line says why). Asking is bounded in time
and never fails the audit: an unreachable scheduler is a note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from audit import scheduler_clients as clients
from audit.model import Cause
from audit.scheduler_ending import SchedulerEnding
from audit.views import AddressRec
from schemas import FailureKind

ASK_TIMEOUT_S = clients.ASK_TIMEOUT_S  # per scheduler: the audit must stay fast when it is not reachable
# Slurm node states that mean the node is gone or taken out of service.
_NODE_GONE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN")
_SLURM_JOB_STATES = {
    "TIMEOUT": FailureKind.TIME_LIMIT,
    "DEADLINE": FailureKind.TIME_LIMIT,
    "CANCELLED": FailureKind.CANCELLED,
    "NODE_FAIL": FailureKind.NODE_FAILURE,
    "PREEMPTED": FailureKind.PREEMPTED,
}
# Beaker's cancelation codes (beaker-py's protobuf CancelationCode), by the ending they are.
# SIBLING_TASK_FAILED / SIBLING_TASK_RETRY are left out: a sibling's own failure is the cause then.
BEAKER_CODES = {
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
# SkyPilot's job statuses (ManagedJobStatus / JobStatus values) that are an ending of SkyPilot's.
SKYPILOT_CANCELLED = ("CANCELLED", "CANCELLING")
SKYPILOT_RECOVERING = "RECOVERING"  # a managed job whose cluster was preempted or failed
# Kinds of a rank that stopped without saying why itself: its node is worth asking about.
_SILENT = ("silent", FailureKind.AGENT_DIED, FailureKind.PEER_SILENT)


@dataclass(frozen=True)
class Answer:
    """What asking gave: an ending, or a note saying why there is none (None: nothing to ask)."""

    ending: SchedulerEnding | None
    note: str | None = None


def _kv(text: str) -> dict[str, str]:
    """scontrol -o output: KEY=VALUE fields separated by spaces (values have no spaces but Reason's)."""
    out: dict[str, str] = {}
    key = None
    for part in text.strip().split(" "):
        if "=" in part and part.split("=", 1)[0].isalnum():
            key, value = part.split("=", 1)
            out[key] = value
        elif key is not None:
            out[key] += " " + part  # Reason=Not responding [slurm@...]
    return out


def _scontrol(*args: str) -> str | None:
    import shutil
    import subprocess  # only when the scheduler is asked: most audits never are

    exe = shutil.which("scontrol")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=ASK_TIMEOUT_S / 2, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 and r.stdout.strip() else None


def silent_ranks(causes: Iterable[Cause]) -> list[int]:
    out = []
    for c in causes:
        rank = c.reacting_to if c.kind == FailureKind.PEER_SILENT else c.rank
        if c.kind in _SILENT and rank is not None and rank not in out:
            out.append(rank)
    return out


def ask_slurm(job_id: str | None, silent: Iterable[int], addresses: Mapping[int, AddressRec]) -> Answer:
    import shutil

    if shutil.which("scontrol") is None:
        return Answer(None, "the scheduler was not asked: scontrol is not on PATH here")
    for rank in silent:
        addr = addresses.get(rank)
        node = (addr.job.node if addr and addr.job else None) or (addr.hostname if addr else None)
        text = _scontrol("show", "node", "-o", node) if node else None
        if text is None:
            continue
        kv = _kv(text)
        state = kv.get("State", "")
        if any(word in state.replace("*", "+NOT_RESPONDING").split("+") for word in _NODE_GONE):
            words = f"State={state}" + (f" Reason={kv['Reason']}" if kv.get("Reason") else "")
            return Answer(_asked(FailureKind.NODE_FAILURE, job_id or "?", node, words, f"scontrol show node {node}"))
    if job_id:
        text = _scontrol("show", "job", "-o", job_id)
        if text is None:
            return Answer(None, f"the scheduler was asked about job {job_id} and no longer knows it")
        kv = _kv(text)
        state = kv.get("JobState", "")
        kind = _SLURM_JOB_STATES.get(state)
        if kind is not None:
            words = f"JobState={state} Reason={kv.get('Reason', 'None')}"
            if kv.get("EndTime"):
                words += f" EndTime={kv['EndTime']}"
            return Answer(_asked(kind, job_id, None, words, f"scontrol show job {job_id}"))
        return Answer(None, f"the scheduler says job {job_id} is {state or 'in an unknown state'}")
    return Answer(None)


def _asked(kind: FailureKind, job: str, node: str | None, words: str, command: str) -> SchedulerEnding:
    return SchedulerEnding(kind, job, node or "", "", f"{command}: {words}", None, 0, node=node)


def ask_beaker(addresses: Mapping[int, AddressRec]) -> Answer:
    refs = [(rank, a.job) for rank, a in sorted(addresses.items()) if a.job and a.job.scheduler == "beaker"]
    if not refs:
        return Answer(None)
    client = clients.beaker_client()
    if client.value is None:
        return Answer(None, f"Beaker was not asked: {client.why_not}")
    asked = clients.beaker_jobs(client.value, [r.job for _, r in refs])
    if not asked.value:
        return Answer(None, "Beaker was asked about the replicas' jobs and did not answer")
    by_job = {ref.job: ref for _, ref in refs}
    for job_id, job in asked.value:
        code = clients.beaker_cancelation(job)
        kind = BEAKER_CODES.get(code or "")
        if code is None or kind is None:
            continue
        words = f"job {job_id} canceled: {beaker_code_label(code)}"
        why = str(getattr(getattr(job, "status", None), "canceled_for", "") or "")
        if why:
            words += f" ({why})"
        node = by_job[job_id].node if job_id in by_job else None
        return Answer(_asked(kind, job_id, node, words, "Beaker job status"))
    return Answer(None, "Beaker says the replicas' jobs were not canceled by Beaker")


def beaker_code_label(code: str) -> str:
    """CANCELATION_CODE_SYSTEM_PREEMPTION -> system preemption."""
    return code.removeprefix("CANCELATION_CODE_").lower().replace("_", " ")


def skypilot_ending(record: Any) -> FailureKind | None:
    """The ending a SkyPilot job record names, as the audit reads it: cancelled by its user, or
    being recovered after its cluster was preempted (or lost: then a node failure)."""
    status = clients.skypilot_status_name(record)
    if status in SKYPILOT_CANCELLED:
        return FailureKind.CANCELLED
    if status == SKYPILOT_RECOVERING:
        words = " ".join(str(clients.field(record, k) or "") for k in ("failure_reason", "details")).lower()
        return FailureKind.PREEMPTED if "preempt" in words else FailureKind.NODE_FAILURE
    return None


def ask_skypilot(job_id: str | None) -> Answer:
    """SkyPilot's record of the run's job (submission.json names it): managed job N or CLUSTER/N."""
    if not job_id:
        return Answer(None)
    sky = clients.skypilot_ready()
    if sky.value is None:
        return Answer(None, f"SkyPilot was not asked ({clients.skypilot_would_ask(job_id)}): {sky.why_not}")
    found = clients.skypilot_job(sky.value, job_id)
    if found.value is None:
        return Answer(None, f"SkyPilot was asked about job {job_id}: {found.why_not}")
    record = found.value
    status = clients.skypilot_status_name(record) or "an unknown state"
    kind = skypilot_ending(record)
    if kind is None:
        return Answer(None, f"SkyPilot says job {job_id} is {status}")
    words = f"job {job_id} {status}"
    reason = clients.field(record, "failure_reason") or clients.field(record, "details")
    if reason:
        words += f" ({reason})"
    return Answer(_asked(kind, job_id, None, words, "SkyPilot job queue"))


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
    if scheduler == "slurm":
        return ask_slurm(job_id, silent_ranks(causes), addresses)
    if scheduler == "beaker":
        return ask_beaker(addresses)
    if scheduler == "skypilot":
        return ask_skypilot(job_id)
    return Answer(None)
