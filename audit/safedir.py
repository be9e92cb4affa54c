"""Safe, read-only access to a run directory that may be broken or hostile.

Why not just `open(path)`: a run directory lives on a shared filesystem that other users
and crashed processes write to. A planted symlink must not make the audit read (or hang on)
something outside the run; a FIFO must not block it; a multi-GB "artifact" must not exhaust
memory. Every read goes through schemas.safe_io (the writers' own safe reader): a directory fd
with O_NOFOLLOW, files opened O_NONBLOCK and checked to be regular before the first read, reads
capped. Nothing here ever writes.

A module of its own, without the artifact loader's parser and findings: `gym-audit logs` reads
a run directory through it, and starts without what it does not use.
"""

from __future__ import annotations

import contextlib
import errno
import operator
import os
from collections.abc import Iterator
from pathlib import Path

from launch.spec.errors import GymError
from schemas import names, safe_io
from schemas.safe_io import MAX_ARTIFACT_BYTES, UnsafeEntry

__all__ = ["MAX_ENTRIES", "SafeDir", "UnsafeFile", "UnusableRunDir"]

MAX_ENTRIES = 100_000  # a run directory holds a few files per rank; more is hostile or broken
_NAME = operator.attrgetter("name")  # a listing's sort key, read in C (8,200 entries at 1,024 ranks)


class UnusableRunDir(GymError):
    """The input cannot be audited at all (exit 2); the message says why and what to pass instead."""


class UnsafeFile(GymError):
    """A run-directory entry the audit refuses to read; `code` is the finding code (exit 2 should
    one ever reach the command instead of becoming a finding)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _reason(exc: UnsafeEntry) -> str:
    """The finding's message: the file is named by the finding itself, except for a directory
    on the way to it."""
    if exc.code == "file.symlink" and exc.relpath.endswith("/"):
        return f"{exc.relpath} {exc.reason}"
    if exc.code == "file.symlink":
        return "is a symlink; the audit does not follow it"
    return exc.reason


class SafeDir:
    """A run directory opened once; relative names are resolved without following symlinks."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if p.is_symlink():
            raise UnusableRunDir(f"{p} is a symlink; pass the real run directory (the audit never follows links)")
        try:
            self._fd = safe_io.open_dir(p)
        except FileNotFoundError:
            raise UnusableRunDir(f"{p} does not exist; pass OUTPUT/cluster/UUID of a run") from None
        except NotADirectoryError:
            raise UnusableRunDir(f"{p} is not a directory; pass OUTPUT/cluster/UUID of a run") from None
        except OSError as exc:
            raise UnusableRunDir(f"cannot open {p}: {exc.strerror}") from None
        self.path = p
        self._dirs: dict[str, int] | None = None  # within cached_dirs(): parent path -> its fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @contextlib.contextmanager
    def cached_dirs(self) -> Iterator[None]:
        """Within it, each subdirectory is opened once for all the reads below it (a thousand
        records in heartbeats/), not once per file. Only for one pass: a directory replaced
        meanwhile (an attempt archived) would still be read through the fd opened first."""
        self._dirs = {}
        try:
            yield
        finally:
            dirs, self._dirs = self._dirs, None
            for fd in dirs.values():
                os.close(fd)

    def _parent(self, relpath: str) -> tuple[int, str]:
        """(fd to open `relpath` in, its name there): the run directory and the path itself,
        or within cached_dirs() the cached fd of its directory and its leaf."""
        parent, _, leaf = relpath.rpartition("/")
        if self._dirs is None or not parent:
            return self._fd, relpath
        fd = self._dirs.get(parent)
        if fd is None:
            fd, _ = safe_io.open_parent(self._fd, relpath)  # validates the path, follows no link
            self._dirs[parent] = fd
        return fd, leaf

    def __enter__(self) -> SafeDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open_file(self, relpath: str) -> int:
        """A read-only fd of a regular file inside the run directory. Raises UnsafeFile / OSError."""
        try:
            return safe_io.open_regular(*self._parent(relpath))
        except UnsafeEntry as exc:
            raise UnsafeFile(exc.code, _reason(exc)) from None

    def read_capped(self, relpath: str, cap: int = MAX_ARTIFACT_BYTES) -> bytes:
        """The whole file if it is at most `cap` bytes; UnsafeFile('file.too_large') otherwise."""
        try:
            return safe_io.read_capped(*self._parent(relpath), cap)
        except UnsafeEntry as exc:
            raise UnsafeFile(exc.code, _reason(exc)) from None

    def list_files(self, relpath: str, limit: int) -> tuple[list[str], bool]:
        """(sorted names of the regular files in the folder `relpath`, cut at `limit`?). Every part
        of the path is opened without following a symlink; a missing folder lists nothing.
        Raises UnsafeFile for a symlinked or non-directory part."""
        try:
            parts = safe_io.split(relpath)
        except UnsafeEntry as exc:
            raise UnsafeFile(exc.code, _reason(exc)) from None
        fd = self._fd
        try:
            for part in parts:
                try:
                    nfd = safe_io.open_dir(part, fd)
                except FileNotFoundError:
                    return [], False
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise UnsafeFile("file.symlink", f"{relpath}/ is a symlink or not a directory") from None
                    raise
                if fd != self._fd:
                    os.close(fd)
                fd = nfd
            out: list[str] = []
            with os.scandir(fd) as it:
                for entry in it:
                    if entry.is_file(follow_symlinks=False):
                        if len(out) >= limit:
                            return sorted(out), True
                        out.append(entry.name)
            return sorted(out), False
        finally:
            if fd != self._fd:
                os.close(fd)

    def size(self, relpath: str) -> int | None:
        """The size of a regular file, None for anything else: one lstat, no open (a thousand
        logs are sized per audit)."""
        try:
            return safe_io.regular_size(*self._parent(relpath))
        except (UnsafeEntry, OSError):  # a cached directory on the way that cannot be opened
            return None

    def scan(self, max_entries: int = MAX_ENTRIES) -> tuple[list[tuple[str, str]], bool]:
        """[(relpath, kind)] for the run directory and its known subdirectories; kind is
        file | dir | symlink | other. The bool says the listing was cut at `max_entries`."""
        out: list[tuple[str, str]] = []
        truncated = False

        def walk(fd: int, prefix: str, depth: int) -> None:
            nonlocal truncated
            try:
                entries = sorted(os.scandir(fd), key=_NAME)
            except OSError:
                return
            for entry in entries:
                if len(out) >= max_entries:
                    truncated = True
                    return
                rel = f"{prefix}{entry.name}"
                try:
                    if entry.is_symlink():
                        kind = "symlink"
                    elif entry.is_dir(follow_symlinks=False):
                        kind = "dir"
                    elif entry.is_file(follow_symlinks=False):
                        kind = "file"
                    else:
                        kind = "other"
                except OSError:
                    kind = "other"
                out.append((rel, kind))
                # Only the protocol's own subdirectories are descended into; anything else is
                # reported as an unknown directory rather than explored.
                if kind == "dir" and depth == 0 and (entry.name in names.SUBDIRS or names.is_log_dir(entry.name)):
                    try:
                        sub = safe_io.open_dir(entry.name, fd)
                    except OSError:
                        continue
                    try:
                        walk(sub, f"{rel}/", depth + 1)
                    finally:
                        os.close(sub)

        walk(self._fd, "", 0)
        return out, truncated
