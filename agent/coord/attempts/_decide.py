"""The attempt decisions, without I/O: each takes what was read of the run directory and says what
to do next; the refusals' messages; the fields of the attempt records.

Restart mode (GYM_RESUME=restart) is a launch whose scheduler restarts it under one token. Beaker
retries a task by starting every replica again as new jobs of the same workload, with the same
command and environment; the token (_mode.py attempt_token) is the workload's, so the replicas of a
launch and all its restarts share it. A shared token cannot tell a joiner of the current attempt
from a restart, so the run directory decides:

- no attempt yet (a fresh directory, or one `gym-launch submit` only prepared): claim attempt 1;
- the current attempt is this launch's and has ended, or this replica's rank already ran in it (a
  replica never runs twice in one attempt: a restart that sees its old attempt before its end does,
  which it waits for, within the startup deadline): claim the next one, under the restart caps;
- this launch's attempt still running with this rank free: join it (a peer of this start claimed it);
- this launch's attempt completed (the driver exited 0): refused, the run is not trained again (a
  retry after a replica failed past the driver's end); ``--resume`` in a new submission extends it;
- a run another launch started (a claim with another token, or files and no claim): refused, unless
  ``--resume`` was given too, which continues it as ``--resume`` does (a resubmission must not
  silently take over someone's run).

Restart caps: how many attempts a run may make, counted from its own attempts/ (never the
scheduler's memory, which a resubmission resets), and a stop for a crash loop. Every claim of a new
attempt records what the caps need: the checkpoint directory's state when the attempt began, and the
previous attempt's first cause in short (its signature). An attempt made progress when the checkpoint
directory changed while it ran; a run that never wrote a checkpoint made progress when its attempt
failed differently from the one before. The claimant of attempt N refuses it when N - 1 restarts are
more than ``[launch] max_retries``, or when the last ``max_no_progress_attempts`` attempts in a row
made none.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launch.spec.errors import GymError
from schemas import names
from schemas.records import AttemptRecord
from schemas.vocab import ResumeEnv

__all__ = [
    "AttemptRefused",
    "Caps",
    "Decision",
    "Look",
    "Timing",
    "Verb",
    "finished",
    "foreign",
    "never_ready",
    "no_progress",
    "not_ended",
    "over_retries",
    "refused",
    "restart_entry",
    "restart_look",
    "resume_entry",
    "still_running",
    "taken",
    "watches_progress",
]


class AttemptRefused(GymError):
    """This process must not join: another launch holds the attempt, or the previous one still runs."""


@dataclass(frozen=True)
class Caps:
    max_retries: int | None  # restarts after the first attempt; None: no cap
    max_no_progress: int | None  # attempts in a row without progress; None: no stop


@dataclass(frozen=True)
class Timing:
    """The bounds of entering an attempt: the run's timeouts and this agent's startup deadline."""

    heartbeat_timeout: float
    startup_timeout: float
    deadline: float  # monotonic: the single startup deadline
    poll: float


class Verb(enum.Enum):
    CLAIM = "claim"  # claim attempt `attempt` + 1 (attempt None: claim attempt 1)
    JOIN = "join"  # join attempt `attempt`
    ADOPT = "adopt"  # --resume too: enter another launch's run as --resume does
    LOOK = "look"  # restart mode: attempt `attempt` is this launch's; look at it closer
    WAIT = "wait"  # look again after a poll; `reason` is the refusal once the deadline passed
    AGAIN = "again"  # a peer claimed the next attempt while we read: read again at once
    REFUSE = "refuse"  # `reason` says why; this process wrote nothing


@dataclass(frozen=True)
class Decision:
    verb: Verb
    attempt: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Look:
    """What one look at this launch's current attempt found (restart mode)."""

    attempt: int
    ready: bool  # its claimant moved the attempt before it aside
    complete: bool = False  # its driver succeeded
    not_ended: str | None = None  # why it has not ended; None: it has
    held: bool = False  # this replica's rank already ran in it
    moved: bool = False  # the claimed attempts changed while we read


# -- entering ------------------------------------------------------------------------------------


def resume_entry(current: int | None, owner: object, token: str, used: bool) -> Decision:
    """--resume: join this launch's current attempt, else claim the next one (JOIN, or CLAIM of the
    attempt before it, which must have ended: None for a run directory never used)."""
    if current is not None and owner == token:
        return Decision(Verb.JOIN, current)
    if current is not None:
        return Decision(Verb.CLAIM, current)
    return Decision(Verb.CLAIM, 1 if used else None)


def restart_entry(fresh: bool, current: int | None, owner: object, token: str, adopt: bool) -> Decision:
    """Restart mode, first look: `fresh` (no claim, no files) claims attempt 1; another launch's run
    is refused unless adopted (``--resume`` too); this launch's attempt is looked at closer."""
    if fresh:
        return Decision(Verb.CLAIM, None)
    if current is None or owner != token:
        return Decision(Verb.ADOPT) if adopt else Decision(Verb.REFUSE, reason=foreign(current, owner))
    return Decision(Verb.LOOK, current)


def restart_look(look: Look, rank: int) -> Decision:
    """Restart mode, this launch's attempt: claim the next once it ended, join it while it runs
    without this rank, else wait (within the startup deadline) for it to end."""
    current = look.attempt
    if not look.ready:
        why = "its claimant is still moving the attempt before it aside"
        return Decision(Verb.WAIT, current, still_running(current, rank, why, held=False))
    if look.complete:
        return Decision(Verb.REFUSE, current, finished(current))
    if look.moved:
        return Decision(Verb.AGAIN, current)  # what was read may be half-moved
    if look.not_ended is None:
        return Decision(Verb.CLAIM, current)
    if not look.held:
        return Decision(Verb.JOIN, current)
    return Decision(Verb.WAIT, current, still_running(current, rank, look.not_ended, held=True))


# -- the restart caps ----------------------------------------------------------------------------


def over_retries(caps: Caps, target: int) -> str | None:
    """Why attempt `target` would be one restart too many, or None."""
    restarts = target - 1
    if caps.max_retries is not None and restarts > caps.max_retries:
        return (
            f"max_retries: attempt {target} would be restart {restarts}, and [launch] max_retries is "
            f"{caps.max_retries} (counted from this run's attempts/)"
        )
    return None


def watches_progress(caps: Caps, target: int) -> bool:
    """Are there enough attempts before `target` for the no-progress stop to judge?"""
    return caps.max_no_progress is not None and target - 1 >= caps.max_no_progress


def no_progress(
    caps: Caps, target: int, claims: Sequence[AttemptRecord], now_state: Mapping[str, Any], last_cause: str | None
) -> str | None:
    """Why attempt `target` must not start after `max_no_progress` attempts in a row without
    progress, or None. `claims`: the claims of attempts 1..target-1 (empty for one started without
    --resume); `now_state`: the checkpoints now; `last_cause`: attempt target-1's signature."""
    k = caps.max_no_progress
    if k is None or not watches_progress(caps, target):
        return None
    states = [c.checkpoints or {"files": 0, "bytes": 0, "newest": None} for c in claims] + [now_state]
    # causes[i]: attempt i+1's signature (recorded by attempt i+2's claim; the last one is given).
    causes = [c.previous_cause for c in claims[1:]] + [last_cause]
    never_checkpointed = all(not s.get("files") for s in states)
    if never_checkpointed:
        last = causes[-k:]
        stalled = last[0] is not None and all(c == last[0] for c in last)
    else:
        stalled = all(states[i + 1] == states[i] for i in range(target - 1 - k, target - 1))
    if not stalled:
        return None
    what = f"failed the same way ({last_cause})" if never_checkpointed else "wrote no new checkpoint under checkpoints/"
    return (
        f"max_no_progress_attempts: the last {k} attempts each {what}; "
        f"[launch] max_no_progress_attempts is {k}: fix the cause, then resume with a new submission"
    )


# -- the records ---------------------------------------------------------------------------------


# -- the refusals' words -------------------------------------------------------------------------


def not_ended(previous: int, why: str) -> str:
    return f"attempt {previous} of this run has not ended ({why}); stop it before resuming. This process wrote nothing"


def refused(target: int, why: str) -> str:
    return f"attempt {target} refused: {why}. This process started nothing"


def taken(target: int, owner: object) -> str:
    return (
        f"attempt {target} of this run was already started by another launch (token {owner!r}, "
        f"pid-independent claim {names.attempt_claim(target)}); this process did not join and wrote nothing"
    )


def never_ready(attempt: int) -> str:
    return (
        f"attempt {attempt}: its claimant never finished moving the previous attempt's files "
        f"({names.attempt_ready(attempt)} missing); this process wrote nothing"
    )


def foreign(current: int | None, owner: object) -> str:
    whose = f"attempt {current} was started by launch {owner!r}" if current else "it was started without a claim"
    return (
        f"this run directory holds another launch's run ({whose}); a restart ({ResumeEnv.RESUME}="
        f"{ResumeEnv.RESTART}) only continues its own launch. Submit with --resume to continue it, or use a new "
        "--uuid. This process wrote nothing"
    )


def finished(current: int) -> str:
    return (
        f"attempt {current} of this launch completed ({names.COMPLETE}: the driver exited 0), so a restart does "
        "not run it again (a replica that failed after the driver's end made the scheduler retry). To extend "
        "the run, submit it with --resume. This process wrote nothing"
    )


def still_running(current: int, rank: int, why: str, *, held: bool) -> str:
    what = f"rank {rank} already ran in attempt {current}, which" if held else f"attempt {current}"
    return (
        f"{what} has not ended by the startup deadline ({why}); a restart starts the next attempt only after "
        "the previous one ended. This process wrote nothing"
    )
