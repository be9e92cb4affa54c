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

Every chooser (Ray's nodes, the managed judges) walks the same grid the same way (`walk`): blocks
outside the kernel's ephemeral range, from a start hashed from its key, and checks each port its
child will bind with `free` before keeping the block.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from agent.proc import tempdirs
from schemas import port_grid

if TYPE_CHECKING:
    from filelock import FileLock

__all__ = [
    "DEFAULT_EPHEMERAL",
    "DIR_PREFIX",
    "block_of",
    "ephemeral_range",
    "free",
    "hold_block",
    "lock_dir",
    "port_bases",
    "release",
    "walk",
]

# The grid every reservation is a block of (Ray's blocks and the judges' ports alike); a rendered job
# fixes its Ray head's block on the same grid (schemas/port_grid.py).
PORT_FLOOR, PORT_BLOCK, PORT_CEILING = port_grid.PORT_FLOOR, port_grid.PORT_BLOCK, port_grid.PORT_CEILING
DEFAULT_EPHEMERAL = port_grid.DEFAULT_EPHEMERAL
DIR_PREFIX = "gym-ports-"

_held: dict[str, tuple[int, FileLock]] = {}  # purpose -> (block base, its held lock)
_guard = threading.Lock()


def block_of(port: int) -> int:
    """The base of the grid block that holds `port`."""
    return port - (port - PORT_FLOOR) % PORT_BLOCK


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    try:
        with open(path) as f:
            low, high = (int(x) for x in f.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def port_bases(ephemeral: tuple[int, int]) -> list[int]:
    """Block starts outside the kernel's ephemeral range: any outgoing connection (a child's own
    clients, a health probe) may be given an ephemeral port, so a port inside it can be taken
    between our check and the child's bind."""
    return port_grid.port_bases(ephemeral)


def walk(key: str, slot: int, stride: int, ephemeral: tuple[int, int] | None = None) -> Iterator[int]:
    """Every block base once (outside the ephemeral range, or all of them if it covers the grid),
    starting at the one `key` hashes to, offset by `slot` and stepping by `stride`: choosers of
    one key that differ in slot (ranks, attempts) start on different blocks."""
    bases = port_bases(ephemeral or ephemeral_range()) or port_bases((0, 0))
    first = bases.index(port_grid.first_block(key, slot, bases))
    step = stride if 0 < stride < len(bases) else 1
    return (bases[(first + k * step) % len(bases)] for k in range(len(bases)))


def _bindable(family: socket.AddressFamily, host: str, port: int, reuse_addr: bool) -> bool | None:
    """True/False if binding worked/failed; None if the address family is unavailable here."""
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return None
    with s:
        try:
            if reuse_addr:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            return True
        except OSError as exc:
            return None if exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL) else False


def free(port: int, *, reuse_addr: bool = False) -> bool:
    """Nothing holds `port` on any IPv4 or IPv6 address. Ray and torch.distributed's store listen
    on the dual-stack wildcard, and a wildcard bind also fails where any one address holds the
    port, so this is the check for a child binding either way; an IPv4-only check would miss an
    IPv6 holder. With `reuse_addr`, free for a server that sets SO_REUSEADDR (every Ray server
    does): the closed connections an ended server leaves in TIME_WAIT (60 s) do not hold the port
    then, a listening or bound socket still does."""
    for family, host in ((socket.AF_INET, ""), (socket.AF_INET6, "::")):
        if _bindable(family, host, port, reuse_addr) is False:
            return False
    return True


def lock_dir() -> str | None:
    """This user's lock directory under the node-local temp root, or None if it cannot be used."""
    return tempdirs.user_dir(tempdirs.root(), DIR_PREFIX)


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
