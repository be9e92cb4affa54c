"""Dotted key paths as people type them (``judging.bindings."general-quality".judge``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

__all__ = ["format_key", "format_segment"]

# TOML bare keys: anything else must be quoted to round-trip through ``--set``.
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def format_segment(segment: str) -> str:
    if _BARE.fullmatch(segment):
        return segment
    # A TOML basic string is JSON-compatible for the characters we emit.
    return json.dumps(segment, ensure_ascii=False)


def format_key(segments: Iterable[str]) -> str:
    """The path as a TOML dotted key, quoting only segments that need it."""
    return ".".join(format_segment(s) for s in segments)
