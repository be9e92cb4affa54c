"""SIGTERM/SIGINT with who sent them (the kernel's ``si_pid``), for the failure record.

Under a scheduler that propagates a failure by signalling every task (Slurm's
``--kill-on-bad-exit``, Beaker), the healthy ranks' signal records arrive before the failed
rank's own record; naming the sender (``slurmstepd``, a user's ``kill``) is what tells the
reaction from a cause. Python's signal handlers do not see ``siginfo``, so the agent blocks the
two signals in every thread and one thread takes them with ``sigwaitinfo``.

Children must not inherit the blocked mask (Ray, the driver and judges are stopped with SIGTERM):
every spawn goes through ``unblocked()``, which unblocks them in the spawning thread for the
fork. A signal that lands in that short window goes to the ordinary Python handler installed as
a fallback, which records it without a sender.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Received", "WATCHED", "block", "start", "unblocked"]

WATCHED = frozenset({signal.SIGTERM, signal.SIGINT})
_active = threading.Event()  # the mask is in force (set once start() ran)


@dataclass(frozen=True)
class Received:
    signum: int
    sender_pid: int | None  # None: delivered to the fallback handler, sender unknown
    sender_uid: int | None
    sender_name: str | None  # /proc/PID/comm at receipt (gone: None)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    def sender(self) -> dict[str, Any] | None:
        if self.sender_pid is None:
            return None
        return {"pid": self.sender_pid, "uid": self.sender_uid, "name": self.sender_name}

    def facts(self) -> dict[str, Any]:
        """The failure record's fields for this signal: its name and, when known, its sender."""
        return {"signal": self.name, "sender": self.sender()}

    def describe(self) -> str:
        if self.sender_pid is None:
            return f"received {self.name}"
        if self.sender_pid == 0:
            return f"received {self.name} from the kernel"
        who = f" ({self.sender_name})" if self.sender_name else ""
        return f"received {self.name} from pid {self.sender_pid}{who}"


def _comm(pid: int) -> str | None:
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def block() -> None:
    """Block the watched signals in this (main) thread now, before any other thread exists: every
    thread inherits the mask, so a signal stays pending until `start`'s thread takes it with its
    sender. (A thread started before the mask would take it through the fallback, unnamed.)"""
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)


def start(on_signal: Callable[[Received], None]) -> None:
    """Install the fallback handlers, block the signals and start the waiting thread. Call it
    from the main thread before any other thread exists, so every later thread inherits the mask."""

    def fallback(signum: int, _frame: object) -> None:
        on_signal(Received(signum, None, None, None))

    for sig in WATCHED:
        signal.signal(sig, fallback)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _active.set()

    def wait_forever() -> None:
        while True:
            info = signal.sigwaitinfo(WATCHED)
            on_signal(Received(info.si_signo, info.si_pid, info.si_uid, _comm(info.si_pid)))

    threading.Thread(target=wait_forever, name="signals", daemon=True).start()


@contextlib.contextmanager
def unblocked() -> Iterator[None]:
    """Around a spawn: the child starts with SIGTERM/SIGINT deliverable."""
    if not _active.is_set():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
