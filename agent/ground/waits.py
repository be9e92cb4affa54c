"""The one polling loop of the agent: wait for a condition, a deadline, or a failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.ground import clock
from agent.ground.failure import FailureSignal

__all__ = ["Progress", "poll_until"]


@dataclass(frozen=True)
class Progress:
    """What a long wait says while it waits: `describe(remaining_s)` printed through `report`
    every `every` seconds (the first after `every`: a short wait stays silent)."""

    describe: Callable[[float], str]
    report: Callable[[str], None]
    every: float


def poll_until(
    predicate: Callable[[], bool],
    *,
    deadline: float,
    interval: float | Callable[[], float],
    signal: FailureSignal | None = None,
    now: Callable[[], float] = clock.mono,
    progress: Progress | None = None,
    wake: threading.Event | None = None,
) -> bool:
    """Poll `predicate` every `interval` seconds until it is true (True) or `deadline` (on the
    `now` clock) has passed (False). Raises AgentFailed at once when `signal` trips, including
    while sleeping: a wait never delays reacting to a failure. With `wake`, the sleep ends early
    when it is set (a doorbell notice; whoever sets it also sets it on a failure)."""
    next_report = now() + progress.every if progress is not None else float("inf")
    while True:
        if signal is not None:
            signal.raise_if_set()
        if predicate():
            return True
        t = now()
        remaining = deadline - t
        if remaining <= 0:
            return False
        if progress is not None and t >= next_report:
            next_report = t + progress.every
            try:
                progress.report(progress.describe(remaining))
            except Exception:  # noqa: BLE001 - a progress line must never fail the wait
                pass
        pause = min(interval() if callable(interval) else interval, remaining)
        if wake is not None:
            if wake.wait(pause):
                wake.clear()
        elif signal is not None:
            signal.wait(pause)
        else:
            time.sleep(pause)
