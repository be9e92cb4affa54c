"""Wall and monotonic time for the agent.

Wall time is only ever written into records for humans and the audit; liveness never compares
two hosts' wall clocks. `GYM_TEST_CLOCK_SKEW_S` shifts this agent's wall clock (a test hook
that simulates a skewed host).
"""

from __future__ import annotations

import os
import time

__all__ = ["mono", "skew", "wall"]

_SKEW = float(os.environ.get("GYM_TEST_CLOCK_SKEW_S", "0") or 0)


def skew() -> float:
    return _SKEW


def wall() -> float:
    return time.time() + _SKEW


def mono() -> float:
    return time.monotonic()
