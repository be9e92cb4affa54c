"""failure-RANK.json: why a replica failed (its builder) and what a reader gets from one (FailureRecord)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas import names
from schemas.lenient import Lenient, doc_field, nonempty_dict
from schemas.vocab import FailureKind, FsCondition

__all__ = ["FailureRecord", "failure_fields", "read_failure"]


@dataclass(frozen=True)
class FailureRecord(Lenient):
    """A failure record as read (the first cause's evidence); `rank` and `relpath` say where it was found."""

    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    kind: str = "unknown"
    cause: str = "(no cause recorded)"
    phase: str | None = None
    wall_time: float | None = None
    since_start: float | None = None
    log: str | None = None
    reacting_to: int | None = doc_field(path=("reacting_to",), key="rank", default=None)
    reacting_to_incarnation: str | None = doc_field(path=("reacting_to",), key="incarnation", default=None)
    peers: tuple[int, ...] = ()
    writer: str | None = None
    incarnation: str | None = None
    fingerprint: str | None = None  # the run's, in every artifact's envelope
    exit_code: int | None = None  # a child's or the driver's exit status (-N: killed by signal N)
    child: str | None = None
    judge: str | None = None
    binding: str | None = None  # judge_degraded: the verifier binding whose replies went bad
    signal: str | None = None
    fs_condition: str | None = None  # schemas.vocab.FsCondition
    sender: str | None = doc_field(path=("sender",), key="name", default=None)  # by name (slurmstepd: the scheduler)
    reacting_to_kind: str | None = doc_field(path=("reacting_to",), key="kind", default=None)
    sender_pid: int | None = doc_field(path=("sender",), key="pid", default=None)  # the kernel's si_pid
    sender_uid: int | None = doc_field(path=("sender",), key="uid", default=None)
    monotonic_time: float | None = None
    attempt: int | None = None
    checks: tuple[str, ...] = ()  # preflight: the checks that failed on that node
    # A hang's progress facts (source, timeout, seconds idle, last step); an empty object says none.
    hang: dict[str, Any] | None = doc_field(read=nonempty_dict, default=None)


def read_failure(read_json: Callable[[str], object], rank: int) -> FailureRecord | None:
    """Rank `rank`'s failure record as read through `read_json` (a RunDir's), with where it was found."""
    path = names.failure(rank)
    return FailureRecord.from_json(read_json(path), rank=rank, relpath=path)


def failure_fields(
    *,
    kind: FailureKind | str,
    cause: str,
    phase: str,
    wall_time: float,
    monotonic_time: float,
    log: str | None,
    reacting_to: Mapping[str, Any] | None,
    peers: Sequence[int] = (),
    sender: Mapping[str, Any] | None = None,
    exit_code: int | None = None,
    child: str | None = None,
    judge: str | None = None,
    binding: str | None = None,
    signal: str | None = None,
    fs_condition: FsCondition | str | None = None,
    since_start: float | None = None,
    checks: Sequence[str] = (),
    hang: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """failure-RANK.json, written by the agent itself or by its reaper after a SIGKILL.

    `cause` is for people; the facts the audit decides on are fields, present only when they
    apply: ``exit_code`` and ``child`` (a supervised child's or the driver's exit, -N: killed by
    signal N), ``judge`` (the judge concerned), ``binding`` (the verifier binding concerned:
    judge_degraded), ``signal`` and ``sender`` (the signal this
    agent received and who sent it, the kernel's si_pid), ``fs_condition`` (the run directory
    refused our writes), ``since_start`` (seconds since that agent started, on its host's clock),
    ``checks`` (a preflight failure: the checks that failed);
    ``hang`` (a hang's progress facts: source, timeout, seconds idle, last progress and step)."""
    facts: dict[str, Any] = {
        "exit_code": exit_code,
        "child": child,
        "judge": judge,
        "binding": binding,
        "signal": signal,
        "sender": dict(sender) if sender is not None else None,
        "fs_condition": str(fs_condition) if fs_condition is not None else None,
        "since_start": since_start,
        "checks": list(checks) or None,
        "hang": dict(hang) if hang is not None else None,
    }
    return {
        **{k: v for k, v in facts.items() if v is not None},
        "kind": str(kind),
        "cause": cause,
        "phase": phase,
        "wall_time": wall_time,
        "monotonic_time": monotonic_time,
        "log": log,
        "reacting_to": dict(reacting_to) if reacting_to is not None else None,
        "peers": list(peers),
    }
