"""The /dev/shm segments an engine's processes map, and their removal once nothing maps them.

vLLM's processes share memory through Python's shared_memory (`psm_*`) and named semaphores
(`sem.*`); they unlink them on a clean stop. An engine killed (a dead EngineCore, a stopped server
the agent had to SIGKILL) leaves them behind, hundreds of MB each, until the next job's preflight
reports them. The agent notes what its engine maps while it runs and, once every process of the
engine has ended, removes what is still there and mapped by nobody: only segments its own engine
had, only regular files (never a link), never by pattern.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

__all__ = ["SHM", "group_segments", "mapped_segments", "release_segments"]

SHM = "/dev/shm"


def _maps(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def mapped_segments(pids: Iterable[int]) -> frozenset[str]:
    """Names of the /dev/shm files the processes ``pids`` map now."""
    prefix = SHM + "/"
    found: set[str] = set()
    for pid in pids:
        for line in _maps(pid):
            fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
            path = fields[5] if len(fields) == 6 else ""
            if path.startswith(prefix) and not path.endswith("(deleted)"):
                name = path[len(prefix) :]
                if name and "/" not in name:
                    found.add(name)
    return frozenset(found)


def group_segments(session: int) -> frozenset[str]:
    """What the live processes of session ``session`` (an engine started by the supervisor) map."""
    from agent.proc.procgroup import session_members

    return mapped_segments(p.pid for p in session_members(session))


def _mapped_by_anyone(names: frozenset[str]) -> set[str]:
    held: set[str] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            held |= mapped_segments([int(entry)]) & names
    return held


def release_segments(names: Iterable[str]) -> list[str]:
    """Unlink each of ``names`` still in /dev/shm that no live process maps; the names removed."""
    wanted = frozenset(names)
    if not wanted:
        return []
    held = _mapped_by_anyone(wanted)
    removed = []
    for name in sorted(wanted - held):
        path = os.path.join(SHM, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            os.unlink(path)
        except OSError:
            continue  # gone meanwhile (its owner unlinked it), or not ours to remove
        removed.append(name)
    return removed
