"""The run directory on a shared filesystem: safe creation, atomic writes, tolerant reads.

Rules (docs/runtime-notes.md, "Shared filesystems"): one writer per file; temp + fsync + rename so no reader
ever sees a torn file; readers open and read CONTENT (close-to-open consistency) rather than
trusting stat(); new files are discovered by listing small directories; no cross-node locks.
Every operation goes through a directory file descriptor opened with O_NOFOLLOW, so a symlink
planted in the run directory is never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from schemas import credentials, names, safe_io
from schemas.safe_io import MAX_ARTIFACT_BYTES, RunDirError, open_dir
from schemas.vocab import WriterKind

__all__ = ["JsonRead", "RETRYABLE_READ_ERRNOS", "RunDir", "Writer", "new_incarnation"]

RETRYABLE_READ_ERRNOS = {errno.EACCES, errno.ESTALE, errno.EIO, errno.EAGAIN, errno.EINTR}


@dataclass(frozen=True)
class JsonRead:
    """One tolerant read of a JSON artifact: the object, or None (missing, unreadable, another
    attempt's); `corrupt` when the last try found bytes that do not decode to a JSON object."""

    doc: dict[str, Any] | None
    corrupt: bool = False


@dataclass(frozen=True)
class Writer:
    """Who writes an artifact: stamped into every JSON file."""

    fingerprint: str
    rank: int | None
    incarnation: str
    kind: WriterKind = WriterKind.AGENT
    clock_offset: float = 0.0  # a test hook that simulates a host with a skewed wall clock


# After mkdir said EEXIST (another host made the directory), how long to look for it: an NFS client's
# cached negative lookup can still answer ENOENT until the parent is revalidated, which re-opening
# the parent by name forces (close-to-open); the attribute cache ends it anyway after acdirmax.
_STALE_LOOK_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)  # seconds, about 3 s in all


def _ensure_owned_dir(
    parent_fd: int | None,
    name: str | Path,
    mode: int,
    revalidate: Callable[[], None] | None = None,
    where: Path | None = None,
) -> int:
    """Create (or open) directory `name` under `parent_fd`, refusing symlinks and foreign owners.
    `revalidate` re-opens the parent by name (where another host may have made `name`; `where` is
    its full path, for the error)."""
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
        created = True
    except FileExistsError:
        created = False
    try:
        fd = open_dir(name, parent_fd) if created else _open_made_elsewhere(parent_fd, name, revalidate, where)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RunDirError(f"{name} is a symlink or not a directory; refusing to follow it") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise RunDirError(f"{name} is owned by uid {st.st_uid}, not by this user; choose another output root")
    if created:
        os.chmod(fd, mode)  # mkdir's mode is filtered by umask; the contract asks for exactly `mode`
    return fd


def _open_made_elsewhere(
    parent_fd: int | None, name: str | Path, revalidate: Callable[[], None] | None, where: Path | None
) -> int:
    """Open `name`, which mkdir found existing: on ENOENT (a stale negative lookup of this NFS
    client) revalidate the parent and look again, for a bounded time; then a clear error."""
    t0 = time.monotonic()
    for delay in (0.0, *_STALE_LOOK_DELAYS):
        time.sleep(delay)
        if delay and revalidate is not None:
            revalidate()
        try:
            return open_dir(name, parent_fd)
        except FileNotFoundError:
            continue
    path = where or Path(name)
    raise RunDirError(
        f"{path}: mkdir says it exists (another host made it) but this host still finds no such directory "
        f"after {1 + len(_STALE_LOOK_DELAYS)} looks over {time.monotonic() - t0:.1f} s, re-opening its parent "
        "each time: this client's cached negative lookup (the NFS directory attribute cache) has not expired; "
        f"mount the shared filesystem with lookupcache=positive or a lower acdirmax, or create {path} before "
        "starting the agents"
    )


def _reopen(path: str | Path, dir_fd: int | None = None) -> Callable[[], None]:
    """Re-open a directory by name and close it at once: on NFS this revalidates it (close-to-open),
    dropping negative lookups cached under it if it changed. Nothing is read through it."""

    def revalidate() -> None:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd))

    return revalidate


class RunDir:
    """`OUTPUT/cluster/UUID`. Paths are relative names from `schemas.names`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        # The attempt this handle writes as and reads: the highest claimed one (1 for a run never
        # resumed). An agent sets it to the attempt it joined (agent/coord/attempts/).
        self.ops: Counter[str] = Counter()  # shared-filesystem operations, for the benchmark
        # The run directory's permission mode (what create made it, or what open found).
        self.mode = stat.S_IMODE(os.fstat(fd).st_mode)
        self.attempt = self.current_attempt()

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def create(cls, output_root: str | Path, uuid: str, *, mode: int) -> RunDir:
        """Create (or open) OUTPUT/cluster/UUID with ``mode`` (the spec's ``output.dir_mode``)."""
        if not names.UUID_RE.match(uuid):
            raise RunDirError(f"uuid {uuid!r} is not allowed: use 1-128 letters, digits, '-' or '_' (no '/', no '..')")
        root = Path(output_root)
        root.mkdir(parents=True, exist_ok=True)
        root_fd = open_dir(root) if not root.is_symlink() else os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            cluster_fd = _ensure_owned_dir(root_fd, "cluster", mode, _reopen(root.resolve()), root / "cluster")
            try:
                run_fd = _ensure_owned_dir(cluster_fd, uuid, mode, _reopen("cluster", root_fd), root / "cluster" / uuid)
            finally:
                os.close(cluster_fd)
        finally:
            os.close(root_fd)
        run = cls(root / "cluster" / uuid, run_fd)
        run.mode = mode
        for sub in names.SUBDIRS:
            os.close(_ensure_owned_dir(run_fd, sub, mode, _reopen(run.path), run.path / sub))
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Open an existing run directory (readers: the audit, tests)."""
        p = Path(path)
        if p.is_symlink():
            raise RunDirError(f"{p} is a symlink; refusing to follow it")
        try:
            fd = open_dir(p)
        except FileNotFoundError:
            raise RunDirError(f"{p} does not exist") from None
        except NotADirectoryError:
            raise RunDirError(f"{p} is not a directory") from None
        return cls(p, fd)

    def ensure_dir(self, relpath: str) -> None:
        """Create the directories of `relpath` (e.g. attempts/2, ray-session-0) below the run
        directory, owned by us, with the run directory's own mode."""
        parent = self._fd
        fds: list[int] = []
        revalidate = _reopen(self.path)
        where = self.path
        try:
            for part in relpath.split("/"):
                where = where / part
                grandparent, parent = parent, _ensure_owned_dir(parent, part, self.mode, revalidate, where)
                fds.append(parent)
                revalidate = _reopen(part, grandparent)
        finally:
            for fd in fds:
                os.close(fd)

    def move_into(self, name: str, dest_dir: str) -> None:
        """Move top-level entry `name` into `dest_dir` (one rename: same filesystem, atomic)."""
        dfd = open_dir(dest_dir, self._fd)
        try:
            os.rename(name, name, src_dir_fd=self._fd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)

    def link_into(self, name: str, dest_dir: str) -> None:
        """A hard link of top-level file `name` inside `dest_dir` (run-level files an archive needs)."""
        dfd = open_dir(dest_dir, self._fd)
        try:
            os.link(name, name, src_dir_fd=self._fd, dst_dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)

    def rename(self, src: str, dst: str) -> None:
        """Rename one run-directory entry to another name (atomic; FileNotFoundError if it is gone)."""
        sfd, sleaf, sclose = self._parent_fd(src)
        try:
            dfd, dleaf, dclose = self._parent_fd(dst)
            try:
                os.rename(sleaf, dleaf, src_dir_fd=sfd, dst_dir_fd=dfd)
            finally:
                if dclose:
                    os.close(dfd)
        finally:
            if sclose:
                os.close(sfd)

    def claimed_attempts(self) -> list[int]:
        """Attempt numbers with a claim record (attempts/N/claim.json), ascending."""
        return names.claimed_attempts(self.listdir)

    def current_attempt(self) -> int:
        return names.current_attempt(self.claimed_attempts())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- paths ----------------------------------------------------------------------------------

    def _parent_fd(self, relpath: str) -> tuple[int, str, bool]:
        """(directory fd, leaf name, must_close) for a relative name, without following symlinks."""
        try:
            fd, leaf = safe_io.open_parent(self._fd, relpath)
        except safe_io.UnsafeEntry as exc:
            raise RunDirError(str(exc)) from None
        return fd, leaf, fd != self._fd

    def open_log(self, relpath: str) -> int:
        """An append-only fd for a child's log: never follows a planted symlink."""
        fd, leaf, close = self._parent_fd(relpath)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                return os.open(leaf, flags, 0o640, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise RunDirError(f"{relpath} is a symlink in the run directory; refusing it") from None
                raise
        finally:
            if close:
                os.close(fd)

    # -- writing --------------------------------------------------------------------------------

    def write_artifact(
        self,
        relpath: str,
        writer: Writer,
        fields: Mapping[str, Any],
        *,
        sync: safe_io.Sync = safe_io.Sync.BEFORE_RENAME,
    ) -> dict[str, Any]:
        """Stamp the header, validate against the schema of ``relpath``'s artifact
        (schemas.names.ARTIFACTS), and write atomically. Returns the document. ``sync`` says when
        it is fsynced (safe_io.Sync)."""
        doc = self._stamp(names.artifact_schema(relpath), writer, fields)
        data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        self.write_bytes(relpath, data, sync=sync)
        return doc

    def _stamp(self, schema: str, writer: Writer, fields: Mapping[str, Any]) -> dict[str, Any]:
        # Imported here: jsonschema is most of an idle reader's memory (the reaper only reads
        # until the day it must write).
        from schemas.validation import SCHEMA_VERSION, check

        doc: dict[str, Any] = {
            "schema": schema,
            "schema_version": SCHEMA_VERSION,
            "fingerprint": writer.fingerprint,
            "rank": writer.rank,
            "incarnation": writer.incarnation,
            "attempt": self.attempt,
            "writer": str(writer.kind),
            "written_at": time.time() + writer.clock_offset,
            **credentials.redact(fields),  # the second line: what a check missed never reaches disk
        }
        check(schema, doc)
        return doc

    def create_artifact(self, relpath: str, writer: Writer, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Like write_artifact, but only when `relpath` does not exist yet: the one atomic claim
        (raises FileExistsError when another writer holds the name; nothing is replaced)."""
        doc = self._stamp(names.artifact_schema(relpath), writer, fields)
        data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        fd, leaf, close = self._parent_fd(relpath)
        try:
            safe_io.write_exclusive(fd, leaf, data)
            self.ops["write"] += 1
        finally:
            if close:
                os.close(fd)
        return doc

    def create_private(self, relpath: str, data: bytes, mode: int) -> None:
        """Create a run-level file that is no artifact (the doorbell's secret) exclusively, with
        exactly `mode`; FileExistsError when another writer created it first."""
        fd, leaf, close = self._parent_fd(relpath)
        try:
            safe_io.write_exclusive(fd, leaf, data, mode, exact_mode=True)
            self.ops["write"] += 1
        finally:
            if close:
                os.close(fd)

    def read_private(self, relpath: str, limit: int) -> tuple[bytes, int]:
        """Content (at most `limit` bytes) and permission bits of a file written by create_private.
        Raises FileNotFoundError, RunDirError (symlink, FIFO, too big) or OSError."""
        try:
            fd = safe_io.open_regular(self._fd, relpath)
        except safe_io.UnsafeEntry as exc:
            raise RunDirError(str(exc)) from None
        self.ops["read"] += 1
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise RunDirError(f"{relpath} is larger than {limit} bytes; not read")
        return data, mode

    def write_bytes(self, relpath: str, data: bytes, *, sync: safe_io.Sync = safe_io.Sync.BEFORE_RENAME) -> None:
        fd, leaf, close = self._parent_fd(relpath)
        try:
            safe_io.write_atomic(fd, leaf, data, sync=sync)
            self.ops["write"] += 1
        finally:
            if close:
                os.close(fd)

    # -- reading --------------------------------------------------------------------------------

    def read_bytes(self, relpath: str, limit: int = MAX_ARTIFACT_BYTES) -> bytes:
        """Raw content; raises FileNotFoundError, RunDirError (symlink, FIFO, too big) or OSError."""
        data = safe_io.read_capped(self._fd, relpath, limit)
        self.ops["read"] += 1
        return data

    def unlink(self, relpath: str) -> bool:
        """Remove one file (never a directory; a symlink itself, not its target). False when it was
        not there or could not be removed."""
        return self._remove(relpath, os.unlink)

    def remove_empty_dir(self, relpath: str) -> bool:
        """Remove a directory of the run only when it is empty (rmdir refuses any other)."""
        return self._remove(relpath, os.rmdir)

    def _remove(self, relpath: str, remove: Callable[..., None]) -> bool:
        try:
            fd, leaf, close = self._parent_fd(relpath)
        except (OSError, RunDirError):
            return False
        try:
            remove(leaf, dir_fd=fd)
            self.ops["write"] += 1
            return True
        except OSError:
            return False
        finally:
            if close:
                os.close(fd)

    def size_of(self, relpath: str) -> int | None:
        """A regular file's size by one lstat, None for anything else (missing, a symlink, a FIFO)."""
        self.ops["read"] += 1
        return safe_io.regular_size(self._fd, relpath)

    def read_from(self, relpath: str, offset: int, limit: int) -> bytes:
        """At most `limit` bytes of a growing file from `offset`: one step of a tail reader.
        Raises FileNotFoundError, RunDirError (symlink, FIFO) or OSError."""
        fd = safe_io.open_regular(self._fd, relpath)
        try:
            data = os.pread(fd, limit, offset)
        finally:
            os.close(fd)
        self.ops["read"] += 1
        return data

    def read_json(self, relpath: str, *, attempts: int = 3, delay: float = 0.05) -> dict[str, Any] | None:
        """A peer's artifact, or None when it is missing or still unreadable after a few tries.

        Never raises for a missing, partial, unreadable or planted file: one bad read must not
        fail a run (docs/runtime-notes.md, "Shared filesystems").
        """
        return self.read_json_checked(relpath, attempts=attempts, delay=delay).doc

    def read_json_checked(self, relpath: str, *, attempts: int = 3, delay: float = 0.05) -> JsonRead:
        """read_json, saying also whether the file held bytes that are no JSON object of this
        attempt's kind at all (`corrupt`): our writers replace files atomically, so a reader never
        sees one half written, and such bytes came from another writer or the storage itself."""
        corrupt = False
        for attempt in range(attempts):
            try:
                doc = orjson.loads(self.read_bytes(relpath))
                if not isinstance(doc, dict):
                    return JsonRead(None, corrupt=True)
                if not names.is_run_level(relpath) and doc.get("attempt", 1) != self.attempt:
                    return JsonRead(None)  # another attempt's record (left behind or planted): never ours
                return JsonRead(doc)
            except FileNotFoundError:
                self.ops["read"] += 1
                return JsonRead(None)
            except orjson.JSONDecodeError:
                corrupt = True
            except RunDirError:
                pass
            except OSError as exc:
                if exc.errno not in RETRYABLE_READ_ERRNOS and exc.errno != errno.ENOENT:
                    return JsonRead(None)
            if attempt + 1 < attempts:
                time.sleep(delay * (attempt + 1))
        return JsonRead(None, corrupt=corrupt)

    def listdir(self, subdir: str = "") -> list[str]:
        """Names in the run directory or one of its subdirectories (a listing revalidates on NFS)."""
        self.ops["list"] += 1
        try:
            if not subdir:
                return sorted(os.listdir(self._fd))
            fd = open_dir(subdir, self._fd)
            try:
                return sorted(os.listdir(fd))
            finally:
                os.close(fd)
        except OSError:
            return []

    def walk(self) -> list[str]:
        """Every file below the run directory, relative, without following symlinked directories."""
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.path, followlinks=False):
            rel = os.path.relpath(dirpath, self.path)
            for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                out.append(n if rel == "." else f"{rel}/{n}")
        return sorted(out)


def new_incarnation() -> str:
    return os.urandom(6).hex()
