"""The Ray startup table: each node's Ray join time (its `ray_start` phase, from phases-RANK.json),
and the settings the head recorded for a cluster of its size (ray-head.json)."""

from __future__ import annotations

import math
from typing import Any

from audit._context import AuditContext
from schemas import Phase, names, timefmt
from schemas.records import RayHeadRecord

__all__ = ["SHOWN", "describe", "startup_table"]

SHOWN = 16  # rows the text report lists in node order; a larger cluster shows its slowest


def startup_table(ctx: AuditContext) -> dict[str, Any] | None:
    """None when no node started Ray."""
    rows = []
    # Read once, not per span: an enum member's lookup costs ~4 times the comparison (1,024 ranks' spans).
    ray_start, head_node = Phase.RAY_START, ctx.plan.driver_node
    for rank, rec in sorted(ctx.phases.items()):
        span = next((s for s in rec.spans if s.phase == ray_start), None)
        if span is None:
            continue
        seconds = (span.ended_at - span.started_at) if span.ended_at is not None else None
        if seconds is not None and not math.isfinite(seconds):
            seconds = None  # a corrupt record's times: no duration
        node = ctx.node_of_rank.get(rank)
        rows.append(
            {
                "rank": rank,
                "node_index": node,
                "head": node is not None and node == head_node,
                "seconds": round(seconds, 3) if seconds is not None else None,
                "outcome": span.outcome,
                "detail": span.detail,
            }
        )
    if not rows:
        return None
    head = RayHeadRecord.from_json(ctx.run.doc(names.RAY_HEAD)) or RayHeadRecord()
    return {
        "nodes": rows,
        "large_cluster": bool(head.large_cluster),
        "ray_nodes": head.ray_nodes,
        "settings": dict(head.settings),
    }


def describe(table: dict[str, Any]) -> list[str]:
    """The text report's lines."""
    rows = table["nodes"]
    timed = sorted((r for r in rows if r["seconds"] is not None), key=lambda r: r["seconds"])
    head = f"Ray startup ({len(rows)} node(s)"
    if timed:
        import statistics  # here: the text report alone needs it (issue 51: the audit's start-up time)

        median = timefmt.seconds(statistics.median(r["seconds"] for r in timed))
        head += f"; median {median} s, slowest rank {timed[-1]['rank']} {timefmt.seconds(timed[-1]['seconds'])} s"
    lines = [head + "):"]
    if table["large_cluster"]:
        settings = ", ".join(f"{k}={v}" for k, v in sorted(table["settings"].items()))
        lines.append(f"  large-cluster settings ({table['ray_nodes']} Ray nodes): {settings}")
    shown = rows if len(rows) <= SHOWN else sorted(timed, key=lambda r: -r["seconds"])[:10]
    if len(rows) > SHOWN:
        lines.append(f"  the 10 slowest of {len(rows)} (gym-audit --json lists every node):")
    for r in shown:
        took = f"{timefmt.seconds(r['seconds'])} s" if r["seconds"] is not None else "did not finish"
        role = " (head)" if r["head"] else ""
        detail = f" — {r['detail']}" if r["detail"] else ""
        lines.append(f"  rank {r['rank']} node {r['node_index']}{role}: {took}, {r['outcome']}{detail}")
    return lines
