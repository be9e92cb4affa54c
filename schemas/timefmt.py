"""One timestamp format for every log line the project writes: ISO-8601, UTC, milliseconds.

Ray and SGLang print ISO times; ours match them, so lines of different logs line up by eye.
"""

from __future__ import annotations

import datetime


def iso_ms(epoch: float) -> str:
    """`2026-11-30T17:06:25.123Z` for a wall-clock time in seconds since the epoch."""
    stamp = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> float | None:
    """The epoch seconds of an `iso_ms` stamp (or any ISO-8601 time with a zone), else None."""
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()
