"""Entering an attempt: the one entry point (`enter_attempt`) and the two ways in, --resume
(`join`) and restart mode (`join_restart`), which share the claim of a new attempt (`claim_next`).
Each asks _decide.py what to do with what _files.py read, and does it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.coord.attempts import _decide as decide
from agent.coord.attempts import _files as files
from agent.coord.attempts._decide import AttemptRefused, Caps, Timing, Verb
from agent.coord.attempts._mode import RESTART, RESUME, ResumeMode, attempt_token
from launch.spec.config import RunConfig
from launch.spec.restarts import max_retries
from schemas import RunDir, Writer, names, records

__all__ = ["AttemptEntered", "claim_next", "enter_attempt", "join", "join_restart"]


@dataclass(frozen=True)
class AttemptEntered:
    """This replica belongs to attempt `attempt` of launch `token` (run.attempt is set to it)."""

    attempt: int
    token: str


def enter_attempt(
    run: RunDir,
    writer: Writer,
    rank: int,
    config: RunConfig,
    mode: ResumeMode,
    *,
    started_mono: float,
    env: Mapping[str, str] = os.environ,
) -> AttemptEntered:
    """Join or claim the attempt this replica belongs to; AttemptRefused (this process wrote
    nothing, or only a refusal record) when it must not run. Within the startup deadline."""
    coord = config.coordination
    caps = Caps(max_retries(config), config.launch.max_no_progress_attempts)
    token = attempt_token(env)
    timing = Timing(
        heartbeat_timeout=coord.heartbeat_timeout,
        startup_timeout=coord.startup_timeout,
        deadline=started_mono + coord.startup_timeout,
        poll=coord.poll_interval,
    )
    if mode.restart:
        attempt = join_restart(run, writer, token, rank, adopt=mode.resume, timing=timing, caps=caps)
    else:
        attempt = join(run, writer, token, timing=timing, caps=caps)
    return AttemptEntered(attempt, token)


def join(
    run: RunDir, writer: Writer, token: str, *, timing: Timing, caps: Caps | None = None, mode: str = RESUME
) -> int:
    """Join the attempt of launch `token` (claiming a new one when needed); sets run.attempt.
    A new attempt past the restart caps is refused (AttemptRefused) with attempts/N/refused.json."""
    claimed = run.claimed_attempts()
    current = names.current_attempt(claimed) if claimed else None
    owner = files.claim_token(run, current) if current is not None else None
    step = decide.resume_entry(current, owner, token, used=current is None and files.used(run))
    if step.verb is Verb.JOIN and step.attempt is not None:
        return files.wait_ready(run, step.attempt, timing)
    if step.attempt is not None:
        why = files.ended(run, step.attempt, timing)
        if why is not None:
            raise AttemptRefused(decide.not_ended(step.attempt, why))
    return claim_next(run, writer, token, step.attempt, timing=timing, caps=caps, mode=mode)


def join_restart(
    run: RunDir, writer: Writer, token: str, rank: int, *, adopt: bool, timing: Timing, caps: Caps | None = None
) -> int:
    """Enter the run as rank `rank` of launch `token`; sets run.attempt. `adopt`: ``--resume`` too."""
    while True:
        claimed = run.claimed_attempts()
        current = claimed[-1] if claimed else None
        fresh = not claimed and not files.used(run)
        owner = files.claim_token(run, current) if current is not None else None
        step = decide.restart_entry(fresh, current, owner, token, adopt)
        if step.verb is Verb.LOOK and step.attempt is not None:
            step = decide.restart_look(files.look(run, step.attempt, rank, claimed, timing), rank)
        if step.verb is Verb.CLAIM:
            return claim_next(run, writer, token, step.attempt, timing=timing, caps=caps, mode=RESTART)
        if step.verb is Verb.ADOPT:
            return join(run, writer, token, timing=timing, caps=caps, mode=RESTART)
        if step.verb is Verb.JOIN and step.attempt is not None:
            return step.attempt
        if step.verb is Verb.REFUSE or (step.verb is Verb.WAIT and time.monotonic() >= timing.deadline):
            raise AttemptRefused(step.reason)
        if step.verb is Verb.WAIT:
            time.sleep(timing.poll)


def claim_next(
    run: RunDir, writer: Writer, token: str, previous: int | None, *, timing: Timing, caps: Caps | None, mode: str
) -> int:
    """Claim attempt previous + 1 (1 for a fresh run directory) for launch `token`, or join it when
    another replica of that launch won the claim; `previous` must have ended."""
    target = 1 if previous is None else previous + 1
    state = files.checkpoint_state(run)
    last_cause = files.cause_signature(run, previous) if previous is not None else None
    why = _cap_refusal(run, target, caps, state, last_cause) if caps is not None else None
    run.ensure_dir(names.attempt_dir(target))
    if why is not None:
        files.record_refusal(run, writer, target, token, previous, why)
        raise AttemptRefused(decide.refused(target, why))
    run.attempt = target
    if not files.create_claim(
        run,
        writer,
        target,
        records.claim_fields(token=token, previous=previous, mode=mode, checkpoints=state, previous_cause=last_cause),
    ):
        owner = files.claim_token(run, target)
        if owner == token:
            return files.wait_ready(run, target, timing)
        run.attempt = previous or 1
        raise AttemptRefused(decide.taken(target, owner))
    archived = files.archive(run, previous) if previous is not None else []
    ready = records.attempt_fields(state="ready", token=token, previous=previous, archived=archived)
    run.write_artifact(names.attempt_ready(target), writer, ready)
    return target


def _cap_refusal(run: RunDir, target: int, caps: Caps, state: dict[str, Any], last_cause: str | None) -> str | None:
    """The restart caps' verdict on attempt `target`; the claims are read only when it needs them."""
    why = decide.over_retries(caps, target)
    if why is None and decide.watches_progress(caps, target):
        why = decide.no_progress(caps, target, files.claims(run, target - 1), state, last_cause)
    return why
