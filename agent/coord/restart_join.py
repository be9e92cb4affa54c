"""Restart mode (GYM_RESUME=restart): a launch whose scheduler restarts it under one token.

Beaker retries a task by starting every replica again as new jobs of the same workload, with the
same command and environment; the token (agent/coord/attempts.py attempt_token) is the workload's,
so the replicas of a launch and all its restarts share it. A shared token cannot tell a joiner of
the current attempt from a restart, so the run directory decides:

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
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.coord.attempts import AttemptRefused, claim_next, ended, join, used
from agent.coord.restart_caps import Caps
from schemas import RunDir, Writer, names
from schemas.vocab import ResumeEnv

MODE = "restart"


def join_restart(
    run: RunDir,
    writer: Writer,
    token: str,
    rank: int,
    *,
    adopt: bool,
    heartbeat_timeout: float,
    startup_timeout: float,
    deadline: float,
    poll: float,
    caps: Caps | None = None,
    log: Callable[[str], None] = lambda _line: None,
) -> int:
    """Enter the run as rank `rank` of launch `token`; sets run.attempt. `adopt`: ``--resume`` too."""
    timing = {"deadline": deadline, "poll": poll}
    while True:
        claimed = run.claimed_attempts()
        if not claimed and not used(run):
            return claim_next(run, writer, token, None, caps=caps, mode=MODE, log=log, **timing)
        current = claimed[-1] if claimed else None
        owner = (run.read_json(names.attempt_claim(current)) or {}).get("token") if current else None
        if current is None or owner != token:
            if adopt:
                return join(
                    run,
                    writer,
                    token,
                    heartbeat_timeout=heartbeat_timeout,
                    startup_timeout=startup_timeout,
                    caps=caps,
                    mode=MODE,
                    log=log,
                    **timing,
                )
            raise AttemptRefused(_foreign(current, owner))
        run.attempt = current
        if names.READY_LEAF in run.listdir(names.attempt_dir(current)):
            if run.read_json(names.COMPLETE) is not None:
                raise AttemptRefused(_finished(current))
            why = ended(run, current, heartbeat_timeout, startup_timeout)
            held = run.read_json(names.address(rank)) is not None
            if claimed != run.claimed_attempts():
                continue  # a peer claimed the next attempt meanwhile: what was read may be half-moved
            if why is None:
                return claim_next(run, writer, token, current, caps=caps, mode=MODE, log=log, **timing)
            if not held:
                return current
        else:
            why, held = "its claimant is still moving the attempt before it aside", False
        if time.monotonic() >= deadline:
            raise AttemptRefused(_still_running(current, rank, why, held))
        time.sleep(poll)


def _foreign(current: int | None, owner: str | None) -> str:
    whose = f"attempt {current} was started by launch {owner!r}" if current else "it was started without a claim"
    return (
        f"this run directory holds another launch's run ({whose}); a restart ({ResumeEnv.RESUME}="
        f"{ResumeEnv.RESTART}) only continues its own launch. Submit with --resume to continue it, or use a new "
        "--uuid. This process wrote nothing"
    )


def _finished(current: int) -> str:
    return (
        f"attempt {current} of this launch completed ({names.COMPLETE}: the driver exited 0), so a restart does "
        "not run it again (a replica that failed after the driver's end made the scheduler retry). To extend "
        "the run, submit it with --resume. This process wrote nothing"
    )


def _still_running(current: int, rank: int, why: str, held: bool) -> str:
    what = f"rank {rank} already ran in attempt {current}, which" if held else f"attempt {current}"
    return (
        f"{what} has not ended by the startup deadline ({why}); a restart starts the next attempt only after "
        "the previous one ended. This process wrote nothing"
    )
