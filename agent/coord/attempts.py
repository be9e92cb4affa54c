"""Resume: join (or start) one attempt of a run in its run directory (DESIGN §10).

The attempt number is claimed by creating attempts/N/claim.json exclusively (link(2): atomic on
NFSv3+ too). Replicas of one launch carry the same token and join the same attempt; a launch with
another token that finds the number taken is refused before it writes anything. The claimant moves
the previous attempt's files into attempts/N-1/ and then writes attempts/N/ready.json; joiners wait
for it, so no replica of attempt N ever lists a file of attempt N-1. Records of another attempt
that appear later (a straggler, something planted) are ignored by RunDir.read_json.

Two modes (schemas.vocab.ResumeEnv): ``--resume`` (GYM_RESUME=1) joins the attempt of its own
token or starts the next one; ``GYM_RESUME=restart`` is a launch whose scheduler restarts it under
the same token (agent/coord/restart_join.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.coord.restart_caps import Caps, cause_signature, checkpoint_state, refusal
from agent.ground.waits import poll_until
from launch.spec.errors import GymError, UsageError
from schemas import RunDir, Writer, names
from schemas.vocab import ResumeEnv


class AttemptRefused(GymError):
    """This process must not join: another launch holds the attempt, or the previous one still runs."""


def attempt_token(env: Mapping[str, str]) -> str:
    """Which launch this replica belongs to: equal tokens join one attempt."""
    if env.get(ResumeEnv.TOKEN):
        return env[ResumeEnv.TOKEN]
    # Before Slurm's: a SkyPilot task on Slurm runs inside a Slurm job, and every recovery of a managed
    # job is a new Slurm job under the one task id the controller keeps.
    if env.get("SKYPILOT_TASK_ID"):
        return f"skypilot-{env['SKYPILOT_TASK_ID']}"
    if env.get("SLURM_JOB_ID"):  # a requeued job keeps its id and counts restarts
        return f"slurm-{env['SLURM_JOB_ID']}-{env.get('SLURM_RESTART_COUNT', '0')}"
    # Not BEAKER_JOB_ID: each replica, and each retry of it, is its own job. The workload (the
    # experiment) is one for every replica of the task and for all of Beaker's retries of it.
    beaker = env.get("BEAKER_WORKLOAD_ID") or env.get("BEAKER_EXPERIMENT_ID")
    if beaker:
        return f"beaker-{beaker}"
    return "manual"


@dataclass(frozen=True)
class ResumeMode:
    resume: bool  # --resume / GYM_RESUME=1: continue this run directory, whoever started it
    restart: bool  # GYM_RESUME=restart: the scheduler restarts this launch under one token

    @property
    def joins(self) -> bool:
        return self.resume or self.restart


RESUME_VALUES = ("1", "true", "yes")
PLAIN_VALUES = ("", "0", "false", "no")


def resume_mode(flag: bool, env: Mapping[str, str]) -> ResumeMode:
    """How this replica enters the run: from ``--resume`` and $GYM_RESUME (UsageError if unknown)."""
    value = env.get(ResumeEnv.RESUME, "").strip().lower()
    if value not in (*RESUME_VALUES, *PLAIN_VALUES, ResumeEnv.RESTART):
        raise UsageError(
            f"${ResumeEnv.RESUME} is {value!r}: use 1 (--resume), {ResumeEnv.RESTART} (a scheduler restart of "
            "this launch continues by itself) or leave it unset"
        )
    return ResumeMode(resume=flag or value in RESUME_VALUES, restart=value == ResumeEnv.RESTART)


def used(run: RunDir) -> bool:
    return bool(run.listdir(names.ADDRESSES_DIR)) or bool(run.claimed_attempts())


def ended(run: RunDir, attempt: int, heartbeat_timeout: float, startup_timeout: float) -> str | None:
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
        claim = run.read_json(names.attempt_claim(attempt))
        if claim is not None and now - float(claim.get("written_at", 0)) < startup_timeout:
            # Its agents may not have written a heartbeat yet: started is running until proven silent.
            return f"it was claimed {now - float(claim['written_at']):.0f}s ago and has no outcome yet"
        for name in run.listdir(names.HEARTBEATS_DIR):
            rank = names.rank_in(names.HEARTBEATS_DIR, name)
            doc = run.read_json(names.heartbeat(rank)) if rank is not None else None
            if doc is not None and now - float(doc.get("written_at", 0)) < heartbeat_timeout:
                return f"rank {rank} wrote a heartbeat {now - float(doc['written_at']):.0f}s ago"
        return None
    finally:
        run.attempt = saved


def _archive(run: RunDir, previous: int) -> list[str]:
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


def _fields(state: str, token: str, previous: int | None, archived: list[str]) -> dict[str, Any]:
    return {"state": state, "token": token, "previous": previous, "archived": archived}


def join(
    run: RunDir,
    writer: Writer,
    token: str,
    *,
    heartbeat_timeout: float,
    startup_timeout: float,
    deadline: float,
    poll: float,
    caps: Caps | None = None,
    mode: str = "resume",
    log: Callable[[str], None] = lambda _line: None,
) -> int:
    """Join the attempt of launch `token` (claiming a new one when needed); sets run.attempt.
    A new attempt past the restart caps is refused (AttemptRefused) with attempts/N/refused.json."""
    claimed = run.claimed_attempts()
    current = names.current_attempt(claimed) if claimed else None
    if current is not None:
        doc = run.read_json(names.attempt_claim(current)) or {}
        if doc.get("token") == token:
            return wait_ready(run, current, deadline, poll)
    previous: int | None = None
    if current is not None or used(run):
        previous = current or 1
        why = ended(run, previous, heartbeat_timeout, startup_timeout)
        if why is not None:
            raise AttemptRefused(
                f"attempt {previous} of this run has not ended ({why}); stop it before resuming. "
                "This process wrote nothing"
            )
    return claim_next(run, writer, token, previous, deadline=deadline, poll=poll, caps=caps, mode=mode, log=log)


def claim_next(
    run: RunDir,
    writer: Writer,
    token: str,
    previous: int | None,
    *,
    deadline: float,
    poll: float,
    caps: Caps | None,
    mode: str,
    log: Callable[[str], None],
) -> int:
    """Claim attempt previous + 1 (1 for a fresh run directory) for launch `token`, or join it when
    another replica of that launch won the claim; `previous` must have ended."""
    target = 1 if previous is None else previous + 1
    state = checkpoint_state(run)
    last_cause = cause_signature(run, previous) if previous is not None else None
    why = refusal(run, target, caps, state, last_cause) if caps is not None else None
    run.ensure_dir(names.attempt_dir(target))
    if why is not None:
        _record_refusal(run, writer, target, token, previous, why)
        raise AttemptRefused(f"attempt {target} refused: {why}. This process started nothing")
    run.attempt = target
    claim_fields = {
        **_fields("claimed", token, previous, []),
        "mode": mode,
        "checkpoints": state,
        "previous_cause": last_cause,
    }
    try:
        run.create_artifact(names.attempt_claim(target), writer, claim_fields)
    except FileExistsError:
        doc = run.read_json(names.attempt_claim(target)) or {}
        if doc.get("token") == token:
            return wait_ready(run, target, deadline, poll)
        run.attempt = previous or 1
        raise AttemptRefused(
            f"attempt {target} of this run was already started by another launch (token {doc.get('token')!r}, "
            f"pid-independent claim {names.attempt_claim(target)}); this process did not join and wrote nothing"
        ) from None
    archived = _archive(run, previous) if previous is not None else []
    run.write_artifact(names.attempt_ready(target), writer, _fields("ready", token, previous, archived))
    log(
        f"attempt {target} claimed"
        + (f"; attempt {previous}'s files moved to {names.attempt_dir(previous)}/" if previous else "")
    )
    return target


def _record_refusal(run: RunDir, writer: Writer, target: int, token: str, previous: int | None, why: str) -> None:
    """Every replica of the refused attempt decides alike; the first one's record stays."""
    saved, run.attempt = run.attempt, target
    try:
        run.create_artifact(
            names.attempt_refused(target), writer, {**_fields("refused", token, previous, []), "reason": why}
        )
    except FileExistsError:
        pass
    finally:
        run.attempt = saved


def wait_ready(run: RunDir, attempt: int, deadline: float, poll: float) -> int:
    """A joiner of the claimant's attempt waits until the old files are out of the way."""
    run.attempt = attempt
    if not poll_until(
        lambda: names.READY_LEAF in run.listdir(names.attempt_dir(attempt)), deadline=deadline, interval=poll
    ):
        raise AttemptRefused(
            f"attempt {attempt}: its claimant never finished moving the previous attempt's files "
            f"({names.attempt_ready(attempt)} missing); this process wrote nothing"
        )
    return attempt
