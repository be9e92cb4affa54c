"""What the first lines of `gym-audit`'s text must say about a failed run: the one check that both
`make faults` (bench/faults.py) and `make test` (tests/test_audit_head.py) apply.

The promise (issue 38, seed fidelity item 9): the verdict on line 1; right under it what ended the
run (a restart the caps refused, then "First cause:"); the first cause's headline naming its rank
and kind, and the log it points at, within the first FIRST_LINES lines, whatever summaries
(filesystem, doorbell, training evidence, judge replies) the report grows below it.
"""

from __future__ import annotations

from collections.abc import Sequence

FIRST_LINES = 6
HEADING = "First cause:"
REFUSED = "  restarts stopped ("


def first_cause_problem(
    report: str, *, rank: int | None, kinds: Sequence[str], words: Sequence[str] = ()
) -> str | None:
    """None when the report's first lines name the first cause as promised, else what is wrong."""
    lines = report.splitlines()
    head = lines[:FIRST_LINES]
    if len(head) < 2 or not head[0].startswith("gym-audit: "):
        return f"line 1 is not the verdict: {head[:1]!r}"
    below = [ln for ln in head[1:] if ln.startswith(REFUSED)]
    rest = head[1 + len(below) :]
    if not below and (not rest or rest[0] != HEADING):
        return f"line {2 + len(below)} is {rest[:1]!r}, not {HEADING!r} (the first cause is not under the verdict)"
    text = "\n".join(head)
    if rank is not None and f"rank {rank}" not in text:
        return f"the first {FIRST_LINES} lines do not name rank {rank}"
    if kinds and not any(k in text for k in kinds):
        return f"the first {FIRST_LINES} lines do not name {' or '.join(kinds)}"
    missing = [w for w in words if w not in text]
    if missing:
        return f"the first {FIRST_LINES} lines do not say {missing}"
    if HEADING in lines:
        block = lines[lines.index(HEADING) + 1 :]
        block = block[: block.index("")] if "" in block else block
        log = next((i for i, ln in enumerate(block) if ln.startswith("  log ")), None)
        at = lines.index(HEADING) + 1 + (log if log is not None else 0)
        if log is not None and at >= FIRST_LINES:
            return f"the first cause's log line is line {at + 1}, below the first {FIRST_LINES}"
    return None
