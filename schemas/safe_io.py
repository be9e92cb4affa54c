"""The one safe reader and the one atomic writer of the project.

Reading: every open goes through a directory fd with O_NOFOLLOW, so a symlink planted in a run
directory is never followed; files are opened O_NONBLOCK (a planted FIFO must not block) and
checked to be regular before the first read; reads stop at a cap (an endless or huge file must
not exhaust memory). The agent's RunDir and the audit's SafeDir both read through this.

Writing: temp file in the same directory, fsync, rename, fsync the directory, so a reader sees
nothing or the whole file, never a torn one (docs/runtime-notes.md, "Shared filesystems").
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from pathlib import Path

from schemas import names
from schemas.errors import GymError

__all__ = [
    "MAX_ARTIFACT_BYTES",
    "RunDirError",
    "Sync",
    "UnsafeEntry",
    "open_dir",
    "open_parent",
    "open_regular",
    "open_regular_sized",
    "read_capped",
    "read_fd_capped",
    "regular_size",
    "split",
    "write_atomic",
    "write_atomic_path",
    "write_exclusive",
]

MAX_ARTIFACT_BYTES = 16 * 1024 * 1024  # artifacts are small; a huge one is hostile or broken
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RunDirError(GymError):
    """The run directory cannot be used safely; the message says why and what to change (exit 2)."""


class UnsafeEntry(RunDirError):
    """An entry a reader refuses: `code` is a stable identifier (the audit's finding code) and
    `reason` says why without the path (callers add the path in their own wording)."""

    def __init__(self, code: str, relpath: str, reason: str) -> None:
        super().__init__(f"{relpath} {reason}")
        self.code = code
        self.relpath = relpath
        self.reason = reason


def open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


_NOT_PLAIN = frozenset(("", ".", ".."))  # path parts that no run-directory name holds


def split(relpath: str) -> list[str]:
    parts = relpath.split("/")
    if not _NOT_PLAIN.isdisjoint(parts):  # one set test, not a generator per file (8,000 an audit)
        raise UnsafeEntry("file.bad_name", repr(relpath), "is not a plain run-directory name")
    return parts


def open_parent(root_fd: int, relpath: str) -> tuple[int, str]:
    """(fd of the directory holding `relpath`, leaf). The fd is `root_fd` itself for a top-level
    name; otherwise the caller closes it. Never follows a symlinked directory."""
    parts = split(relpath)
    fd = root_fd
    try:
        for part in parts[:-1]:
            try:
                nfd = open_dir(part, fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeEntry("file.symlink", f"{part}/", "is a symlink or not a directory") from None
                raise
            if fd != root_fd:
                os.close(fd)
            fd = nfd
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise
    return fd, parts[-1]


def open_regular(root_fd: int, relpath: str) -> int:
    """A read-only fd of a regular file below `root_fd`. Raises UnsafeEntry or OSError
    (FileNotFoundError when it is missing)."""
    return open_regular_sized(root_fd, relpath)[0]


def open_regular_sized(root_fd: int, relpath: str) -> tuple[int, int]:
    """(fd, size at open) of a regular file below `root_fd`, as `open_regular`."""
    fd, leaf = open_parent(root_fd, relpath)
    try:
        try:
            ffd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeEntry("file.symlink", relpath, "is a symlink; not followed") from None
            raise
    finally:
        if fd != root_fd:
            os.close(fd)
    st = os.fstat(ffd)
    if not stat.S_ISREG(st.st_mode):
        os.close(ffd)
        raise UnsafeEntry("file.not_regular", relpath, "is not a regular file")
    return ffd, st.st_size


def regular_size(root_fd: int, relpath: str) -> int | None:
    """The size of a regular file below `root_fd` by one lstat (no open), None for anything else
    (a symlink, a FIFO, a missing file, a symlinked directory on the way)."""
    try:
        fd, leaf = open_parent(root_fd, relpath)
    except (UnsafeEntry, OSError):
        return None
    try:
        st = os.stat(leaf, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        if fd != root_fd:
            os.close(fd)
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def read_capped(root_fd: int, relpath: str, cap: int = MAX_ARTIFACT_BYTES) -> bytes:
    """The whole file if it is at most `cap` bytes; UnsafeEntry('file.too_large') otherwise."""
    fd, size = open_regular_sized(root_fd, relpath)
    try:
        return read_fd_capped(fd, size, relpath, cap)
    finally:
        os.close(fd)


def read_fd_capped(fd: int, size: int, relpath: str, cap: int = MAX_ARTIFACT_BYTES) -> bytes:
    """The rest of an open file of `size` bytes (its fstat at open), at most `cap` bytes.

    One read of the size the file had (a record is replaced by rename, never appended to), so an
    artifact costs one read, not a 1 MiB buffer and a second read for the end of file; a file that
    turns out longer or shorter than its size said is read on to its end, chunk by chunk."""
    want = min(size, cap) + 1
    first = os.read(fd, want)
    if size and len(first) == size and size < want:  # 0: /proc-like files say 0 and have content
        return first
    chunks, total = [first], len(first)
    while total <= cap and chunks[-1]:
        chunk = os.read(fd, 1 << 20)
        total += len(chunk)
        chunks.append(chunk)
    if total > cap:
        # Stop at the cap: the file may be endless (or growing).
        raise UnsafeEntry("file.too_large", relpath, f"is larger than {cap} bytes; not read")
    return b"".join(chunks)


class Sync(enum.Enum):
    """When a write is made durable (fsync of the file and its directory) relative to the rename
    that publishes it. Readers never see a partial file in any case: the content is written (and,
    on NFS, flushed by close()) before the rename."""

    BEFORE_RENAME = "before"  # durable once visible (the default)
    AFTER_RENAME = "after"  # visible first, durable when the call returns: a failure record,
    # which peers wait for; a host crash in between may leave an empty file (read as unreadable)
    NONE = "none"  # never fsynced: a heartbeat or an intermediate timeline, rewritten soon anyway


def write_atomic(dir_fd: int, leaf: str, data: bytes, mode: int = 0o640, *, sync: Sync = Sync.BEFORE_RENAME) -> None:
    """Write `leaf` in the directory `dir_fd` atomically: temp file, rename, fsyncs as `sync` says.
    The temp file is always closed before the rename: on NFS, close() is what sends its content to
    the server (close-to-open), so no other client can open the new name and find it short."""
    tmp = names.temp_name(leaf, os.urandom(6).hex())
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        tfd = os.open(tmp, flags, mode, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(tfd, view) :]
            if sync is Sync.BEFORE_RENAME:
                os.fsync(tfd)
        finally:
            os.close(tfd)
        # rename never follows a symlink at the destination: it replaces the link itself.
        os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if sync is Sync.AFTER_RENAME:
        _fsync_name(dir_fd, leaf)
    if sync is not Sync.NONE:
        try:
            os.fsync(dir_fd)
        except OSError:
            pass  # some filesystems refuse fsync on directories; the rename is still atomic


def _fsync_name(dir_fd: int, leaf: str) -> None:
    """fsync a file just published under `leaf` (a read-only descriptor flushes the inode too)."""
    try:
        fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return  # replaced or removed since: nothing of ours left to make durable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_exclusive(dir_fd: int, leaf: str, data: bytes, mode: int = 0o640, *, exact_mode: bool = False) -> None:
    """Create `leaf` with `data` only if no such name exists: temp + fsync + link. link(2) fails
    with EEXIST when the name exists, atomically on a local filesystem and on NFSv3+ alike, so
    two writers racing for one name cannot both win (FileExistsError for the loser), and a
    reader never sees a partial file. `exact_mode`: the file gets exactly `mode` (not filtered by
    the umask), set before any content is written."""
    tmp = names.temp_name(leaf, os.urandom(6).hex())
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    tfd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            if exact_mode:
                os.fchmod(tfd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(tfd, view) :]
            os.fsync(tfd)
        finally:
            os.close(tfd)
        os.link(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass


def write_atomic_path(path: str | os.PathLike[str], data: bytes, mode: int = 0o640) -> None:
    """write_atomic for a plain path (a report, a port file): creates the parent if needed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic(dir_fd, target.name, data, mode)
    finally:
        os.close(dir_fd)
