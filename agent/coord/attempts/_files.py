"""The attempts' file I/O: what entering an attempt reads of the run directory (claims, whether an
attempt ended, the checkpoints, a failed attempt's first cause) and what it writes (the claim, the
refusal record, the previous attempt's files moved into attempts/N/). Decisions are _decide.py's."""

from __future__ import annotations

import os
import time
from typing import Any

from agent.coord.attempts._decide import AttemptRefused, Look, Timing, never_ready
from agent.ground.waits import poll_until
from schemas import RunDir, Writer, names, records

__all__ = [
    "archive",
    "cause_signature",
    "checkpoint_state",
    "claim_token",
    "claims",
    "create_claim",
    "ended",
    "look",
    "record_refusal",
    "used",
    "wait_ready",
]

MAX_SCAN = 20000  # checkpoint entries looked at; a bigger tree is summarised by its first ones


# -- reading -------------------------------------------------------------------------------------


def used(run: RunDir) -> bool:
    return bool(run.listdir(names.ADDRESSES_DIR)) or bool(run.claimed_attempts())


def _claim(run: RunDir, attempt: int) -> records.AttemptRecord | None:
    return records.AttemptRecord.from_json(run.read_json(names.attempt_claim(attempt)))


def claim_token(run: RunDir, attempt: int) -> str | None:
    """The token of the launch that claimed `attempt`, as recorded (None: no readable claim)."""
    claim = _claim(run, attempt)
    return claim.token if claim is not None else None


def claims(run: RunDir, upto: int) -> list[records.AttemptRecord]:
    """Claims of attempts 1..upto (an attempt started without --resume has none: an empty one)."""
    return [_claim(run, n) or records.AttemptRecord() for n in range(1, upto + 1)]


def _age(written_at: float | None, now: float) -> float | None:
    return now - written_at if written_at is not None else None


def ended(run: RunDir, attempt: int, timing: Timing) -> str | None:
    """None when attempt `attempt` (whose files are at the top) has ended, else why it has not."""
    saved, run.attempt = run.attempt, attempt
    try:
        if run.read_json(names.COMPLETE) is not None:
            return None
        for name in run.listdir(names.FAILURES_DIR):
            rank = names.rank_in(names.FAILURES_DIR, name)
            if rank is not None and run.read_json(names.failure(rank)) is not None:
                return None
        now = time.time()
        claim = _claim(run, attempt)
        age = _age(claim.written_at if claim is not None else None, now)
        if age is not None and age < timing.startup_timeout:
            # Its agents may not have written a heartbeat yet: started is running until proven silent.
            return f"it was claimed {age:.0f}s ago and has no outcome yet"
        for name in run.listdir(names.HEARTBEATS_DIR):
            rank = names.rank_in(names.HEARTBEATS_DIR, name)
            beat = records.HeartbeatRecord.from_json(run.read_json(names.heartbeat(rank))) if rank is not None else None
            age = _age(beat.written_at if beat is not None else None, now)
            if age is not None and age < timing.heartbeat_timeout:
                return f"rank {rank} wrote a heartbeat {age:.0f}s ago"
        return None
    finally:
        run.attempt = saved


def look(run: RunDir, attempt: int, rank: int, claimed: list[int], timing: Timing) -> Look:
    """Restart mode's look at this launch's attempt (run.attempt is set to it): read only as far
    as the decision needs."""
    run.attempt = attempt
    if names.READY_LEAF not in run.listdir(names.attempt_dir(attempt)):
        return Look(attempt, ready=False)
    if run.read_json(names.COMPLETE) is not None:
        return Look(attempt, ready=True, complete=True)
    why = ended(run, attempt, timing)
    held = run.read_json(names.address(rank)) is not None
    return Look(attempt, ready=True, not_ended=why, held=held, moved=claimed != run.claimed_attempts())


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
            rec = records.read_failure(run.read_json, rank) if rank is not None else None
            if rec is not None and rec.reacting_to is None:
                roots.append(rec)
        if not roots:
            return None
        first = min(roots, key=lambda r: (r.wall_time or 0.0, r.rank))
        code = first.exit_code
        return f"{first.kind} on rank {first.rank}" + (f" (exit code {code})" if code is not None else "")
    finally:
        run.attempt = saved


def wait_ready(run: RunDir, attempt: int, timing: Timing) -> int:
    """A joiner of the claimant's attempt waits until the old files are out of the way."""
    run.attempt = attempt
    if not poll_until(
        lambda: names.READY_LEAF in run.listdir(names.attempt_dir(attempt)),
        deadline=timing.deadline,
        interval=timing.poll,
    ):
        raise AttemptRefused(never_ready(attempt))
    return attempt


# -- writing -------------------------------------------------------------------------------------


def create_claim(run: RunDir, writer: Writer, attempt: int, fields: dict[str, Any]) -> bool:
    """Create attempts/N/claim.json exclusively (link(2): atomic on NFSv3+ too); False when taken."""
    try:
        run.create_artifact(names.attempt_claim(attempt), writer, fields)
    except FileExistsError:
        return False
    return True


def record_refusal(run: RunDir, writer: Writer, target: int, token: str, previous: int | None, why: str) -> None:
    """Every replica of the refused attempt decides alike; the first one's record stays."""
    saved, run.attempt = run.attempt, target
    try:
        run.create_artifact(
            names.attempt_refused(target), writer, records.refused_fields(token=token, previous=previous, reason=why)
        )
    except FileExistsError:
        pass
    finally:
        run.attempt = saved


def archive(run: RunDir, previous: int) -> list[str]:
    """Move attempt `previous`'s files into attempts/PREVIOUS/ (same names inside)."""
    dest = names.attempt_dir(previous)
    run.ensure_dir(dest)  # attempt 1 of a run started without --resume has no claim directory
    moved = []
    for name in run.listdir():
        if names.is_run_level(name) or names.is_temp(name):
            continue
        run.move_into(name, dest)
        moved.append(name)
    for sub in names.SUBDIRS:
        run.ensure_dir(sub)
    if names.SPEC in run.listdir():
        try:
            run.link_into(names.SPEC, dest)  # the archive reads as a run directory on its own
        except FileExistsError:
            pass
    return moved
