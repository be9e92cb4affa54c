"""The facts every cross-check shares: parsed records, the expected plan, who owns which node,
and what the run's outcome was. Built once so that checks stay small and agree with each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from audit._expected import PlanView
from audit._load import LoadedRun
from audit._model import Finding, Outcome
from audit._training_evidence import NOT_DECLARED, TrainingEvidence
from audit._views import (
    AddressRec,
    PhasesRec,
    PlacementRec,
    addresses,
    cleanups,
    failures,
    phases,
    placements,
    ranks_of,
)
from schemas import names, order
from schemas.records import CleanupRecord, CompleteRecord

if TYPE_CHECKING:  # the judges' reply counting loads for a run whose judges ran (issue 51 item 9)
    from audit._judge_replies import ReplyCounts
    from audit._views import FailureRec

__all__ = ["AuditContext", "build_context"]


@dataclass(frozen=True)
class AuditContext:
    run: LoadedRun
    spec: Mapping[str, Any]
    fingerprint: str | None
    plan: PlanView
    expected_ranks: tuple[int, ...]
    addresses: Mapping[int, AddressRec]
    placements: Mapping[int, PlacementRec]
    phases: Mapping[int, PhasesRec]
    failures: Mapping[int, FailureRec]
    cleanups: Mapping[int, CleanupRecord]  # the readable ones (ranks_of(run, "cleanup"): every file)
    acked: frozenset[int]
    complete: CompleteRecord | None
    owner_of_node: Mapping[int, int]  # planned node index -> rank that owns it
    node_of_rank: Mapping[int, int]
    outcome: Outcome
    # Read from files beyond the JSON artifacts (audit/_training_evidence.py, audit/_judge_replies.py).
    training: TrainingEvidence = NOT_DECLARED
    replies: ReplyCounts | None = None  # None: no judge ran, there is nothing to count

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    @property
    def driver_rank(self) -> int | None:
        """Where the driver ran: complete.json says so, else the owner of the plan's driver node."""
        rank = self.complete.driver_rank if self.complete is not None else None
        if rank is not None:
            return rank
        node = self.plan.driver_node
        return self.owner_of_node.get(node) if node is not None else None

    def missing(self, name: str, wanted: bool, code: str, text: str) -> list[Finding]:
        """What an absent artifact means: an error on a successful run that should have written
        it (`wanted`), nothing otherwise (a failed run may end before writing it)."""
        return [Finding("error", code, text, name)] if self.succeeded and wanted else []

    def phase_started(self, rank: int, phase: str) -> bool:
        rec = self.phases.get(rank)
        return rec is not None and any(s.phase == phase for s in rec.spans)


def _owners(
    expected: tuple[int, ...],
    addrs: Mapping[int, AddressRec],
    places: Mapping[int, PlacementRec],
    node_pools: Sequence[str | None] = (),
) -> dict[int, int]:
    """node -> rank. The protocol's rule (i-th lowest address owns node i, within its pool when
    every replica named one: schemas/order.py) when every expected rank published an address;
    otherwise the placement records' own claims."""
    wanted = set(expected)  # a tuple's `in` is a scan: quadratic over thousands of ranks
    known = {r: a.address for r, a in addrs.items() if r in wanted and a.address}
    if expected and len(known) == len(expected):
        pools = {r: addrs[r].pool for r in known}
        return dict(enumerate(order.owners_in_pools(known, pools, order.pool_ranks(node_pools))))
    out: dict[int, int] = {}
    for rank, rec in sorted(places.items()):
        if rec.node_index is not None and rec.node_index not in out:
            out[rec.node_index] = rank
    return out


def build_context(
    run: LoadedRun,
    spec: Mapping[str, Any],
    fingerprint: str | None,
    plan: PlanView,
    expected: tuple[int, ...],
    training: TrainingEvidence = NOT_DECLARED,
    replies: ReplyCounts | None = None,
) -> AuditContext:
    addrs = addresses(run)
    places = placements(run)
    fails = failures(run)
    acked = frozenset(ranks_of(run, "ack"))
    complete = CompleteRecord.from_json(run.doc(names.COMPLETE))
    owners = _owners(expected, addrs, places, [n.pool for n in plan.nodes])
    if fails:
        outcome: Outcome = "failed"
    elif complete is not None and set(expected) <= acked:
        outcome = "succeeded"
    else:
        outcome = "incomplete"
    return AuditContext(
        run=run,
        spec=spec,
        fingerprint=fingerprint,
        plan=plan,
        expected_ranks=expected,
        addresses=addrs,
        placements=places,
        phases=phases(run),
        failures=fails,
        cleanups=cleanups(run),
        acked=acked,
        complete=complete,
        owner_of_node=owners,
        node_of_rank={r: n for n, r in owners.items()},
        outcome=outcome,
        training=training,
        replies=replies,
    )
