"""A judge's two address records: judge-NAME-RANK.json (a managed judge's own endpoint, written by
its host) and gateway-NAME.json (its gateway, the endpoint every client is given), their builders
and what a reader gets from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schemas.lenient import Lenient, doc_field

__all__ = ["GatewayRecord", "JudgeEndpointRecord", "gateway_fields", "judge_endpoint_fields"]


@dataclass(frozen=True)
class JudgeEndpointRecord(Lenient):
    """judge-NAME-RANK.json as read; `judge`, `rank` and `relpath` say where it was found."""

    judge: str = doc_field(given=True)
    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    endpoint: str | None = None
    devices: tuple[int, ...] | None = None  # None: unreadable
    ready: bool | None = None


def judge_endpoint_fields(
    *,
    name: str,
    backend: str,
    model: str,
    endpoint: str,
    host: str,
    port: int,
    pid: int,
    devices: Sequence[int],
    argv: Sequence[str],
    ready_after_s: float,
    log: str,
) -> dict[str, Any]:
    """judge-NAME-RANK.json: written once the judge is healthy (`ready` is always true)."""
    return {
        "name": name,
        "backend": backend,
        "model": model,
        "endpoint": endpoint,
        "host": host,
        "port": port,
        "pid": pid,
        "devices": list(devices),
        "argv": list(argv),
        "ready": True,
        "ready_after_s": round(ready_after_s, 3),
        "log": log,
    }


@dataclass(frozen=True)
class GatewayRecord(Lenient):
    """gateway-NAME.json as read; `judge` and `relpath` say where it was found."""

    judge: str = doc_field(given=True)
    relpath: str = doc_field(given=True)
    endpoint: str | None = None
    upstream: str | None = None  # None: a managed judge not healthy yet


def gateway_fields(
    *,
    judge: str,
    mode: str,
    endpoint: str,
    host: str,
    port: int,
    pid: int,
    upstream: str | None,
    max_concurrent_calls: int | None,
    requests_log: str,
    log: str,
) -> dict[str, Any]:
    """gateway-NAME.json: where the gateway listens and where it forwards (`upstream`: null until
    a managed judge is healthy, then rewritten)."""
    return {
        "judge": judge,
        "mode": mode,
        "endpoint": endpoint,
        "host": host,
        "port": port,
        "pid": pid,
        "upstream": upstream,
        "max_concurrent_calls": max_concurrent_calls,
        "requests_log": requests_log,
        "log": log,
    }
