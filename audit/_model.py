"""The audit's vocabulary: findings, failure causes, and the result every report renders.

Everything here is a frozen dataclass so that a result can be passed to several renderers
without any of them changing what another one sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from schemas.records import PhaseSpan as PhaseSpan  # re-exported: the audit's modules name it here

if TYPE_CHECKING:  # a hang's readers (stacks, collectives) are imported only for a run that kept them
    from audit._collectives import Summary as CollectivesSummary
    from audit.stacks import Summary as StacksSummary

__all__ = [
    "AttemptSummary",
    "AuditResult",
    "Cause",
    "Finding",
    "GpuCell",
    "NodeMap",
    "Outcome",
    "PhaseSpan",
    "RankSummary",
    "SEVERITY_ORDER",
    "Sender",
    "Severity",
    "Verdict",
]

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

Verdict = Literal["pass", "fail"]
# What the artifacts say happened, independent of whether the audit found problems.
Outcome = Literal["succeeded", "failed", "incomplete"]


@dataclass(frozen=True)
class Finding:
    """One thing the audit noticed. `code` is stable (documented in audit/README.md)."""

    severity: Severity
    code: str
    message: str
    file: str | None = None
    rank: int | None = None
    json_path: str | None = None

    def sort_key(self) -> tuple[int, str, str, int, str]:
        return (
            SEVERITY_ORDER.get(self.severity, 9),
            self.code,
            self.file or "",
            -1 if self.rank is None else self.rank,
            self.message,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "file": self.file,
            "rank": self.rank,
            "json_path": self.json_path,
        }


@dataclass(frozen=True)
class Sender:
    """Who sent the signal of a signal failure, as the record says (the kernel's si_pid)."""

    pid: int | None
    uid: int | None
    name: str | None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "uid": self.uid, "name": self.name}


@dataclass(frozen=True)
class Cause:
    """A failure as the audit understands it (from a failure record, or inferred for a silent rank)."""

    rank: int
    kind: str
    phase: str | None
    cause: str
    wall_time: float | None
    since_start: float | None
    file: str | None  # the failure record this comes from; None when inferred
    log: str | None  # run-directory log file relevant to it
    reacting_to: int | None = None
    reported_by: int | None = None  # for a silent rank: who noticed the silence
    writer: str | None = None
    excerpt: tuple[str, ...] = ()  # last error lines / traceback of `log`
    ray_logs: tuple[str, ...] = ()  # Ray's own session logs kept for this rank, when Ray is involved
    exit_code: int | None = None  # the record's: a child's or the driver's exit status (-N: signal N)
    judge: str | None = None  # the record's: the judge concerned
    binding: str | None = None  # the record's: the verifier binding concerned (judge_degraded)
    scheduler: str | None = None  # set when the scheduler ended the job (audit/_scheduler_ending.py)
    # The rest of the record's structured fields (schemas/failure.schema.json), so a script reading
    # the audit's JSON need not open the record again; None/() when the cause has no record.
    child: str | None = None
    signal: str | None = None
    sender: Sender | None = None
    fs_condition: str | None = None
    peers: tuple[int, ...] = ()
    monotonic_time: float | None = None
    incarnation: str | None = None
    attempt: int | None = None
    reacting_to_incarnation: str | None = None
    reacting_to_kind: str | None = None
    checks: tuple[str, ...] = ()  # preflight: the checks that failed on that node
    hang: dict[str, Any] | None = None  # the record's: a hang's progress facts (kind hang)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "kind": self.kind,
            "phase": self.phase,
            "cause": self.cause,
            "wall_time": self.wall_time,
            "since_start": self.since_start,
            "file": self.file,
            "log": self.log,
            "reacting_to": self.reacting_to,
            "reported_by": self.reported_by,
            "writer": self.writer,
            "excerpt": list(self.excerpt),
            "ray_logs": list(self.ray_logs),
            "judge": self.judge,
            "binding": self.binding,
            "scheduler": self.scheduler,
            "exit_code": self.exit_code,
            "child": self.child,
            "signal": self.signal,
            "sender": self.sender.to_json() if self.sender is not None else None,
            "fs_condition": self.fs_condition,
            "peers": list(self.peers),
            "monotonic_time": self.monotonic_time,
            "incarnation": self.incarnation,
            "attempt": self.attempt,
            "reacting_to_incarnation": self.reacting_to_incarnation,
            "reacting_to_kind": self.reacting_to_kind,
            "checks": list(self.checks),
            "hang": self.hang,
        }


@dataclass(frozen=True)
class RankSummary:
    rank: int
    address: str | None
    hostname: str | None
    node_index: int | None
    state: str | None
    incarnation: str | None
    phases: tuple[PhaseSpan, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "address": self.address,
            "hostname": self.hostname,
            "node_index": self.node_index,
            "state": self.state,
            "incarnation": self.incarnation,
            "phases": [
                {
                    "phase": p.phase,
                    "started_at": p.started_at,
                    "ended_at": p.ended_at,
                    "outcome": p.outcome,
                    "detail": p.detail,
                }
                for p in self.phases
            ],
        }


@dataclass(frozen=True)
class GpuCell:
    """One local GPU of one node: what it was given to."""

    device: int
    role: Literal["trainer", "rollout", "judge", "unused", "ray"]
    label: str


@dataclass(frozen=True)
class NodeMap:
    node_index: int
    rank: int | None
    address: str | None
    source: Literal["placement", "plan"]
    cells: tuple[GpuCell, ...]
    is_head: bool = False
    is_driver_node: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "node_index": self.node_index,
            "rank": self.rank,
            "address": self.address,
            "source": self.source,
            "is_head": self.is_head,
            "is_driver_node": self.is_driver_node,
            "cells": [{"device": c.device, "role": c.role, "label": c.label} for c in self.cells],
        }


@dataclass(frozen=True)
class AttemptSummary:
    """One attempt of a resumed run: attempts/N/ for earlier ones, the top level for the last."""

    attempt: int
    verdict: Verdict
    outcome: Outcome
    first_cause: Cause | None
    mode: str | None = None  # how it was entered (its claim): "resume", "restart"; None: no claim
    token: str | None = None  # the launch that claimed it

    def to_json(self) -> dict[str, Any]:
        fc = self.first_cause
        return {
            "attempt": self.attempt,
            "verdict": self.verdict,
            "outcome": self.outcome,
            "first_cause": None
            if fc is None
            else {"rank": fc.rank, "kind": fc.kind, "cause": fc.cause, "scheduler": fc.scheduler},
            "mode": self.mode,
            "token": self.token,
        }


@dataclass(frozen=True)
class AuditResult:
    """Everything the audit concluded about one run directory. `to_json()` is the stable format."""

    run_dir: str
    verdict: Verdict
    outcome: Outcome
    fingerprint: str | None
    findings: tuple[Finding, ...]
    first_cause: Cause | None
    cascade: tuple[Cause, ...]
    other_roots: tuple[Cause, ...]
    expected_ranks: tuple[int, ...]
    ranks: tuple[RankSummary, ...]
    plan: dict[str, Any] | None
    gpu_maps: tuple[NodeMap, ...]
    notes: tuple[str, ...] = field(default=())
    attempts: tuple[AttemptSummary, ...] = field(default=())  # every attempt; the verdict is the last's
    training: dict[str, Any] | None = None  # where the evidence of training came from, and what it showed
    judge_replies: dict[str, Any] | None = None  # independent reply counts (a spec with bindings only)
    filesystem: tuple[dict[str, Any], ...] = field(default=())  # the output root's mounts (audit/_filesystem.py)
    doorbell: dict[str, Any] | None = None  # the doorbells' counts over every rank (audit/_doorbell.py)
    # Nodes whose preflight failed and the line to resubmit without them (audit/preflight.py).
    unfit: dict[str, Any] | None = None
    ray_startup: dict[str, Any] | None = None  # each node's Ray join time (audit/_ray_startup.py)
    stacks: StacksSummary | None = None  # a hang's stacks, grouped across ranks (audit/stacks.py)
    collectives: CollectivesSummary | None = None  # the collective a hang stopped in (audit/_collectives.py)
    judge_gateways: dict[str, Any] | None = None  # per judge, from its gateway's log (audit/_gateway_stats.py)
    # The sample ledger across attempts (audit/_ledger.LedgerSummary: typed Any, that module imports this one).
    ledger: Any = None

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    def codes(self, severity: str | None = None) -> set[str]:
        return {f.code for f in self.findings if severity is None or f.severity == severity}

    def to_json(self) -> dict[str, Any]:
        counts = {s: 0 for s in SEVERITY_ORDER}
        for f in self.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        return {
            "format": "gym-audit/1",
            "run_dir": self.run_dir,
            "verdict": self.verdict,
            "outcome": self.outcome,
            "fingerprint": self.fingerprint,
            "counts": counts,
            "findings": [f.to_json() for f in self.findings],
            "first_cause": self.first_cause.to_json() if self.first_cause else None,
            "cascade": [c.to_json() for c in self.cascade],
            "other_root_causes": [c.to_json() for c in self.other_roots],
            "ranks": {
                "expected": list(self.expected_ranks),
                "present": [r.rank for r in self.ranks],
                "details": [r.to_json() for r in self.ranks],
            },
            "plan": self.plan,
            "gpu_maps": [m.to_json() for m in self.gpu_maps],
            "notes": list(self.notes),
            "attempts": [a.to_json() for a in self.attempts],
            "training": self.training,
            "judge_replies": self.judge_replies,
            "filesystem": list(self.filesystem),
            "doorbell": self.doorbell,
            "unfit": self.unfit,
            "ray_startup": self.ray_startup,
            "stacks": self.stacks.to_json() if self.stacks is not None else None,
            "collectives": self.collectives.to_json() if self.collectives is not None else None,
            "judge_gateways": self.judge_gateways,
            "ledger": self.ledger.to_json() if self.ledger is not None else None,
        }
