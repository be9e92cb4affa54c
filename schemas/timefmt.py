"""One timestamp format for every log line the project writes: ISO-8601, UTC, milliseconds.

Ray and SGLang print ISO times; ours match them, so lines of different logs line up by eye.
Formatting is total: a time read from a corrupt or hostile artifact (-2**63, 1e308) is shown as
the number it is, never an exception (datetime covers only the years 1 to 9999).
"""

from __future__ import annotations

import datetime
import math

__all__ = ["iso_ms", "out_of_range", "parse_iso", "seconds", "utc"]

# The epochs datetime can represent (0001-01-01 and 9999-12-31, UTC), a day inside each end.
_FIRST = datetime.datetime(1, 1, 2, tzinfo=datetime.UTC).timestamp()
_LAST = datetime.datetime(9999, 12, 30, tzinfo=datetime.UTC).timestamp()


def utc(epoch: float) -> datetime.datetime | None:
    """The UTC datetime of `epoch` (seconds since the epoch), or None when no datetime is."""
    try:
        if not (math.isfinite(epoch) and _FIRST <= epoch <= _LAST):
            return None
        return datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def out_of_range(epoch: float) -> str:
    """`t=-9.22337e+18`: a time no calendar date shows, short whatever its size."""
    try:
        return f"t={float(epoch):.6g}"
    except (OverflowError, ValueError, TypeError):  # an integer beyond any float
        return "t=(out of range)"


def iso_ms(epoch: float, sep: str = "T") -> str:
    """`2026-11-30T17:06:25.123Z` for a wall-clock time in seconds since the epoch."""
    stamp = utc(epoch)
    if stamp is None:
        return out_of_range(epoch)
    return stamp.isoformat(sep=sep, timespec="milliseconds").removesuffix("+00:00") + "Z"


def seconds(value: float, places: int = 1) -> str:
    """`12.3` for a duration in seconds; one no run lasts (a corrupt artifact's 1e308) stays short."""
    return f"{value:.{places}f}" if abs(value) < 1e11 else f"{value:.3g}"


def parse_iso(text: str) -> float | None:
    """The epoch seconds of an `iso_ms` stamp (or any ISO-8601 time with a zone), else None."""
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()
