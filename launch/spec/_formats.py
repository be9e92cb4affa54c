"""The formats a spec file may be written in, told apart by its top-level keys alone: the readers of
the other formats (launch/spec/_miles.py, launch/spec/_nemo_gym.py) load only for a file in theirs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["FORMAT_GYM", "FORMAT_MILES", "FORMAT_NEMO_GYM", "source_format"]

FORMAT_GYM = "gym-agent"
FORMAT_MILES = "miles"
FORMAT_NEMO_GYM = "nemo-gym"


def source_format(data: Mapping[str, Any]) -> str:
    """A NeMo Gym submission config has both ``compute`` and ``services`` at the top level; a MILES
    run file a ``schema_version`` or a ``model``; anything else is this project's spelling."""
    if "compute" in data and "services" in data:
        return FORMAT_NEMO_GYM
    if "schema_version" in data or "model" in data:
        return FORMAT_MILES
    return FORMAT_GYM
