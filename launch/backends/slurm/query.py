"""The read-only questions to Slurm and the parsing of its answers: ``scontrol show job|node|partition
--oneliner``. `gym-launch status` asks what a job is doing, `gym-launch regrade` a partition's
MaxTime, and the audit why a job ended when its output does not say. Nothing here changes Slurm.

Slurm keeps a finished job's record for a while (MinJobAge, 300 s by default) and a node's state and
reason until an admin resumes it. Measured on Slurm 22.05: at the moment an agent's SIGTERM arrives,
``scontrol show job`` says JobState=COMPLETING Reason=None for a cancel and for a preemption alike,
so asking then tells nothing; afterwards the record says TIMEOUT, CANCELLED, NODE_FAIL or PREEMPTED
(a preempted job that was requeued is PENDING again, and only its output's line says why).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence

from launch.backends.answers import Answer, SchedulerEnding, SchedulerView, asked_ending
from launch.backends.asking import ASK_TIMEOUT_S, Asked
from schemas import FailureKind

__all__ = [
    "JOB_ENDINGS",
    "LIVE_JOB_STATES",
    "ending",
    "fields",
    "job_record",
    "partition_max_time",
    "scontrol",
    "view",
]

SCONTROL_TIMEOUT_S = 30  # the launcher's questions: someone waits at a prompt for them
ENDING_TIMEOUT_S = ASK_TIMEOUT_S / 2  # the audit's, a node's and the job's: it must stay fast
# Slurm job states in which the job may still run its agents (the rest are endings).
LIVE_JOB_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"})
# Job states that are an ending of Slurm's own doing.
JOB_ENDINGS = {
    "TIMEOUT": FailureKind.TIME_LIMIT,
    "DEADLINE": FailureKind.TIME_LIMIT,
    "CANCELLED": FailureKind.CANCELLED,
    "NODE_FAIL": FailureKind.NODE_FAILURE,
    "PREEMPTED": FailureKind.PREEMPTED,
}
# Node states that mean the node is gone or taken out of service.
NODE_GONE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN")
# A field's name: Socks/Node and NtasksPerN:B:S:C are names too.
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_/:]*")


def scontrol(args: Sequence[str], timeout: float) -> Asked[str]:
    """scontrol's output, or why there is none (not installed, no answer in time, an error)."""
    exe = shutil.which("scontrol")
    if exe is None:
        return Asked(None, "scontrol is not on PATH")
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Asked(None, f"scontrol did not answer within {timeout:g} s (is slurmctld up?)")
    except (OSError, subprocess.SubprocessError) as exc:
        return Asked(None, f"scontrol could not run: {exc}")
    if out.returncode != 0:
        # A finished job leaves the controller after MinJobAge: then only sacct knows it.
        return Asked(None, (out.stderr or out.stdout).strip() or f"scontrol exited {out.returncode}")
    return Asked(out.stdout)


def fields(line: str) -> dict[str, str]:
    """One ``--oneliner`` record: KEY=VALUE fields separated by spaces. Only free text holds a
    space (a node's Reason=Not responding [slurm@...]): a word that starts no field continues the
    value before it."""
    out: dict[str, str] = {}
    key = None
    for word in line.split():
        name, eq, value = word.partition("=")
        if eq and _KEY.fullmatch(name):
            key = name
            out[key] = value
        elif key is not None:
            out[key] += " " + word
    return out


def _first_record(text: str) -> dict[str, str]:
    """The first line's fields (a heterogeneous job prints one line per component)."""
    lines = text.strip().splitlines()
    return fields(lines[0]) if lines else {}


def partition_max_time(partition: str | None) -> str | None:
    """MaxTime of ``partition`` (None: the default partition); None when scontrol is missing or says
    nothing about it (no cluster answered, or no such partition: sbatch will say which)."""
    said = scontrol(("show", "partition", "--oneliner", *([partition] if partition else [])), SCONTROL_TIMEOUT_S)
    for line in (said.value or "").splitlines():
        kv = fields(line)
        if (kv.get("PartitionName") != partition) if partition else (kv.get("Default") != "YES"):
            continue
        return kv.get("MaxTime")
    return None


def job_record(job_id: str, timeout: float = SCONTROL_TIMEOUT_S) -> Asked[dict[str, str]]:
    """`scontrol show job` as fields (JobState, Reason, NodeList, Restarts, ...), or why it could not
    be read (no scontrol, the controller does not answer, the job is gone)."""
    said = scontrol(("show", "job", "--oneliner", job_id), timeout)
    return Asked(None, said.why_not) if said.value is None else Asked(_first_record(said.value))


def view(job: str, replicas: int | None = None) -> SchedulerView:
    """`gym-launch status`'s view of the job (``replicas``: unused, Slurm's record is the job's)."""
    asks = f"scontrol show job {job}"
    rec = job_record(job)
    if rec.value is None:
        return SchedulerView("slurm", job, error=rec.why_not, asks=asks)
    state, restarts = rec.value.get("JobState"), rec.value.get("Restarts")
    return SchedulerView(
        "slurm",
        job,
        state=state,
        reason=rec.value.get("Reason"),
        nodes=rec.value.get("NodeList") or None,
        restarts=int(restarts) if restarts and restarts.isdigit() else None,
        asks=asks,
        ended=state is not None and state not in LIVE_JOB_STATES,
        restarted="requeued",
    )


def _node_ending(node: str, job_id: str | None) -> SchedulerEnding | None:
    """The node's state and reason, when they say the node is gone."""
    said = scontrol(("show", "node", "--oneliner", node), ENDING_TIMEOUT_S)
    kv = _first_record(said.value or "")
    state = kv.get("State", "")
    # A trailing * is Slurm's spelling of "not responding".
    if not any(word in state.replace("*", "+NOT_RESPONDING").split("+") for word in NODE_GONE):
        return None
    words = f"State={state}" + (f" Reason={kv['Reason']}" if kv.get("Reason") else "")
    return asked_ending(FailureKind.NODE_FAILURE, job_id or "?", node, words, f"scontrol show node {node}")


def _job_ending(job_id: str) -> Answer:
    rec = job_record(job_id, ENDING_TIMEOUT_S)
    if not rec.value:
        return Answer(None, f"the scheduler was asked about job {job_id} and no longer knows it")
    state = rec.value.get("JobState", "")
    kind = JOB_ENDINGS.get(state)
    if kind is None:
        return Answer(None, f"the scheduler says job {job_id} is {state or 'in an unknown state'}")
    words = f"JobState={state} Reason={rec.value.get('Reason', 'None')}"
    if rec.value.get("EndTime"):
        words += f" EndTime={rec.value['EndTime']}"
    return Answer(asked_ending(kind, job_id, None, words, f"scontrol show job {job_id}"))


def ending(job_id: str | None, nodes: Iterable[str]) -> Answer:
    """Slurm's account of how the job ended: the first of ``nodes`` (where ranks vanished without a
    word) that it says is gone, else the job's own record."""
    if shutil.which("scontrol") is None:
        return Answer(None, "the scheduler was not asked: scontrol is not on PATH here")
    for node in nodes:
        found = _node_ending(node, job_id)
        if found is not None:
            return Answer(found)
    return _job_ending(job_id) if job_id else Answer(None)
