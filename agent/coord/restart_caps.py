"""Restart caps: how many attempts a run may make, counted from its own attempts/ (never the
scheduler's memory, which a resubmission resets), and a stop for a crash loop.

Every claim of a new attempt records what the caps need: the checkpoint directory's state when
the attempt began, and the previous attempt's first cause in short (its signature). An attempt
made progress when the checkpoint directory changed while it ran; a run that never wrote a
checkpoint made progress when its attempt failed differently from the one before. The claimant
of attempt N refuses it when N - 1 restarts are more than ``[launch] max_retries``, or when the
last ``max_no_progress_attempts`` attempts in a row made none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from schemas import RunDir, names

MAX_SCAN = 20000  # checkpoint entries looked at; a bigger tree is summarised by its first ones


@dataclass(frozen=True)
class Caps:
    max_retries: int | None  # restarts after the first attempt; None: no cap
    max_no_progress: int | None  # attempts in a row without progress; None: no stop


def checkpoint_state(run: RunDir) -> dict[str, Any]:
    """Files, bytes and the newest mtime under RUN/checkpoints (symlinks not followed)."""
    root = run.path / names.CHECKPOINTS_DIR
    files = size = 0
    newest: float | None = None
    for seen, (dirpath, _dirs, leaves) in enumerate(os.walk(root)):
        if seen > MAX_SCAN:
            break
        for leaf in leaves:
            try:
                st = os.lstat(os.path.join(dirpath, leaf))
            except OSError:
                continue
            files += 1
            size += st.st_size
            newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    return {"files": files, "bytes": size, "newest": newest}


def cause_signature(run: RunDir, attempt: int) -> str | None:
    """The attempt's earliest own failure (not a reaction) as kind, rank and exit code; None
    without one. `attempt`'s files must still be at the top of the run directory."""
    saved, run.attempt = run.attempt, attempt
    try:
        roots = []
        for leaf in run.listdir(names.FAILURES_DIR):
            rank = names.rank_in(names.FAILURES_DIR, leaf)
            doc = run.read_json(names.failure(rank)) if rank is not None else None
            if doc is None or doc.get("reacting_to") is not None:
                continue
            roots.append((float(doc.get("wall_time") or 0.0), rank, doc))
        if not roots:
            return None
        _, rank, doc = min(roots, key=lambda r: (r[0], r[1]))
        code = doc.get("exit_code")
        return f"{doc.get('kind')} on rank {rank}" + (f" (exit code {code})" if code is not None else "")
    finally:
        run.attempt = saved


def _history(run: RunDir, upto: int) -> list[dict[str, Any]]:
    """Claims of attempts 1..upto (an attempt started without --resume has none: an empty one)."""
    out = []
    for n in range(1, upto + 1):
        doc = run.read_json(names.attempt_claim(n)) or {}
        out.append(doc)
    return out


def refusal(run: RunDir, target: int, caps: Caps, now_state: dict[str, Any], last_cause: str | None) -> str | None:
    """Why attempt `target` must not start, or None. `now_state`: the checkpoints now;
    `last_cause`: attempt target-1's signature."""
    restarts = target - 1
    if caps.max_retries is not None and restarts > caps.max_retries:
        return (
            f"max_retries: attempt {target} would be restart {restarts}, and [launch] max_retries is "
            f"{caps.max_retries} (counted from this run's attempts/)"
        )
    k = caps.max_no_progress
    if k is None or restarts < k:
        return None
    claims = _history(run, target - 1)
    states = [c.get("checkpoints") or {"files": 0, "bytes": 0, "newest": None} for c in claims] + [now_state]
    # causes[i]: attempt i+1's signature (recorded by attempt i+2's claim; the last one is given).
    causes = [c.get("previous_cause") for c in claims[1:]] + [last_cause]
    never_checkpointed = all(not s.get("files") for s in states)
    if never_checkpointed:
        last = causes[-k:]
        stalled = last[0] is not None and all(c == last[0] for c in last)
    else:
        stalled = all(states[i + 1] == states[i] for i in range(target - 1 - k, target - 1))
    if stalled:
        what = (
            f"failed the same way ({last_cause})"
            if never_checkpointed
            else "wrote no new checkpoint under checkpoints/"
        )
        return (
            f"max_no_progress_attempts: the last {k} attempts each {what}; "
            f"[launch] max_no_progress_attempts is {k}: fix the cause, then resume with a new submission"
        )
    return None
