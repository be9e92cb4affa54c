"""The schedulers' own clients beyond Slurm's scontrol: Beaker through beaker-py, SkyPilot through its
Python API. `gym-audit` asks them why a job ended (audit/scheduler_query.py) and `gym-launch status`
what a submitted job is doing (launch/scheduler_view.py); both read the answers here the same way.

Every question is bounded in time (`ASK_TIMEOUT_S`, in a daemon thread: a client may block on its
network) and never raises: without the package, a configuration or a server that answers, the
answer is why not, and `would_ask` says in words what would have been asked. Nothing here starts a
SkyPilot API server: it asks the configured one's health first, as `gym-launch submit` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

ASK_TIMEOUT_S = 10.0
BEAKER_INSTALL = "beaker-py is not installed (pip install 'gym-agent[beaker]')"
BEAKER_NO_CONFIG = "no Beaker configuration here (~/.beaker/config.yml, $BEAKER_CONFIG or BEAKER_TOKEN)"
SKYPILOT_INSTALL = "SkyPilot is not installed (pip install 'gym-agent[skypilot]')"
BEAKER_JOBS_LIMIT = 256  # a task's jobs, newest first: every replica of its latest launches

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Asked(Generic[T]):
    """What asking gave: the scheduler's own objects, or why there are none."""

    value: T | None
    why_not: str | None = None


def bounded(question: Callable[[], T], who: str, timeout: float = ASK_TIMEOUT_S) -> Asked[T]:
    """``question()`` in a daemon thread, given up after ``timeout`` seconds."""
    out: list[T] = []
    errors: list[str] = []

    def run() -> None:
        try:
            out.append(question())
        except Exception as exc:  # noqa: BLE001 - clients raise their own, gRPC's, requests' and pydantic's errors
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    worker = threading.Thread(target=run, daemon=True, name=f"ask-{who}")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return Asked(None, f"{who} did not answer within {timeout:g} s")
    if errors:
        return Asked(None, f"{who} answered with an error: {errors[0]}")
    return Asked(out[0])


def then(first: Asked[T], question: Callable[[T], Asked[U]]) -> Asked[U]:
    """``question`` of what ``first`` gave (a client), or why it was not asked."""
    if first.value is None:
        return Asked(None, f"not asked: {first.why_not}")
    return question(first.value)


# --- Beaker -------------------------------------------------------------------------------------


def beaker_client() -> Asked[Any]:
    """A beaker-py client from the user's own configuration, or why there is none."""
    try:
        from beaker import Beaker
    except ImportError:
        return Asked(None, BEAKER_INSTALL)
    try:
        return Asked(Beaker.from_env(check_for_upgrades=False))
    except Exception:  # noqa: BLE001 - no configuration, a broken one
        return Asked(None, BEAKER_NO_CONFIG)


def beaker_would_ask(experiment: str) -> str:
    return f"Beaker for experiment {experiment} and its task's jobs (beaker-py: workload.get, job.list)"


def beaker_experiment(client: Any, experiment: str) -> Asked[tuple[Any, list[Any]]]:
    """The experiment's workload and its task's jobs (a replica group: one job per replica and launch),
    newest first."""

    def question() -> tuple[Any, list[Any]]:
        workload = client.workload.get(experiment)
        jobs = [
            job for task in workload.experiment.tasks for job in client.job.list(task=task, limit=BEAKER_JOBS_LIMIT)
        ]
        return workload, jobs

    return bounded(question, "Beaker")


def beaker_jobs(client: Any, job_ids: list[str]) -> Asked[list[tuple[str, Any]]]:
    """Each of ``job_ids``' job (those Beaker still knows)."""

    def question() -> list[tuple[str, Any]]:
        found = []
        for job_id in job_ids:
            try:
                found.append((job_id, client.job.get(job_id)))
            except Exception:  # noqa: BLE001 - one job Beaker no longer knows is no answer for the others
                continue
        return found

    return bounded(question, "Beaker")


def beaker_status_name(value: int) -> str:
    """A WorkloadStatus number as Beaker spells it, less its prefix (STATUS_RUNNING -> RUNNING)."""
    from beaker import beaker_pb2 as pb2

    return str(pb2.WorkloadStatus.Name(int(value))).removeprefix("STATUS_")


def beaker_cancelation(job: Any) -> str | None:
    """A job's cancelation code as Beaker spells it (CANCELATION_CODE_MANUAL, ...), None when unset."""
    from beaker import beaker_pb2 as pb2

    code = int(getattr(getattr(job, "status", None), "canceled_code", 0) or 0)
    return pb2.CancelationCode.Name(code) if code else None


# --- SkyPilot -----------------------------------------------------------------------------------


def skypilot_would_ask(job_id: str) -> str:
    cluster, _, job = job_id.rpartition("/")
    if cluster:
        return f"SkyPilot for job {job} of cluster {cluster} (sky.queue; `sky queue {cluster}`)"
    return f"SkyPilot for managed job {job_id} (sky.jobs.queue_v2; `sky jobs queue {job_id}`)"


def skypilot_ready() -> Asked[Any]:
    """SkyPilot's module, once its configured API server answers healthy; or why not. Asks the
    server's health endpoint only: a client call would start a local server, which is the user's to start."""
    try:
        import sky
        from sky.server import common
    except ImportError:
        return Asked(None, SKYPILOT_INSTALL)
    url = common.get_server_url()
    health = bounded(lambda: common.get_api_server_status(url).status, "SkyPilot's API server")
    if health.value is None:
        return Asked(None, health.why_not)
    if health.value != common.ApiServerStatus.HEALTHY:
        return Asked(None, f"no SkyPilot API server answers at {url} ({health.value.value})")
    return Asked(sky)


def field(record: Any, name: str) -> Any:
    """A field of a SkyPilot record: its typed response objects, or the dicts of older servers."""
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def skypilot_job(sky: Any, job_id: str) -> Asked[Any]:
    """The record SkyPilot keeps of ``job_id``: a managed job (``N``) or a job on a cluster
    (``CLUSTER/N``, ``sky.launch``), or why there is none."""
    cluster, _, job = job_id.rpartition("/")
    if not job.isdigit():
        return Asked(None, f"{job_id!r} is not a SkyPilot job id")
    number = int(job)

    def question() -> Any:
        if cluster:
            records = sky.get(sky.queue(cluster))
        else:
            answer = sky.get(sky.jobs.queue_v2(refresh=False, job_ids=[number]))
            records = answer[0] if isinstance(answer, tuple) else answer
        return next((r for r in records if field(r, "job_id") == number), None)

    found = bounded(question, "SkyPilot")
    if found.why_not is None and found.value is None:
        return Asked(None, f"SkyPilot does not know job {job_id}")
    return found


def skypilot_status_name(record: Any) -> str | None:
    """The record's status as SkyPilot spells it (ManagedJobStatus or JobStatus value)."""
    status = field(record, "status")
    return None if status is None else str(getattr(status, "value", status))


def skypilot_terminal(record: Any) -> bool:
    status = field(record, "status")
    is_terminal = getattr(status, "is_terminal", None)
    return bool(is_terminal()) if callable(is_terminal) else False
