"""What one line of the trainer's declared evidence says about a step ([driver.evidence]): read the
same way by the audit (after the run, every line) and by the driver node's progress watch (while
it runs, each new line). Pure: a parsed JSON object or a log line in, a step or None out."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "MILES_CONTRACT_GLOB",
    "MILES_CONTRACT_RE",
    "MILES_CONTRACT_VERSION",
    "MILES_LOSS_FIELD",
    "MILES_OPTIMIZER_EVENT",
    "MILES_PUBLICATION",
    "MILES_REPLAY_EVENT",
    "is_number",
    "metrics_step",
    "miles_step",
]

# The MILES trainer's own file names and fields (its formats, not this project's contract).
MILES_CONTRACT_RE = re.compile(r"^training_contract_rank(\d+)\.jsonl$")
MILES_CONTRACT_GLOB = "training_contract_rank*.jsonl"
MILES_PUBLICATION = "publication.jsonl"
MILES_CONTRACT_VERSION = 1  # every contract line's schema_version
MILES_OPTIMIZER_EVENT = "optimizer"
MILES_REPLAY_EVENT = "replay_routes"  # written only with the trainer's replay diagnostics on
MILES_LOSS_FIELD = "local_policy_objective"


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def miles_step(doc: dict[str, Any]) -> int | None:
    """The completed optimizer step of a MILES contract line, or None when it records none."""
    if doc.get("event") != MILES_OPTIMIZER_EVENT or doc.get("optimizer_skipped") is True:
        return None
    step = doc.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 1 else None


def metrics_step(doc: dict[str, Any], step_field: str) -> float | None:
    """The step of a metrics line (a number in `step_field`), or None."""
    step = doc.get(step_field)
    return step if is_number(step) else None
