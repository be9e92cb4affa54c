"""Rendezvous through address records, plan agreement, and the node order.

Replica ranks are not roles: the replica whose address sorts i-th lowest (numerically) owns
planned node i (within its pool's range when every replica names its pool: schemas/order.py);
the Ray head runs on the driver's planned node (launch.spec.plan: Plan.ray_head).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from agent.coord.identity import Identity
from agent.ground import clock
from agent.ground.failure import AgentFailed, Failure
from agent.ground.waits import poll_until
from launch.spec.errors import GymError
from schemas import FailureKind, RunDir, RunDirError, Writer, names, order, records

if TYPE_CHECKING:
    from agent.coord.context import RunContext

__all__ = ["Peer", "RankClaimed", "agree", "claim", "gather", "node_order"]


@dataclass(frozen=True)
class Peer:
    rank: int
    address: str
    incarnation: str
    fingerprint: str
    hostname: str
    visible_devices: tuple[str, ...]
    doorbell_port: int | None = None  # where its doorbell listens (agent/coord/doorbell.py); None: off
    pool: str | None = None  # the pool its job step runs (GYM_POOL); None: not said


class RankClaimed(GymError):
    """Another incarnation holds this rank: this process must not join (nor write anything)."""


def claim(run: RunDir, writer: Writer, ident: Identity, *, doorbell_port: int | None = None) -> None:
    """Claim this rank by creating its address record exclusively (link(2): atomic, NFSv3+ too).

    Two agents started for one rank (a reused uuid, a scheduler restarting a task, a race) cannot
    both win, and the loser has written nothing. A record of another attempt is no claim on this
    one (agent/coord/attempts/): it is set aside and the create decides again."""
    fields = records.address_fields(
        address=ident.address,
        address_explicit=ident.address_explicit,
        hostname=ident.hostname,
        visible_devices=ident.visible_devices,
        pid=os.getpid(),
        started_at=clock.wall(),
        replicas=ident.count,
        scheduler_job=ident.scheduler_job.to_json() if ident.scheduler_job is not None else None,
        pool=ident.pool,
        doorbell_port=doorbell_port,  # bound (and kept) before this record exists
    )
    rel = names.address(ident.rank)
    try:
        run.create_artifact(rel, writer, fields)
    except FileExistsError:
        if _set_aside_other_attempt(run, rel):
            return claim(run, writer, ident, doorbell_port=doorbell_port)  # the exclusive create decides again
        existing = run.read_json(rel) or {}
        raise RankClaimed(
            f"rank {ident.rank} of this run was already claimed (incarnation {existing.get('incarnation')}, "
            f"address {existing.get('address')}, pid {existing.get('pid')}); this process did not join and "
            "wrote nothing. Use a new --uuid for a new run"
        ) from None


def _set_aside_other_attempt(run: RunDir, rel: str) -> bool:
    """An address record stamped with another attempt (a straggler, something planted) holds no
    claim on this attempt: move it into this attempt's directory, out of the way. A rename is
    atomic, so of several claimants exactly one moves it and all then race the exclusive create."""
    try:
        doc = orjson.loads(run.read_bytes(rel))
    except FileNotFoundError:
        return True  # gone meanwhile: try again
    except (OSError, ValueError, RunDirError):
        return False
    if not isinstance(doc, dict) or doc.get("attempt", 1) == run.attempt:
        return False
    aside = f"{names.attempt_dir(run.attempt)}/stale-{names.leaf(rel)}.{os.urandom(6).hex()}"
    run.ensure_dir(names.attempt_dir(run.attempt))
    try:
        run.rename(rel, aside)
    except FileNotFoundError:
        pass  # another claimant moved it
    return True


def gather(ctx: RunContext, count: int, seen: Callable[[list[Peer]], None] | None = None) -> list[Peer]:
    """Wait (inside the one startup deadline) until every rank has an address record. A peer
    started with another replica count fails the run at once, naming the ranks. `seen`: called
    with the peers read so far whenever there are more (the doorbell rings them meanwhile)."""
    present: set[int] = set()
    counts: dict[int, int] = {}
    early: dict[int, Peer] = {}
    peers: list[Peer] = []

    def everyone() -> bool:
        nonlocal peers
        listed = (names.rank_in(names.ADDRESSES_DIR, n) for n in ctx.run.listdir(names.ADDRESSES_DIR))
        present.update(r for r in listed if r is not None)
        more = False
        for r in sorted(present - set(counts)):
            doc = ctx.run.read_json(names.address(r))
            if doc is not None:
                counts[r] = int(doc.get("replicas", count))
                if r < count:
                    early[r], more = _peer(r, doc), True
        if more and seen is not None:
            seen([early[r] for r in sorted(early)])
        _check_counts(counts, count, ctx.phase())
        if not all(r in present for r in range(count)):
            return False
        peers = []
        for r in range(count):
            doc = ctx.run.read_json(names.address(r))
            if doc is None:
                return False  # listed but not readable yet: try again next poll
            peers.append(_peer(r, doc))
        return True

    def describe(left: float) -> str:
        missing = [r for r in range(count) if r not in present]
        who = f"rank {missing[0]}" if len(missing) == 1 else f"ranks {', '.join(map(str, missing[:8]))}"
        more = ", ..." if len(missing) > 8 else ""
        return f"{count - len(missing)}/{count} replicas joined; waiting for {who}{more}, {left:.0f} s left"

    poll = ctx.config.coordination.poll_interval
    if poll_until(everyone, deadline=ctx.deadline, interval=poll, signal=ctx.signal, progress=ctx.progress(describe)):
        return peers
    missing = sorted(set(range(count)) - present)
    raise AgentFailed(
        Failure(
            kind=FailureKind.STARTUP_TIMEOUT,
            cause=f"replicas {missing} never wrote an address record within startup_timeout "
            f"{ctx.config.coordination.startup_timeout:g}s (counted from agent start)",
            phase=ctx.phase(),
            peers=tuple(missing),
        )
    )


def _peer(rank: int, doc: dict[str, Any]) -> Peer:
    return Peer(
        rank,
        str(doc["address"]),
        str(doc["incarnation"]),
        str(doc["fingerprint"]),
        str(doc.get("hostname", "")),
        tuple(doc.get("visible_devices", ())),
        _port(doc.get("doorbell_port")),
        doc["pool"] if isinstance(doc.get("pool"), str) else None,
    )


def _port(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536 else None


def _check_counts(counts: dict[int, int], mine: int, phase: str) -> None:
    """--replicas must agree: otherwise some ranks would start the run while others wait forever."""
    differ = sorted(r for r, n in counts.items() if n != mine)
    if differ:
        told = ", ".join(f"rank {r}: {counts[r]}" for r in differ)
        raise AgentFailed(
            Failure(
                kind=FailureKind.PLAN_MISMATCH,
                cause=f"replica count disagrees: this rank was started with --replicas {mine}, but {told}; "
                "start every replica with the same replica count",
                phase=phase,
                peers=tuple(differ),
            )
        )


def agree(peers: list[Peer], fingerprint: str, phase: str) -> None:
    """Every replica must have resolved the same spec: a replica started with other overrides
    would otherwise place work on GPUs its peers planned differently."""
    differ = [p.rank for p in peers if p.fingerprint != fingerprint]
    if differ:
        raise AgentFailed(
            Failure(
                kind=FailureKind.PLAN_MISMATCH,
                cause=f"ranks {differ} resolved a different run spec (fingerprint differs from "
                f"{fingerprint[:12]}); start every replica with the same spec and --set overrides",
                phase=phase,
                peers=tuple(differ),
            )
        )


def node_order(peers: list[Peer], phase: str, node_pools: Sequence[str | None] = ()) -> list[Peer]:
    """Peers in node order (schemas/order.py: by numeric address, within their pools when every
    peer names one of `node_pools`, the plan's nodes' pools); two replicas on one address are
    refused before Ray starts."""
    seen: dict[str, int] = {}
    for p in peers:
        if p.address in seen:
            raise AgentFailed(
                Failure(
                    kind=FailureKind.ADDRESS_CONFLICT,
                    cause=f"ranks {seen[p.address]} and {p.rank} both claim address {p.address}; "
                    "each replica must run on its own node",
                    phase=phase,
                    peers=(seen[p.address], p.rank),
                )
            )
        seen[p.address] = p.rank
    by_rank = {p.rank: p for p in peers}
    owners = order.owners_in_pools(
        {p.rank: p.address for p in peers}, {p.rank: p.pool for p in peers}, order.pool_ranks(node_pools)
    )
    return [by_rank[r] for r in owners]
