"""addresses/address-RANK.json: a replica's rendezvous record, the claim on its rank (its builder),
and what a reader gets from one (AddressRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, doc_field

__all__ = ["AddressRecord", "SchedulerJobRef", "address_fields"]


@dataclass(frozen=True)
class SchedulerJobRef(Lenient):
    """The scheduler's job and node for one replica (`scheduler_job`); unreadable without both names."""

    scheduler: str
    job: str
    node: str | None = None
    restart: int | None = None  # Slurm: the job's restart count when this agent ran


@dataclass(frozen=True)
class AddressRecord(Lenient):
    """An address record as read; `rank` and `relpath` say where it was found."""

    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    address: str | None = None
    hostname: str | None = None
    visible_devices: tuple[str, ...] = ()
    incarnation: str | None = None
    job: SchedulerJobRef | None = doc_field(key="scheduler_job", default=None)
    pool: str | None = None  # the pool its job step ran (GYM_POOL); None: not said


def address_fields(
    *,
    address: str,
    address_explicit: bool,
    hostname: str,
    visible_devices: Sequence[str],
    pid: int,
    started_at: float,
    replicas: int,
    scheduler_job: Mapping[str, Any] | None = None,
    pool: str | None = None,
    doorbell_port: int | None = None,
) -> dict[str, Any]:
    """The address record's fields; the optional ones are present only when known (`doorbell_port`:
    the doorbell is on, bound before the record is written)."""
    optional: dict[str, Any] = {
        "scheduler_job": dict(scheduler_job) if scheduler_job is not None else None,
        "pool": pool,
        "doorbell_port": doorbell_port,
    }
    return {
        "address": address,
        "address_explicit": address_explicit,
        "hostname": hostname,
        "visible_devices": list(visible_devices),
        "pid": pid,
        "started_at": started_at,
        "replicas": replicas,
        **{k: v for k, v in optional.items() if v is not None},
    }
