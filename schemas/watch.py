"""Waiting for a run directory to change, for the followers a person runs: `gym-audit logs
--follow` and `gym-launch status --watch`. Never imported by the agent, which waits on its own
inotify descriptor (agent/coord/_dirwatch.py): watchdog's threads were measured too costly there.

watchdog's inotify observer wakes the follower on a change it cares about (`wanted`, a test on
the path relative to the run directory), so a new line is printed as it lands and nothing runs
while nothing changes. The poll stays, as the follower's only clock where events are missing or
incomplete:
- watchdog not installed, or inotify refused (no instance or watch left): every `poll` seconds;
- a network filesystem (NFS, Lustre, GPFS, CIFS, FUSE, ...): inotify reports only this host's
  own writes, so an agent's write on another node is found by the poll alone, every `poll`
  seconds, beside the events;
- a local filesystem: every `quiet` seconds, a safety net for an event the kernel dropped (a
  full inotify queue).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

__all__ = ["LOCAL_FILESYSTEMS", "QUIET_POLL", "RunDirWatch", "SETTLE", "filesystem_type"]

QUIET_POLL = 10.0
SETTLE = 0.02  # a burst of writes (a traceback, many lines) becomes one wake-up
# Filesystems on which every write is made by this host's kernel, so inotify sees all of them.
LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs", "bcachefs", "jfs", "reiserfs"}
)


def filesystem_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the filesystem `path` is on (the longest mount point above it), or None."""
    try:
        with open(mountinfo) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, right.split()[0]
    return kind


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in a mount point as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


class RunDirWatch:
    """Wakes `wait()` when a wanted path under `root` changes, or when the poll is due."""

    def __init__(self, root: str, wanted: Callable[[str], bool], poll: float, quiet: float = QUIET_POLL) -> None:
        self.root = root
        self.wanted = wanted
        self.poll = poll
        self.quiet = max(poll, quiet)
        self.local = filesystem_type(root) in LOCAL_FILESYSTEMS
        self._flag = threading.Event()
        self._observer: Any = None
        self._handler: Any = None
        self._watched: set[str] = set()
        self._filter: list[Any] = []
        self._pending: list[str] = []  # subdirectories to watch once they exist

    @classmethod
    def start(
        cls,
        root: str | os.PathLike[str],
        wanted: Callable[[str], bool],
        poll: float,
        *,
        modified: bool = True,
        quiet: float = QUIET_POLL,
        subdirs: tuple[str, ...] = (),
    ) -> RunDirWatch:
        """Watch `root` and `subdirs` (each non-recursively; more with add()). `modified`: wake
        on writes into a file (appended log lines), not only on files created or renamed into
        place. `quiet`: the poll beside working events on a local filesystem."""
        watch = cls(os.fspath(root), wanted, poll, quiet)
        watch._open(modified)
        watch._pending = list(subdirs)
        return watch

    @property
    def events(self) -> bool:
        return self._observer is not None

    @property
    def interval(self) -> float:
        """How long wait() sleeps without an event: the safety net only where events see everything."""
        return self.quiet if self.events and self.local else self.poll

    def _open(self, modified: bool) -> None:
        try:
            from watchdog.events import (
                DirCreatedEvent,
                FileCreatedEvent,
                FileModifiedEvent,
                FileMovedEvent,
                FileSystemEvent,
                FileSystemEventHandler,
            )
            from watchdog.observers.inotify import InotifyObserver
        except Exception:  # noqa: BLE001 - not installed, or no inotify in this libc/kernel: the poll alone
            return
        flag, root, wanted = self._flag, self.root, self.wanted

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                for path in (event.src_path, getattr(event, "dest_path", "")):
                    if path and wanted(os.path.relpath(os.fsdecode(path), root)):
                        flag.set()
                        return

        # Only the kinds asked for reach this process at all (the inotify mask): a record's
        # rename is a move, a log line a modification; opening a file to read it is neither.
        self._filter = [FileCreatedEvent, FileMovedEvent, DirCreatedEvent] + ([FileModifiedEvent] if modified else [])
        self._handler = Handler()
        observer = InotifyObserver()
        try:
            observer.schedule(self._handler, root, recursive=False, event_filter=self._filter)
            observer.start()
        except OSError:
            observer.stop()
            return  # inotify refused (limits): the poll alone
        self._observer = observer
        self._watched.add(".")

    def add(self, subdir: str) -> None:
        """Watch one more directory under the root (a subdirectory that holds wanted files).
        One that does not exist yet is tried again at the next call."""
        if self._observer is None or subdir in self._watched:
            return
        try:
            self._observer.schedule(
                self._handler, os.path.join(self.root, subdir), recursive=False, event_filter=self._filter
            )
        except FileNotFoundError:
            return
        except OSError:
            self.local = False  # out of inotify watches: this directory is seen by the poll alone
            self._watched.add(subdir)
            return
        self._watched.add(subdir)

    def wait(self, limit: float | None = None) -> bool:
        """Sleep until a wanted change, the poll, or `limit` seconds; True when woken by a change."""
        for subdir in self._pending:
            self.add(subdir)
        self._pending = [d for d in self._pending if d not in self._watched]
        woke = self._flag.wait(self.interval if limit is None else min(limit, self.interval))
        if woke:
            time.sleep(SETTLE)
            self._flag.clear()  # cleared before the caller reads: a later write wakes it again
        return woke

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2.0)
            self._observer = None

    def __enter__(self) -> RunDirWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
