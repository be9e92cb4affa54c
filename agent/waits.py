"""The one polling loop of the agent: wait for a condition, a deadline, or a failure."""

from __future__ import annotations

import time
from collections.abc import Callable

from . import clock
from .failure import FailureSignal


def poll_until(
    predicate: Callable[[], bool],
    *,
    deadline: float,
    interval: float,
    signal: FailureSignal | None = None,
    now: Callable[[], float] = clock.mono,
) -> bool:
    """Poll `predicate` every `interval` seconds until it is true (True) or `deadline` (on the
    `now` clock) has passed (False). Raises AgentFailed at once when `signal` trips, including
    while sleeping: a wait never delays reacting to a failure."""
    while True:
        if signal is not None:
            signal.raise_if_set()
        if predicate():
            return True
        remaining = deadline - now()
        if remaining <= 0:
            return False
        pause = min(interval, remaining)
        if signal is not None:
            signal.wait(pause)
        else:
            time.sleep(pause)
