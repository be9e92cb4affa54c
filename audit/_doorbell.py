"""What the agents' doorbells did (agent/coord/doorbell.py), summed over the ranks' cleanup records:
the failures rung and accepted, the alive beacons, and every datagram dropped, by reason. Runs
whose doorbell was off, and agents older than it, have no `doorbell` in their cleanup records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from schemas.lenient import as_dict, as_int
from schemas.records import CleanupRecord

__all__ = ["COUNTS", "describe", "summary"]

COUNTS = (
    "rings",
    "sent",
    "send_errors",
    "received",
    "accepted",
    "ignored_stopping",
    "beacons_sent",
    "beacons_received",
)


def summary(cleanups: Mapping[int, CleanupRecord]) -> dict[str, Any] | None:
    """{ranks, rings, sent, ..., dropped: {reason: n}} over every cleanup record with a doorbell."""
    ranks: list[int] = []
    totals: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    for rank, rec in cleanups.items():
        bell = rec.doorbell
        if not bell:
            continue
        ranks.append(rank)
        for key in COUNTS:
            totals[key] += as_int(bell.get(key)) or 0
        for why, n in as_dict(bell.get("dropped")).items():
            dropped[str(why)] += as_int(n) or 0
    if not ranks:
        return None
    return {"ranks": sorted(ranks), **{k: totals[k] for k in COUNTS}, "dropped": dict(sorted(dropped.items()))}


def describe(d: Mapping[str, Any]) -> str:
    """The text report's line."""
    dropped = as_dict(d.get("dropped"))
    told = ", ".join(f"{n} {why}" for why, n in dropped.items()) if dropped else "none"
    errors = f", {d.get('send_errors')} send error(s)" if d.get("send_errors") else ""
    # `sent` counts every copy of a ring and of the driver's `complete` wake-up (not the beacons).
    return (
        f"doorbell: {len(d.get('ranks') or [])} rank(s); {d.get('rings')} failure ring(s), "
        f"{d.get('accepted')} accepted; {d.get('sent')} datagrams sent for rings and wake-ups{errors}; "
        f"{d.get('beacons_received')} of {d.get('beacons_sent')} alive beacons received; dropped: {told}"
    )
