"""Port blocks chosen on this host and not yet bound: one lock file per block, held by its chooser.

A port is checked free by the agent and bound later by a child: Ray seconds later, SGLang
minutes later. In between it looks free to every other chooser on the host, so two agents (two
runs sharing a node, whose hashed blocks collide) would pick the same block and one child would
lose the race. What needs a lock on one node is that window, from the check to the bind: the
chooser takes the block's lock file (without waiting) before it checks the ports, and keeps it
until it chooses again for the same purpose (a retried start) or ends. The kernel drops an ended
process's locks, so there is nothing stale to clean and nothing to release on any exit path.

The lock files live in the agent's node-local temp root (tempdirs.root()), in a directory of
this user's (/tmp is sticky: one user cannot open another's file there), never in the shared
run directory: ports belong to one host, and flock on NFS is unreliable. Choosers of other
users, with another GYM_AGENT_TMP, or outside gym-agent are not seen; for them the child's early
exit and its caller's retry remain the guard, as they are whenever the directory is unusable.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from agent.proc import tempdirs

if TYPE_CHECKING:
    from filelock import FileLock

# The grid every reservation is a block of (Ray's blocks and the judges' ports alike).
PORT_FLOOR, PORT_BLOCK = 10000, 50
DIR_PREFIX = "gym-ports-"

_held: dict[str, tuple[int, FileLock]] = {}  # purpose -> (block base, its held lock)
_guard = threading.Lock()


def block_of(port: int) -> int:
    """The base of the grid block that holds `port`."""
    return port - (port - PORT_FLOOR) % PORT_BLOCK


def lock_dir() -> str | None:
    """This user's lock directory under the node-local temp root, or None if it cannot be used."""
    path = os.path.join(tempdirs.root(), f"{DIR_PREFIX}{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    # Someone else's directory (or a symlink) under a shared /tmp is not ours to lock in.
    return path if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() else None


def hold_block(purpose: str, bases: Iterable[int], usable: Callable[[int], bool]) -> int | None:
    """The first of `bases` whose block no other process holds and `usable` accepts, now held by
    this process for `purpose` (what it held for that purpose before is released first, so a
    re-choice may find the same block). None if every candidate was held or unusable. Without a
    usable lock directory, the first usable candidate, unheld (the behaviour before locks)."""
    from filelock import FileLock, Timeout  # loaded by the nodes that choose ports only

    with _guard:
        _release(purpose)
        where = lock_dir()
        for base in bases:
            if where is None:
                if usable(base):
                    return base
                continue
            lock = FileLock(os.path.join(where, f"{base}.lock"), thread_local=False)
            try:
                lock.acquire(blocking=False)
            except Timeout:
                continue  # another chooser on this host holds it, bound or about to bind
            except OSError:
                where = None  # the directory stopped working: choose as before locks
                if usable(base):
                    return base
                continue
            if usable(base):
                _held[purpose] = (base, lock)
                return base
            lock.release()
        return None


def release(purpose: str) -> None:
    """Let other choosers have the block held for `purpose` (ending the process does the same)."""
    with _guard:
        _release(purpose)


def _release(purpose: str) -> None:
    old = _held.pop(purpose, None)
    if old is not None:
        old[1].release()
