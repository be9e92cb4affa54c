"""Typed, tolerant views of parsed artifacts (shapes built by schemas.records where shared).

A document that fails its schema is still worth reading (a failure record with one extra
field still names the first cause), so views never trust types: every accessor returns None
(or empty) for a missing or wrongly typed field, and the cross-checks only see these views.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from audit.load import Artifact, LoadedRun
from audit.model import PhaseSpan


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_num(v: Any) -> float | None:
    if type(v) is float:  # the common case first: asked ~25 times per rank
        return v if math.isfinite(v) else None
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float (JSON allows 1e400 written out)
        return None
    return f if math.isfinite(f) else None


def as_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def as_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def as_devices(v: Any) -> tuple[int, ...] | None:
    if not isinstance(v, list):
        return None
    out = [d for d in v if as_int(d) is not None]
    return tuple(out) if len(out) == len(v) else None


def mask_entries(mask: str | None) -> tuple[str, ...]:
    """CUDA_VISIBLE_DEVICES split into entries ('' is the empty mask, not one empty entry)."""
    if not mask:
        return ()
    return tuple(e.strip() for e in mask.split(","))


def rank_of(art: Artifact) -> int | None:
    """The rank an artifact belongs to: its file name's rank, else its header's."""
    if art.file_rank is not None:
        return art.file_rank
    return as_int((art.doc or {}).get("rank"))


@dataclass(frozen=True)
class AddressRec:
    rank: int
    relpath: str
    address: str | None
    hostname: str | None
    visible_devices: tuple[str, ...]
    incarnation: str | None
    job: SchedulerJobRef | None = None  # the scheduler's job and node for this replica
    pool: str | None = None  # the pool its job step ran (GYM_POOL); None: not said


@dataclass(frozen=True)
class SchedulerJobRef:
    scheduler: str
    job: str
    node: str | None
    restart: int | None = None  # Slurm: the job's restart count when this agent ran


def _job_ref(value: Any) -> SchedulerJobRef | None:
    d = as_dict(value)
    scheduler, job = as_str(d.get("scheduler")), as_str(d.get("job"))
    if not scheduler or not job:
        return None
    return SchedulerJobRef(scheduler, job, as_str(d.get("node")), as_int(d.get("restart")))


@dataclass(frozen=True)
class JudgeSlot:
    devices: tuple[int, ...] | None
    mask: str | None


@dataclass(frozen=True)
class PlacementRec:
    rank: int
    relpath: str
    node_index: int | None
    address: str | None
    visible_devices: tuple[str, ...]
    ray_devices: tuple[int, ...] | None
    ray_mask: str | None
    ray_num_gpus: int | None
    judges: Mapping[str, JudgeSlot]
    unused_devices: tuple[int, ...] | None
    trainer_gpus: int | None
    rollout_gpus: int | None
    is_head: bool | None
    is_driver_node: bool | None
    pool: str | None = None  # the pool the agent ran this node as


@dataclass(frozen=True)
class PhasesRec:
    rank: int
    relpath: str
    state: str | None
    spans: tuple[PhaseSpan, ...]


@dataclass(frozen=True)
class FailureRec:
    rank: int
    relpath: str
    kind: str
    cause: str
    phase: str | None
    wall_time: float | None
    since_start: float | None
    log: str | None
    reacting_to: int | None
    reacting_to_incarnation: str | None
    peers: tuple[int, ...]
    writer: str | None
    incarnation: str | None
    exit_code: int | None = None  # a child's or the driver's exit status (-N: killed by signal N)
    child: str | None = None
    judge: str | None = None
    binding: str | None = None  # judge_degraded: the verifier binding whose replies went bad
    signal: str | None = None
    fs_condition: str | None = None  # schemas.vocab.FsCondition
    sender: str | None = None  # a signal's sender, by name (slurmstepd: the scheduler acted)
    reacting_to_kind: str | None = None  # the kind of the failure a reaction names
    sender_pid: int | None = None  # the rest of the record's `sender` (the kernel's si_pid, its uid)
    sender_uid: int | None = None
    monotonic_time: float | None = None
    attempt: int | None = None
    checks: tuple[str, ...] = ()  # preflight: the checks that failed on that node
    hang: dict[str, Any] | None = None  # a hang's progress facts (source, timeout, seconds idle, last step)


def _visible(v: Any) -> tuple[str, ...]:
    return tuple(x for x in as_list(v) if isinstance(x, str))


def addresses(run: LoadedRun) -> dict[int, AddressRec]:
    out: dict[int, AddressRec] = {}
    for art in run.by_schema("address"):
        rank = rank_of(art)
        if rank is None or art.doc is None:
            continue
        d = art.doc
        out[rank] = AddressRec(
            rank,
            art.relpath,
            as_str(d.get("address")),
            as_str(d.get("hostname")),
            _visible(d.get("visible_devices")),
            as_str(d.get("incarnation")),
            _job_ref(d.get("scheduler_job")),
            as_str(d.get("pool")),
        )
    return out


def placements(run: LoadedRun) -> dict[int, PlacementRec]:
    out: dict[int, PlacementRec] = {}
    for art in run.by_schema("placement"):
        rank = rank_of(art)
        if rank is None or art.doc is None:
            continue
        d = art.doc
        ray = as_dict(d.get("ray"))
        judges = {
            str(name): JudgeSlot(
                as_devices(as_dict(slot).get("devices")), as_str(as_dict(slot).get("cuda_visible_devices"))
            )
            for name, slot in as_dict(d.get("judges")).items()
        }
        out[rank] = PlacementRec(
            rank=rank,
            relpath=art.relpath,
            node_index=as_int(d.get("node_index")),
            address=as_str(d.get("address")),
            visible_devices=_visible(d.get("visible_devices")),
            ray_devices=as_devices(ray.get("devices")),
            ray_mask=as_str(ray.get("cuda_visible_devices")),
            ray_num_gpus=as_int(ray.get("num_gpus")),
            judges=judges,
            unused_devices=as_devices(d.get("unused_devices")),
            trainer_gpus=as_int(d.get("trainer_gpus")),
            rollout_gpus=as_int(d.get("rollout_gpus")),
            is_head=as_bool(d.get("is_head")),
            is_driver_node=as_bool(d.get("is_driver_node")),
            pool=as_str(d.get("pool")),
        )
    return out


def phases(run: LoadedRun) -> dict[int, PhasesRec]:
    out: dict[int, PhasesRec] = {}
    for art in run.by_schema("phases"):
        rank = rank_of(art)
        if rank is None or art.doc is None:
            continue
        spans = []
        for item in as_list(art.doc.get("phases")):
            if not isinstance(item, dict):
                continue
            name, start = item.get("phase"), as_num(item.get("started_at"))
            if not isinstance(name, str) or start is None:
                continue
            spans.append(
                PhaseSpan(
                    name,
                    start,
                    as_num(item.get("ended_at")),
                    as_str(item.get("outcome")) or "unknown",
                    as_str(item.get("detail")) or "",
                )
            )
        out[rank] = PhasesRec(rank, art.relpath, as_str(art.doc.get("state")), tuple(spans))
    return out


def failures(run: LoadedRun) -> dict[int, FailureRec]:
    out: dict[int, FailureRec] = {}
    for art in run.by_schema("failure"):
        rank = rank_of(art)
        if rank is None or art.doc is None:
            continue
        d = art.doc
        reacting = d.get("reacting_to")
        reacting_rank = as_int(reacting.get("rank")) if isinstance(reacting, dict) else None
        reacting_inc = as_str(reacting.get("incarnation")) if isinstance(reacting, dict) else None
        reacting_kind = as_str(reacting.get("kind")) if isinstance(reacting, dict) else None
        out[rank] = FailureRec(
            rank=rank,
            relpath=art.relpath,
            kind=as_str(d.get("kind")) or "unknown",
            cause=as_str(d.get("cause")) or "(no cause recorded)",
            phase=as_str(d.get("phase")),
            wall_time=as_num(d.get("wall_time")),
            since_start=as_num(d.get("since_start")),
            log=as_str(d.get("log")),
            reacting_to=reacting_rank,
            reacting_to_incarnation=reacting_inc,
            reacting_to_kind=reacting_kind,
            peers=tuple(p for p in as_list(d.get("peers")) if as_int(p) is not None),
            writer=as_str(d.get("writer")),
            incarnation=as_str(d.get("incarnation")),
            exit_code=as_int(d.get("exit_code")),
            child=as_str(d.get("child")),
            judge=as_str(d.get("judge")),
            binding=as_str(d.get("binding")),
            signal=as_str(d.get("signal")),
            fs_condition=as_str(d.get("fs_condition")),
            sender=as_str(sender.get("name")) if isinstance(sender := d.get("sender"), dict) else None,
            sender_pid=as_int(sender.get("pid")) if isinstance(sender, dict) else None,
            sender_uid=as_int(sender.get("uid")) if isinstance(sender, dict) else None,
            monotonic_time=as_num(d.get("monotonic_time")),
            attempt=as_int(d.get("attempt")),
            checks=tuple(str(c) for c in as_list(d.get("checks")) if isinstance(c, str)),
            hang=as_dict(d.get("hang")) or None,
        )
    return out


def ranks_of(run: LoadedRun, schema: str) -> set[int]:
    return {r for a in run.by_schema(schema) if (r := rank_of(a)) is not None}
