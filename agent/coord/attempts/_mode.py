"""How this replica enters a run, from its command line and environment (no I/O): the resume mode
and the launch token that replicas of one launch share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launch.spec.errors import UsageError
from schemas.vocab import ResumeEnv

__all__ = ["RESTART", "RESUME", "ResumeMode", "attempt_token", "resume_mode"]

# A claim records how its attempt was entered (`mode`); the audit's attempt summary shows it.
RESUME = "resume"
RESTART = "restart"

RESUME_VALUES = ("1", "true", "yes")
PLAIN_VALUES = ("", "0", "false", "no")


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


def resume_mode(flag: bool, env: Mapping[str, str]) -> ResumeMode:
    """How this replica enters the run: from ``--resume`` and $GYM_RESUME (UsageError if unknown)."""
    value = env.get(ResumeEnv.RESUME, "").strip().lower()
    if value not in (*RESUME_VALUES, *PLAIN_VALUES, ResumeEnv.RESTART):
        raise UsageError(
            f"${ResumeEnv.RESUME} is {value!r}: use 1 (--resume), {ResumeEnv.RESTART} (a scheduler restart of "
            "this launch continues by itself) or leave it unset"
        )
    return ResumeMode(resume=flag or value in RESUME_VALUES, restart=value == ResumeEnv.RESTART)
