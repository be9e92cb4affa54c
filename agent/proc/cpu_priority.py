"""Yielding the CPU once what peers wait for is written.

In a failure wave every agent on a host wakes at once; each one's failure record is what the
others and the audit need, its teardown is not urgent. After its record is published an agent
lowers the priority of its own threads (and of its reaper), so that on a shared host the agents
still writing their records run first. On Linux the nice value is per thread.
"""

from __future__ import annotations

import os

__all__ = ["TEARDOWN_NICE", "lower_priority"]

TEARDOWN_NICE = 10  # CFS weight 110 against 1024 for a nice-0 thread


def lower_priority(pids: tuple[int, ...] = (), nice: int = TEARDOWN_NICE) -> None:
    """Set every thread of this process, and each of `pids` (their main threads), to `nice`.
    Best effort: a thread that ended or a refusal changes nothing else."""
    targets = list(pids)
    try:
        targets += [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        targets.append(0)
    for tid in targets:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:
            continue
