"""Rendezvous through address records, plan agreement, and the node order.

Replica ranks are not roles: the replica whose address sorts i-th lowest (numerically) owns
planned node i, and the lowest address is the Ray head.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from schemas import RunDir, RunDirError, Writer, names

from . import clock
from .failure import AgentFailed, Failure, FailureSignal
from .identity import Identity, address_sort_key


@dataclass(frozen=True)
class Peer:
    rank: int
    address: str
    incarnation: str
    fingerprint: str
    hostname: str
    visible_devices: tuple[str, ...]


def publish(run: RunDir, writer: Writer, ident: Identity) -> None:
    """Write this replica's address record; refuse a rank another incarnation already claimed."""
    existing = run.read_json(names.address(ident.rank))
    if existing and existing.get("incarnation") != writer.incarnation:
        raise RunDirError(
            f"rank {ident.rank} of this run was already started (incarnation {existing.get('incarnation')}, "
            f"address {existing.get('address')}); use a new --uuid for a new run"
        )
    run.write_artifact(
        names.address(ident.rank),
        "address",
        writer,
        {
            "address": ident.address,
            "address_explicit": ident.address_explicit,
            "hostname": ident.hostname,
            "visible_devices": list(ident.visible_devices),
            "pid": os.getpid(),
            "started_at": clock.wall(),
        },
    )


def gather(
    run: RunDir,
    count: int,
    *,
    deadline: float,
    poll: float,
    signal: FailureSignal,
    phase: str,
    startup_timeout: float,
    on_wait: Callable[[], None] | None = None,
) -> list[Peer]:
    """Wait (inside the one startup deadline) until every rank has an address record."""
    while True:
        signal.raise_if_set()
        present = set()
        for name in run.listdir(names.ADDRESSES_DIR):
            if name.startswith("address-") and name.endswith(".json"):
                try:
                    present.add(int(name[8:-5]))
                except ValueError:
                    pass
        if all(r in present for r in range(count)):
            peers = []
            for r in range(count):
                doc = run.read_json(names.address(r))
                if doc is None:
                    break  # listed but not readable yet: try again next poll
                peers.append(
                    Peer(
                        r,
                        str(doc["address"]),
                        str(doc["incarnation"]),
                        str(doc["fingerprint"]),
                        str(doc.get("hostname", "")),
                        tuple(doc.get("visible_devices", ())),
                    )
                )
            if len(peers) == count:
                return peers
        if clock.mono() >= deadline:
            missing = sorted(set(range(count)) - present)
            raise AgentFailed(
                Failure(
                    kind="startup_timeout",
                    cause=f"replicas {missing} never wrote an address record within startup_timeout "
                    f"{startup_timeout:g}s (counted from agent start)",
                    phase=phase,
                    peers=tuple(missing),
                )
            )
        if on_wait:
            on_wait()
        signal.wait(poll)


def agree(peers: list[Peer], fingerprint: str, phase: str) -> None:
    """Every replica must have resolved the same spec (anchor weakness 8)."""
    differ = [p.rank for p in peers if p.fingerprint != fingerprint]
    if differ:
        raise AgentFailed(
            Failure(
                kind="plan_mismatch",
                cause=f"ranks {differ} resolved a different run spec (fingerprint differs from "
                f"{fingerprint[:12]}); start every replica with the same spec and --set overrides",
                phase=phase,
                peers=tuple(differ),
            )
        )


def node_order(peers: list[Peer], phase: str) -> list[Peer]:
    """Peers sorted by numeric address; two replicas on one address are refused before Ray starts."""
    seen: dict[str, int] = {}
    for p in peers:
        if p.address in seen:
            raise AgentFailed(
                Failure(
                    kind="address_conflict",
                    cause=f"ranks {seen[p.address]} and {p.rank} both claim address {p.address}; "
                    "each replica must run on its own node",
                    phase=phase,
                    peers=(seen[p.address], p.rank),
                )
            )
        seen[p.address] = p.rank
    return sorted(peers, key=lambda p: address_sort_key(p.address))
