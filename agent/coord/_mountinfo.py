"""Which mount holds a path, from the kernel's own table (/proc/self/mountinfo, proc(5)). Pure
parsing plus one read: the filesystem guard (fs_guard.py) decides what the mount means.

A line is `ID PARENT MAJ:MIN ROOT MOUNT_POINT MOUNT_OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTS`.
Paths are octal-escaped by the kernel (a space is \\040). The mount that serves a path is the
reachable one with the longest mount point containing it: a mount covered by a later mount on the
same point (or whose parent is covered) serves nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MAX_BYTES", "MOUNTINFO", "Mount", "mount_of", "parse", "parse_line", "read", "resolve", "unescape"]

MOUNTINFO = "/proc/self/mountinfo"
MAX_BYTES = 16 << 20  # a container host can list tens of thousands of mounts; more is not a table
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    mount_id: int
    parent_id: int
    root: str  # the directory of the filesystem mounted here (not "/" for a bind mount of a subdirectory)
    mount_point: str
    mount_options: tuple[str, ...]  # per mount point: rw, nosuid, relatime...
    fstype: str  # "nfs4", "ext4", "fuse.s3fs"...
    source: str
    super_options: tuple[str, ...]  # the filesystem's own: vers=4.2, acdirmax=..., lookupcache=...

    @property
    def options(self) -> tuple[str, ...]:
        """Both option lists, per-mount first, each option once."""
        return tuple(dict.fromkeys((*self.mount_options, *self.super_options)))


def unescape(field: str) -> str:
    """The kernel's octal escapes (space, tab, newline, backslash) back to characters."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _options(field: str) -> tuple[str, ...]:
    return tuple(unescape(o) for o in field.split(",") if o)


def parse_line(line: str) -> Mount | None:
    """One mountinfo line, or None when it is not one (never raises)."""
    fields = line.split()
    try:
        sep = fields.index("-", 6)
        mount_id, parent_id = int(fields[0]), int(fields[1])
    except (ValueError, IndexError):
        return None
    tail = fields[sep + 1 :]
    if len(tail) < 2:
        return None
    return Mount(
        mount_id=mount_id,
        parent_id=parent_id,
        root=unescape(fields[3]),
        mount_point=unescape(fields[4]),
        mount_options=_options(fields[5]),
        fstype=tail[0],
        source=unescape(tail[1]),
        super_options=_options(tail[2]) if len(tail) > 2 else (),
    )


def parse(text: str) -> tuple[Mount, ...]:
    return tuple(m for line in text.splitlines() if (m := parse_line(line)) is not None)


def read(path: str = MOUNTINFO) -> tuple[Mount, ...]:
    with open(path, "rb") as f:
        return parse(f.read(MAX_BYTES).decode("utf-8", errors="surrogateescape"))


def _contains(mount_point: str, path: str) -> bool:
    if mount_point == "/":
        return path.startswith("/")
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, mounts: Iterable[Mount]) -> Mount | None:
    """The mount that serves an absolute, symlink-free `path`: the longest reachable mount point
    containing it. Only mounts containing the path can hide one another on its way, so the
    checks below look at those alone (a container host may list thousands of mounts)."""
    table = tuple(mounts)
    by_id = {m.mount_id: m for m in table}
    line = {id(m): i for i, m in enumerate(table)}
    cands = [m for m in table if _contains(m.mount_point, path)]

    def hidden(c: Mount) -> bool:
        # A sibling mounted at or above c's point after it hides it (its parent's view is replaced).
        return any(
            d is not c
            and d.parent_id == c.parent_id
            and _contains(d.mount_point, c.mount_point)
            and (d.mount_point != c.mount_point or line[id(d)] > line[id(c)])
            for d in cands
        )

    def reachable(m: Mount) -> bool:
        seen: set[int] = set()
        node: Mount | None = m
        while node is not None:
            if node.mount_id in seen:  # a malformed table may loop
                return False
            seen.add(node.mount_id)
            if hidden(node):
                return False
            node = by_id.get(node.parent_id) if node.parent_id != node.mount_id else None
        return True

    # Mounting on an existing mount point stacks the new mount on the old one (its parent).
    covered = {
        c.parent_id
        for c in cands
        if (p := by_id.get(c.parent_id)) is not None and p is not c and p.mount_point == c.mount_point
    }
    best: Mount | None = None
    for m in cands:
        if m.mount_id in covered or not reachable(m):
            continue
        if best is None or len(m.mount_point) >= len(best.mount_point):
            best = m
    return best


def resolve(path: str) -> str:
    """`path` with symlinks resolved as far as it exists: the run directory may not exist yet,
    and what it will be created on is its nearest existing ancestor's mount."""
    absolute = os.path.abspath(path)
    head, rest = absolute, ""
    while not os.path.exists(head):
        parent, leaf = os.path.split(head)
        if parent == head:
            break
        head, rest = parent, os.path.join(leaf, rest) if rest else leaf
    real = os.path.realpath(head)
    return os.path.join(real, rest) if rest else real
