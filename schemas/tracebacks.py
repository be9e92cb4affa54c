"""Where a log's last Python traceback stands: the agent quotes its exception line in a cause, the
audit shows the whole traceback in an excerpt; both read it with this one rule."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TRACEBACK_HEAD", "last_traceback"]

TRACEBACK_HEAD = "Traceback (most recent call last)"


def last_traceback(lines: Sequence[str]) -> tuple[int, int] | None:
    """(start, end) of the last traceback in `lines`, or None: its head line at `start`, its frames
    (indented or blank lines) after it, and at `end` the first unindented line after those (the
    exception line: `ValueError: ...`); `end == len(lines)` when the log stops inside the frames."""
    start = max((i for i, ln in enumerate(lines) if ln.startswith(TRACEBACK_HEAD)), default=-1)
    if start < 0:
        return None
    end = start + 1
    while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
        end += 1
    return start, end
