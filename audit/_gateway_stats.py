"""What each judge served, from its gateway's request log (judge-gateway-NAME.jsonl, every client's
requests): requests, replies, canaries, errors by kind, latency and queue wait percentiles, and a
per-minute series (requests, median latency) for the HTML report's charts.

Errors by kind are the gateway's outcomes other than ``replied`` (``timeout``, ``unavailable``,
``http_error``, ``not_ready``, ``client_gone``, ``bad_request``), plus ``truncated``: a generating
request answered 2xx whose ``finish_reason`` is not ``stop`` (the judge ran out of tokens). Latency
and queue percentiles are over generating requests the judge answered (canaries included: the judge
served them too). Nearest-rank percentiles; milliseconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.lenient import as_str

__all__ = ["MAX_SERIES", "gateway_summary", "percentile"]

MAX_SERIES = 240  # points per judge's series: buckets widen past 240 minutes
PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _spread(values: list[float]) -> dict[str, float | None]:
    values.sort()
    out: dict[str, float | None] = {f"p{p}": _round(percentile(values, p)) for p in PERCENTILES}
    out["max"] = _round(values[-1]) if values else None
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _epoch(at: Any) -> float | None:
    text = as_str(at)
    if text is None:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _series(points: list[tuple[float, float | None]]) -> dict[str, Any]:
    """Requests and the median latency per bucket (a minute, wider for a long run)."""
    if not points:
        return {"start": None, "bucket_s": 60, "requests": [], "latency_p50_ms": []}
    start = min(t for t, _ in points)
    span = max(t for t, _ in points) - start
    bucket = 60.0 * max(1, math.ceil(span / 60.0 / MAX_SERIES))
    n = min(MAX_SERIES, int(span // bucket) + 1)
    counts = [0] * n
    lat: list[list[float]] = [[] for _ in range(n)]
    for t, latency in points:
        i = min(n - 1, int((t - start) // bucket))
        counts[i] += 1
        if latency is not None:
            lat[i].append(latency)
    medians = [_round(percentile(sorted(x), 50)) for x in lat]
    started = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(start * 1000) % 1000:03d}Z"
    return {"start": started, "bucket_s": bucket, "requests": counts, "latency_p50_ms": medians}


def gateway_summary(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """judge -> its gateway's account (empty when no gateway log was read)."""
    by_judge: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for doc in lines:
        by_judge[as_str(doc.get("judge")) or "?"].append(doc)
    out: dict[str, Any] = {}
    for judge, docs in sorted(by_judge.items()):
        errors: dict[str, int] = defaultdict(int)
        latency: list[float] = []
        queue: list[float] = []
        points: list[tuple[float, float | None]] = []
        generation = replies = canary = 0
        for d in docs:
            outcome = as_str(d.get("outcome")) or "?"
            is_gen = d.get("generation") is True
            ms = d.get("latency_ms")
            answered = outcome == "replied"
            if outcome != "replied":
                errors[outcome] += 1
            if is_gen:
                generation += 1
                canary += d.get("canary") is True
                if answered and d.get("canary") is not True:
                    replies += 1
                finish = d.get("finish_reason")
                if answered and isinstance(finish, str) and finish != "stop":
                    errors["truncated"] += 1
                if answered and isinstance(ms, int | float):
                    latency.append(float(ms))
                    q = d.get("queue_ms")
                    queue.append(float(q) if isinstance(q, int | float) else 0.0)
            t = _epoch(d.get("at"))
            if t is not None:
                points.append((t, float(ms) if is_gen and answered and isinstance(ms, int | float) else None))
        out[judge] = {
            "requests": len(docs),
            "generation": generation,
            "replies": replies,
            "canary": canary,
            "errors": dict(sorted(errors.items())),
            "latency_ms": _spread(latency),
            "queue_ms": _spread(queue),
            "series": _series(points),
        }
    return out
