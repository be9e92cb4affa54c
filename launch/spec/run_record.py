"""The body of a run directory's spec.json as a run writes it when it starts: the spec as spelled
(load.spec_record) and the identity of the files the audit later reads outside the run directory,
so it can tell when one changed since ([driver.ledger] order: data.order_changed)."""

from __future__ import annotations

from typing import Any

from launch.spec.config import RunConfig
from launch.spec.load import spec_record
from schemas.ledger_order import ORDER_FIELD, order_identity

__all__ = ["run_spec_record"]


def run_spec_record(config: RunConfig, source: str) -> dict[str, Any]:
    body = spec_record(config.spec, source)
    path = config.driver.ledger.order_path(config.spec.base_dir)
    identity = order_identity(path) if path is not None else None
    if identity is not None:  # unreadable now: the audit says so of the file it finds
        body[ORDER_FIELD] = identity
    return body
