"""The audit's views of parsed artifacts: each per-rank record read leniently by its record type
(schemas/records/, schemas/lenient.py), keyed by rank.

A document that fails its schema is still worth reading (a failure record with one extra
field still names the first cause), so views never trust types: every field reads as None
(or empty) when missing or wrongly typed, and the cross-checks only see these views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from audit._load import Artifact, LoadedRun
from schemas.lenient import Lenient, as_int, decoder
from schemas.records import (
    AddressRecord,
    CleanupRecord,
    PhasesRecord,
    PlacementRecord,
)

if TYPE_CHECKING:  # a failure record's type loads for a run that has one (issue 51 item 9)
    from schemas.records import FailureRecord as FailureRec

__all__ = [
    "AddressRec",
    "FailureRec",
    "PhasesRec",
    "PlacementRec",
    "addresses",
    "by_rank",
    "cleanups",
    "failures",
    "mask_entries",
    "phases",
    "placements",
    "rank_of",
    "ranks_of",
]

# The names the audit's modules use for the record types.
AddressRec = AddressRecord
PlacementRec = PlacementRecord
PhasesRec = PhasesRecord

R = TypeVar("R", bound=Lenient)


def mask_entries(mask: str | None) -> tuple[str, ...]:
    """CUDA_VISIBLE_DEVICES split into entries ('' is the empty mask, not one empty entry)."""
    if not mask:
        return ()
    return tuple([e.strip() for e in mask.split(",")])  # a list, not a generator: asked per node and judge


def rank_of(art: Artifact) -> int | None:
    """The rank an artifact belongs to: its file name's rank, else its header's."""
    if art.file_rank is not None:
        return art.file_rank
    return as_int((art.doc or {}).get("rank"))


def by_rank(run: LoadedRun, schema: str, record: type[R]) -> dict[int, R]:
    """Every readable `schema` artifact of the run as `record`, by the rank it belongs to."""
    out: dict[int, R] = {}
    read = decoder(record)  # looked up once: thousands of ranks' records
    for art in run.by_schema(schema):
        rank = rank_of(art)
        if rank is None:
            continue
        rec = read(art.doc, {"rank": rank, "relpath": art.relpath})
        if rec is not None:
            out[rank] = rec
    return out


def addresses(run: LoadedRun) -> dict[int, AddressRec]:
    return by_rank(run, "address", AddressRecord)


def placements(run: LoadedRun) -> dict[int, PlacementRec]:
    return by_rank(run, "placement", PlacementRecord)


def phases(run: LoadedRun) -> dict[int, PhasesRec]:
    return by_rank(run, "phases", PhasesRecord)


def failures(run: LoadedRun) -> dict[int, FailureRec]:
    if not run.by_schema("failure"):
        return {}
    from schemas.records import FailureRecord

    return by_rank(run, "failure", FailureRecord)


def cleanups(run: LoadedRun) -> dict[int, CleanupRecord]:
    return by_rank(run, "cleanup", CleanupRecord)


def ranks_of(run: LoadedRun, schema: str) -> set[int]:
    return {r for a in run.by_schema(schema) if (r := rank_of(a)) is not None}
