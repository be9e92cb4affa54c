"""grades-RANK.jsonl: the file every grade of a driver is appended to, one JSON line each (and the
capped, rotated JSON Lines writer it is made of, which the judge gateway's request log uses too).

Why a file of its own and not the driver's log: the audit and a user read the grades after the
run (which binding, which outcome, the raw reply), and the judge-reply counts are checked
against it. Rules:

- appends go through the run directory's fd with ``O_NOFOLLOW``: a symlink planted at the name is
  refused (the write fails), never followed; a non-regular file there (a FIFO) is refused too;
- one lock per log: drivers grade from many threads, and each line is one ``write(2)`` of a whole
  line on an ``O_APPEND`` descriptor, so lines never interleave;
- size-capped and rotated: when a line would take the current segment past ``max_bytes``, it is
  renamed ``grades-RANK.1.jsonl`` (older segments move up by one, the oldest beyond ``keep`` is
  removed) and a new one is started; renames and unlinks never follow a link either;
- another process of the same rank (a driver's worker that inherited its environment) may rotate
  the file under us: before each append the name's inode is compared with ours and the file is
  reopened when they differ, so nobody keeps appending into a rotated segment.

No line is fsynced: each is in the kernel when ``append`` returns, and at the latest on the
server when the driver exits (close); the log is evidence, not a coordination record.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from schemas import names, safe_io

__all__ = ["DEFAULT_KEEP", "DEFAULT_MAX_BYTES", "FIELD_CHARS", "GradeLog", "PartlyWritten", "RotatingLog", "bounded"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # [judging] grades_max_bytes
DEFAULT_KEEP = 3  # [judging] grades_keep
# Longest string kept in a line's diagnostics (request messages, raw replies, answers): lines stay
# bounded whatever a policy or a judge writes; the cut says how much was left out.
FIELD_CHARS = 4096
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def bounded(value: Any, limit: int = FIELD_CHARS, depth: int = 0) -> tuple[Any, bool]:
    """``value`` with every string longer than ``limit`` cut (and marked); True when anything was."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value, False
        return f"{value[:limit]}…[{len(value) - limit} more chars cut]", True
    if depth > 16:  # diagnostics are a few levels deep; deeper is not ours to keep
        return None, True
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        cut = False
        for k, v in value.items():
            out[str(k)], c = bounded(v, limit, depth + 1)
            cut = cut or c
        return out, cut
    if isinstance(value, list | tuple):
        items = []
        cut = False
        for v in value:
            item, c = bounded(v, limit, depth + 1)
            items.append(item)
            cut = cut or c
        return items, cut
    return value, False


class PartlyWritten(OSError):
    """RotatingLog.append_many stopped at a refused write: its first ``written`` lines are in."""

    def __init__(self, written: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.written = written


class RotatingLog:
    """Appends lines to a capped, rotated JSON Lines file of the run directory: segment 0 is
    ``segment_name(0)``, rotated ones ``segment_name(N)``. Thread-safe."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        segment_name: Callable[[int], str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        if keep < 0:
            raise ValueError("keep must be >= 0")
        self.run_dir = Path(run_dir)
        self.segment_name = segment_name
        self.max_bytes = max_bytes
        self.keep = keep
        self.relpath = segment_name(0)
        self._lock = threading.Lock()
        self._dir_fd = -1
        self._fd = -1
        self._ino: tuple[int, int] | None = None
        self._size = 0
        self.rotations = 0

    # -- writing --

    def append(self, line: bytes) -> None:
        """Append one line (``line`` ends with a newline). Raises OSError when the run directory
        refuses it (missing, full, a symlink or non-regular file at the name)."""
        self.append_many((line,))

    def append_many(self, lines: Sequence[bytes]) -> None:
        """Append lines in as few writes as the cap allows (a segment is rotated away where the
        next line would take it over ``max_bytes``). Raises OSError as ``append`` does, or
        PartlyWritten when some lines were written before a write was refused."""
        if not all(line.endswith(b"\n") for line in lines):
            raise ValueError("a grades line ends with a newline")
        written = 0
        pending = bytearray()
        try:
            with self._lock:
                self._ensure_open()
                for n, line in enumerate(lines):
                    if self._size + len(pending) > 0 and self._size + len(pending) + len(line) > self.max_bytes:
                        self._write(pending)
                        pending.clear()
                        written = n
                        if self._size > 0:
                            self._rotate()
                            self._ensure_open()
                    pending += line
                self._write(pending)
        except OSError as exc:
            if written:
                raise PartlyWritten(written, exc) from exc
            raise

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held by another thread)."""
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._close_file()
            if self._dir_fd >= 0:
                os.close(self._dir_fd)
                self._dir_fd = -1

    def __enter__(self) -> RotatingLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- internals (under the lock) --

    def _ensure_open(self) -> None:
        if self._dir_fd < 0:
            if self.run_dir.is_symlink():
                raise OSError(errno.ELOOP, f"{self.run_dir} is a symlink; grades are not written through it")
            self._dir_fd = safe_io.open_dir(self.run_dir)
        if self._fd >= 0 and self._name_is_ours():
            return
        self._close_file()
        leaf = names.leaf(self.relpath)
        try:
            fd = os.open(leaf, _OPEN_FLAGS, 0o640, dir_fd=self._dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, f"{self.relpath} is a symlink; not followed") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{self.relpath} is not a regular file; not written")
        self._fd, self._ino, self._size = fd, (st.st_dev, st.st_ino), st.st_size

    def _write(self, data: bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(data)

    def _name_is_ours(self) -> bool:
        """The name still points at the file we hold (no other process rotated it away)."""
        try:
            st = os.stat(names.leaf(self.relpath), dir_fd=self._dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._ino

    def _rotate(self) -> None:
        self._close_file()
        leaf = names.leaf
        oldest = leaf(self.segment_name(self.keep)) if self.keep else leaf(self.relpath)
        _remove(oldest, self._dir_fd)
        for segment in range(self.keep - 1, -1, -1):
            src = leaf(self.segment_name(segment))
            dst = leaf(self.segment_name(segment + 1))
            try:
                # rename(2) never follows a link at either name: a planted one is moved, not used.
                os.rename(src, dst, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            except FileNotFoundError:
                pass  # that segment does not exist (yet), or another process moved it first
        self.rotations += 1

    def _close_file(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._ino = None
            self._size = 0


class GradeLog(RotatingLog):
    """``RUN_DIR/grades-RANK.jsonl`` and its rotated segments ``grades-RANK.N.jsonl``."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        rank: int,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        super().__init__(run_dir, partial(names.grades, rank), max_bytes=max_bytes, keep=keep)
        self.rank = rank


def _remove(leaf: str, dir_fd: int) -> None:
    try:
        os.unlink(leaf, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
