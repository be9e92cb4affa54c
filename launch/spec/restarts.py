"""The run's restart caps, one for every backend: ``[launch] max_retries`` (``[launch.beaker]
max_retries`` is its Beaker spelling) and ``max_no_progress_attempts``. Enforced by the agents
from the run's own attempts (agent/coord/attempts/_decide.py); the Beaker job also carries
max_retries as Beaker's own retry.allowedTaskRetries, so Beaker stops retrying too."""

from __future__ import annotations

from launch.spec.config import RunConfig
from launch.spec.errors import Problem

__all__ = ["max_retries", "restart_problems"]


def max_retries(config: RunConfig) -> int | None:
    """Restarts allowed after the first attempt; None: no cap."""
    launch = config.launch
    value = launch.max_retries if launch.max_retries is not None else launch.beaker.max_retries
    return None if value is None or value < 0 else value


def restart_problems(config: RunConfig) -> list[Problem]:
    launch = config.launch
    both = (launch.max_retries, launch.beaker.max_retries)
    if None not in both and both[0] != both[1]:
        return [
            Problem(
                "launch.beaker.max_retries",
                f"is {both[1]} but launch.max_retries is {both[0]}: they are one cap; keep launch.max_retries",
            )
        ]
    return []
