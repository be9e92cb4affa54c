"""What a training driver started by the agent can use: its Ray, the plan, the judges, its result.

The agent tells the driver everything through its environment (GYM_* and RAY_ADDRESS).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from schemas import RunDir, Writer, names


def connect_ray(**kwargs: Any) -> Any:
    """ray.init() against this run's cluster, as a driver on this node's own Ray address."""
    import ray

    return ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=os.environ["GYM_NODE_ADDRESS"], **kwargs)


def plan() -> dict[str, Any]:
    """The plan as JSON, plus `addresses`: the address that owns each planned node."""
    return json.loads(os.environ["GYM_PLAN"])


def registry() -> dict[str, Any]:
    """registry.json: judges (with endpoints), rubrics (with digests), bindings. Empty without judges."""
    raw = os.environ.get("GYM_REGISTRY")
    return json.loads(raw) if raw else {"judges": {}, "rubrics": {}, "bindings": {}}


def write_result(**fields: Any) -> dict[str, Any]:
    """Write driver-result.json: the driver's own evidence (steps, finite loss, refreshes, judge replies)."""
    losses = fields.get("losses", [])
    if any(not math.isfinite(x) for x in losses) or not math.isfinite(fields.get("final_loss", 0.0)):
        raise ValueError("losses must be finite")
    run = RunDir.open(Path(os.environ["GYM_RUN_DIR"]))
    writer = Writer(
        os.environ["GYM_FINGERPRINT"], int(os.environ["GYM_RANK"]), os.environ["GYM_INCARNATION"], kind="driver"
    )
    try:
        return run.write_artifact(names.DRIVER_RESULT, "driver-result", writer, fields)
    finally:
        run.close()
