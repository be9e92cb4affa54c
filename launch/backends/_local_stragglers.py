"""`gym-launch local`: a frozen agent still running long after another one ended is ended by the launcher.

Once one agent has exited, every other one hears of it (its failure record within a poll, its
doorbell at once) and stops within its stack dump, checkpoint grace and teardown grace. One that
has neither ended nor written a heartbeat by then cannot act: a frozen node (its agent and
children SIGSTOPped, a host stalled in the kernel) would keep `gym-launch local` waiting for as
long as it stays frozen. The launcher ends that agent and every process below it, by process group
and pid (SIGKILL: a stopped process acts on no other signal), never by name, and says so. An agent
whose heartbeat still moves is left to its own bounds (a peer that died before its first record
leaves the others waiting for startup_timeout, and they record it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from launch.spec.config import RunConfig

__all__ = ["MARGIN_S", "POLL_S", "end_rank", "straggler_bound", "wait_agents"]

MARGIN_S = 15.0  # beyond the bounds the agents keep themselves (a loaded host)
POLL_S = 0.2


def straggler_bound(config: RunConfig) -> float:
    """How long after the first agent's exit every other one has ended, if it can act at all."""
    c = config.coordination
    grace = config.driver.checkpoint_grace or 0.0
    return c.poll_interval + c.stack_dump_timeout + grace + c.teardown_grace + MARGIN_S


def wait_agents(
    procs: Sequence[subprocess.Popen[str]],
    bound: float,
    out: Callable[[str], None],
    now: Callable[[], float],
    beat: Callable[[int], Any],
) -> list[int]:
    """Every agent's exit code; one still running whose heartbeat (`beat(rank)`: a token that
    changes with each heartbeat) has not changed for `bound` seconds since the first exit is
    ended (its rank is its index)."""
    first_exit: float | None = None
    seen: dict[int, tuple[Any, float]] = {}
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return [int(c) for c in codes if c is not None]
        t = now()
        if first_exit is None and any(c is not None for c in codes):
            first_exit = t
        if first_exit is not None:  # heartbeats read only once the run is ending
            for rank, code in enumerate(codes):
                token = beat(rank) if code is None else None
                if code is None and (rank not in seen or seen[rank][0] != token):
                    seen[rank] = (token, t)
            for rank, p in enumerate(procs):
                if p.poll() is None and t - max(first_exit, seen[rank][1]) > bound:
                    out(end_rank(rank, p.pid, bound))
        time.sleep(POLL_S)


def end_rank(rank: int, pid: int, bound: float) -> str:
    """SIGKILL the agent `pid` and every process below it (each one's own process group first,
    then the process itself); the line that says so."""
    try:
        agent = psutil.Process(pid)
        state = agent.status()
        procs = [agent, *agent.children(recursive=True)]
    except psutil.Error:
        return f"gym-launch: rank {rank}'s agent (pid {pid}) ended as the launcher was about to end it"
    ours = os.getpgrp()
    groups = set()
    for p in procs:
        try:
            groups.add(os.getpgid(p.pid))
        except OSError:
            continue
    for group in sorted(groups - {ours}):
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    for p in procs:  # one in our own group (none is started so), or one that left its group
        try:
            p.kill()
        except psutil.Error:
            pass
    # Not the agent: its Popen reaps it and keeps its exit status (-9).
    psutil.wait_procs(procs[1:], timeout=5)
    return (
        f"gym-launch: rank {rank}'s agent (pid {pid}, {state}) had neither ended nor written a heartbeat for "
        f"{bound:.0f} s after the first agent ended (poll_interval + stack_dump_timeout + checkpoint_grace + "
        f"teardown_grace + {MARGIN_S:.0f} s): ended it and its {len(procs) - 1} process(es) below it (SIGKILL, "
        "by process group and pid)"
    )
