"""A self-pipe: the way a thread that sleeps on file descriptors is woken from another thread.

The supervisor and the liveness loop block in poll(2) on what they wait for (a child's pidfd,
an inotify descriptor); `set()` from any thread makes the pipe readable, so they wake at once
without a timed poll of a flag.
"""

from __future__ import annotations

import builtins
import os
import select
import threading
from collections.abc import Iterable

__all__ = ["Wakeup"]


class Wakeup:
    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()  # set() never writes to a closed (maybe reused) descriptor
        self._closed = False

    def fileno(self) -> int:
        return self._r

    def set(self) -> None:
        with self._lock:
            if self._closed:
                return  # nobody waits any more
            try:
                os.write(self._w, b"!")
            except (BlockingIOError, OSError):
                pass  # full: a wake is pending anyway

    def clear(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def wait(self, timeout: float | None, fds: Iterable[int] = ()) -> builtins.set[int]:
        """Block until set() or one of `fds` is readable, or `timeout` seconds (None: forever).
        Returns the readable fds among `fds` (a pending wake is consumed)."""
        poller = select.poll()
        poller.register(self._r, select.POLLIN)
        for fd in fds:
            poller.register(fd, select.POLLIN)
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        try:
            ready = poller.poll(ms)
        except InterruptedError:
            ready = []
        out = set()
        for fd, _ in ready:
            if fd == self._r:
                self.clear()
            else:
                out.add(fd)
        return out

    def close(self) -> None:
        """Only the waiting thread closes, when it waits no more."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._r, self._w):
                try:
                    os.close(fd)
                except OSError:
                    pass
