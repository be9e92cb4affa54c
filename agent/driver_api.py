"""What a training driver started by the agent can use: its Ray, the plan, the judges, its result.

The agent tells the driver everything through its environment (schemas.DriverEnv names it).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from schemas import DriverEnv, RunDir, Writer, WriterKind, names

__all__ = ["connect_ray", "plan", "registry", "run_file", "write_result"]


def connect_ray(**kwargs: Any) -> Any:
    """ray.init() against this run's cluster, as a driver on this node's own Ray address."""
    import ray

    return ray.init(
        address=os.environ[DriverEnv.RAY_ADDRESS], _node_ip_address=os.environ[DriverEnv.NODE_ADDRESS], **kwargs
    )


def run_file() -> Path | None:
    """The user's run file, byte for byte (set when the spec was loaded from a file)."""
    path = os.environ.get(DriverEnv.RUN_FILE)
    return Path(path) if path else None


def plan() -> dict[str, Any]:
    """The plan as JSON, plus `addresses`: the address that owns each planned node."""
    return json.loads(os.environ[DriverEnv.PLAN])


def registry() -> dict[str, Any]:
    """registry.json: judges (with endpoints), rubrics (with digests), bindings. Empty without judges."""
    raw = os.environ.get(DriverEnv.REGISTRY)
    return json.loads(raw) if raw else {"judges": {}, "rubrics": {}, "bindings": {}}


def write_result(**fields: Any) -> dict[str, Any]:
    """Write driver-result.json: the driver's own evidence (steps, finite loss, refreshes, judge replies)."""
    losses = fields.get("losses", [])
    if any(not math.isfinite(x) for x in losses) or not math.isfinite(fields.get("final_loss", 0.0)):
        raise ValueError("losses must be finite")
    run = RunDir.open(Path(os.environ[DriverEnv.RUN_DIR]))
    writer = Writer(
        os.environ[DriverEnv.FINGERPRINT],
        int(os.environ[DriverEnv.RANK]),
        os.environ[DriverEnv.INCARNATION],
        kind=WriterKind.DRIVER,
    )
    try:
        return run.write_artifact(names.DRIVER_RESULT, writer, fields)
    finally:
        run.close()
