"""Host-wide start slots: how many Ray nodes start at once on one host.

Ray gives a node's raylet a fixed 30 s to register with the GCS and the node exits when it misses
it (`ray._private.node.Node`). The raylet registers only once its dashboard agent is up, and a
node's start is several CPU seconds of Python imports in four processes (`ray start`, the
dashboard and runtime-env agents, the log monitor). Several nodes starting at once on one small
host share its cores, and then each misses the window, attempt after attempt (measured on 2
cores: one worker beside 8 busy loops registered 11 s after its raylet spawned; six nodes of two
runs at once, beside other work, missed it three times in a row). So the nodes on one host start a
few at a time: one per 4 cores, at least one. A node holds its slot from `ray start` until it is
registered (or its start ended), seconds on an idle host.

The slots are lock files in a directory of this user's in the host's temp dir (never in
GYM_AGENT_TMP, which a test gives each run: the cores are the host's, whatever run a node
belongs to). The kernel drops an ended process's locks, so a killed agent frees its slot at once;
the lock's descriptor is not inherited by the children started while it is held. Without a usable
directory, or past the caller's deadline, a node starts ungated, as before the slots.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.ground import clock
from agent.proc import tempdirs

if TYPE_CHECKING:
    from filelock import FileLock

__all__ = ["CORES_PER_SLOT", "DIR_PREFIX", "Slot", "acquire", "host_slots"]

DIR_PREFIX = "gym-start-"
CORES_PER_SLOT = 4
POLL_S = 0.2


def host_slots() -> int:
    """One slot per CORES_PER_SLOT of the cores this process may run on, at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores // CORES_PER_SLOT)


@dataclass(frozen=True)
class Slot:
    """A held start slot (`lock` None: the start went ungated, and `why` says why)."""

    lock: FileLock | None
    waited: float
    why: str = ""

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def acquire(
    kind: str,
    *,
    deadline: float,
    wait: Callable[[float], None],
    slots: int | None = None,
    parent: str | None = None,
) -> Slot:
    """One of this host's `slots` slots for starting a `kind` (e.g. "ray"), waiting (in `wait`,
    which may raise to end the wait) until one is free or `deadline` (clock.mono()) passes."""
    from filelock import FileLock, Timeout  # loaded by the nodes that start Ray only

    t0 = clock.mono()
    where = tempdirs.user_dir(parent or tempdirs.host_root(), DIR_PREFIX)
    if where is None:
        return Slot(None, 0.0, "no usable slot directory in the host's temp dir")
    count = slots or host_slots()
    locks = [FileLock(os.path.join(where, f"{kind}-{i}.lock"), thread_local=False) for i in range(count)]
    while True:
        for lock in locks:
            try:
                lock.acquire(blocking=False)
            except Timeout:
                continue
            except OSError as exc:
                return Slot(None, clock.mono() - t0, f"the slot files cannot be locked ({exc})")
            return Slot(lock, clock.mono() - t0)
        left = deadline - clock.mono()
        if left <= 0:
            return Slot(None, clock.mono() - t0, f"all {count} of the host's {kind} start slot(s) stayed busy")
        wait(min(POLL_S, left))
