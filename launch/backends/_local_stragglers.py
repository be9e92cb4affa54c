"""`gym-launch local`: an agent still running long after another one ended is ended by the launcher.

Once one agent has exited, every other one hears of it (its failure record within a poll, its
doorbell at once) and stops within its stack dump, checkpoint grace and teardown grace. One that
has not ended by then cannot act: a frozen node (its agent and children SIGSTOPped, a host stalled
in the kernel) would keep `gym-launch local` waiting for as long as it stays frozen. The launcher
ends that agent and every process below it, by process group and pid (SIGKILL: a stopped process
acts on no other signal), never by name, and says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

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
    procs: Sequence[subprocess.Popen[str]], bound: float, out: Callable[[str], None], now: Callable[[], float]
) -> list[int]:
    """Every agent's exit code; the ones still running `bound` seconds after the first exit are
    ended (their rank is their index)."""
    first_exit: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return [int(c) for c in codes if c is not None]
        if first_exit is None and any(c is not None for c in codes):
            first_exit = now()
        if first_exit is not None and now() - first_exit > bound:
            for rank, p in enumerate(procs):
                if p.poll() is None:
                    out(end_rank(rank, p.pid, bound))
            return [p.wait() for p in procs]
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
    psutil.wait_procs(procs, timeout=5)
    return (
        f"gym-launch: rank {rank}'s agent (pid {pid}, {state}) had not ended {bound:.0f} s after the first agent "
        f"did (poll_interval + stack_dump_timeout + checkpoint_grace + teardown_grace + {MARGIN_S:.0f} s): "
        f"ended it and its {len(procs) - 1} process(es) below it (SIGKILL, by process group and pid)"
    )
