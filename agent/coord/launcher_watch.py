"""Notice the death of the launcher that started this agent (`gym-launch local`).

The launcher holds the write end of a pipe and hands each agent the read end (`--launcher-fd`).
Nothing is ever written: when the launcher dies in any way (SIGKILL included), the kernel closes
its end and the read returns EOF. PR_SET_PDEATHSIG would not do: it fires on the death of the
parent *thread*, and not at all across the launcher's exec of the local runner.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from agent.ground.failure import Failure, FailureSignal
from schemas import FailureKind

__all__ = ["watch_launcher"]


def watch_launcher(fd: int, signal: FailureSignal, phase: Callable[[], str]) -> threading.Thread:
    """Trip `signal` when the launcher's end of the pipe closes; returns the (daemon) watcher."""
    parent = os.getppid()

    def wait_for_eof() -> None:
        try:
            while os.read(fd, 64):
                pass  # the launcher never writes; ignore anything that arrives
        except OSError:
            pass
        signal.trip(
            Failure(
                kind=FailureKind.SIGNAL,
                cause=f"the launcher (pid {parent}) that started this agent is gone (killed or hung up); "
                "stopping so that nothing of the run is left running",
                phase=phase(),
            )
        )

    t = threading.Thread(target=wait_for_eof, name="launcher-watch", daemon=True)
    t.start()
    return t
