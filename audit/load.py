"""Safe, read-only access to a run directory that may be broken or hostile.

Why not just `open(path)`: a run directory lives on a shared filesystem that other users
and crashed processes write to. A planted symlink must not make the audit read (or hang on)
something outside the run; a FIFO must not block it; a multi-GB "artifact" must not exhaust
memory; bytes that are not UTF-8 or not JSON must become findings, never tracebacks.
Every read goes through schemas.safe_io (the writers' own safe reader): a directory fd with
O_NOFOLLOW, files opened O_NONBLOCK and checked to be regular before the first read, reads
capped. Nothing here ever writes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from audit.jsonl import JsonlArtifact, read_jsonl
from audit.model import Finding
from audit.sanitize import clean_text
from launch.spec.errors import GymError
from schemas import names, safe_io
from schemas.safe_io import MAX_ARTIFACT_BYTES, UnsafeEntry

MAX_ENTRIES = 100_000  # a run directory holds a few files per rank; more is hostile or broken


class UnusableRunDir(GymError):
    """The input cannot be audited at all (exit 2); the message says why and what to pass instead."""


class UnsafeFile(Exception):
    """A run-directory entry the audit refuses to read; `code` is the finding code."""

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
        try:
            fd = self.open_file(relpath)
        except (UnsafeFile, OSError):
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def scan(self, max_entries: int = MAX_ENTRIES) -> tuple[list[tuple[str, str]], bool]:
        """[(relpath, kind)] for the run directory and its known subdirectories; kind is
        file | dir | symlink | other. The bool says the listing was cut at `max_entries`."""
        out: list[tuple[str, str]] = []
        truncated = False

        def walk(fd: int, prefix: str, depth: int) -> None:
            nonlocal truncated
            try:
                entries = sorted(os.scandir(fd), key=lambda e: e.name)
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


@dataclass(frozen=True)
class Artifact:
    """A JSON artifact found in the run directory. `doc` is None when it could not be parsed."""

    relpath: str
    schema: str
    file_rank: int | None  # the rank in the file name, when the name carries one
    judge: str | None  # judge name, for judge-NAME-RANK.json
    doc: dict[str, Any] | None


@dataclass
class LoadedRun:
    path: str
    attempt: int = 1  # the directory's current attempt (its records of another are ignored)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    # JSON Lines artifacts (grades-RANK.jsonl and its segments): every line validated on load.
    jsonl: dict[str, JsonlArtifact] = field(default_factory=dict)
    logs: dict[str, int] = field(default_factory=dict)  # relpath -> size in bytes
    others: dict[str, int] = field(default_factory=dict)  # names.OTHER_FILES present: relpath -> size
    findings: list[Finding] = field(default_factory=list)

    def by_schema(self, schema: str) -> list[Artifact]:
        return [a for a in self.artifacts.values() if a.schema == schema]

    def jsonl_lines(self, schema: str) -> list[tuple[JsonlArtifact, dict[str, Any]]]:
        """Every valid line of every JSON Lines artifact of ``schema`` (e.g. "grade"), with its file."""
        return [(art, line) for art in self.jsonl.values() if art.schema == schema for line in art.lines]

    def doc(self, relpath: str) -> dict[str, Any] | None:
        art = self.artifacts.get(relpath)
        return art.doc if art else None


def _has_nonfinite(value: Any) -> bool:
    """True when a value parsed by the stdlib contains NaN/Infinity (which JSON forbids)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def parse_json(data: bytes, relpath: str) -> tuple[Any, list[Finding]]:
    """(document or None, findings). Never raises."""
    try:
        return orjson.loads(data), []  # UTF-8 checked too: the checks below only word a refusal
    except orjson.JSONDecodeError as exc:
        strict_error = str(exc)
    if not data.strip():
        return None, [Finding("error", "file.empty", "is empty (a writer died before writing it?)", relpath)]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [Finding("error", "json.not_utf8", f"is not UTF-8 (byte {exc.start})", relpath)]
    # The stdlib accepts NaN/Infinity, which Python writers emit for a diverged loss: parse it
    # anyway so the finite-loss check can name the problem, and flag the file as non-JSON.
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        short = strict_error if len(strict_error) <= 160 else strict_error[:157] + "..."
        return None, [Finding("error", "json.invalid", f"is not valid JSON (truncated?): {short}", relpath)]
    if _has_nonfinite(doc):
        return doc, [Finding("error", "json.nonfinite", "contains NaN or Infinity, which JSON forbids", relpath)]
    return None, [Finding("error", "json.invalid", f"is not valid JSON: {strict_error[:160]}", relpath)]


def current_attempt(path: Path) -> int:
    """The highest claimed attempt (attempts/N/claim.json), 1 for a run never resumed. An
    archive (attempts/N/ itself) has no attempts/ directory: its attempt is its own name."""
    root = path / names.ATTEMPTS_DIR
    if root.is_dir() and not root.is_symlink():
        return names.current_attempt(names.claimed_attempts(lambda rel: _listing(path / rel)))
    if path.parent.name == names.ATTEMPTS_DIR and names.ATTEMPT_RE.match(path.name):
        return int(path.name)
    return 1


def _listing(folder: Path) -> list[str]:
    """The names in a real (not symlinked) folder; none when it is missing or unreadable."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    try:
        return os.listdir(folder)
    except OSError:
        return []


def load_run(safe: SafeDir) -> LoadedRun:
    """Classify every entry, read and parse every JSON artifact. Never raises for bad content."""
    attempt = current_attempt(Path(safe.path))
    run = LoadedRun(str(safe.path), attempt)
    entries, truncated = safe.scan()
    if truncated:
        run.findings.append(
            Finding("warning", "dir.too_many_entries", f"more than {MAX_ENTRIES} entries; the rest not audited")
        )
    for relpath, kind in entries:
        if clean_text(relpath) != relpath:
            # Not a name any writer of ours produces; keep it out of every other code path.
            run.findings.append(Finding("info", "file.unknown", "file name is not UTF-8", clean_text(relpath)))
            continue
        if kind == "symlink":
            run.findings.append(
                Finding("error", "file.symlink", "is a symlink; not followed (someone planted it?)", relpath)
            )
            continue
        if kind == "dir":
            if relpath in (names.ATTEMPTS_DIR, names.CHECKPOINTS_DIR):
                continue  # earlier attempts are audited on their own; checkpoints are the driver's
            if relpath not in names.SUBDIRS and not names.is_log_dir(relpath):
                run.findings.append(Finding("info", "file.unknown", "unknown directory (not audited)", relpath))
            continue
        if kind == "other":
            run.findings.append(Finding("error", "file.not_regular", "is not a regular file; not read", relpath))
            continue
        if names.is_temp(names.leaf(relpath)):
            run.findings.append(
                Finding("info", "file.temp", "leftover temporary file of an interrupted write", relpath)
            )
            continue
        if names.is_known_log(relpath):
            size = safe.size(relpath)
            if size is None:
                run.findings.append(Finding("error", "file.unreadable", "log cannot be opened", relpath))
            else:
                run.logs[relpath] = size
            continue
        jsonl_schema = names.jsonl_schema_for(relpath)
        if jsonl_schema is not None:
            _load_jsonl(safe, run, relpath, jsonl_schema)
            continue
        schema = names.schema_for(relpath)
        if schema is None and names.is_other_file(relpath):
            size = safe.size(relpath)
            if size is not None:
                run.others[relpath] = size
            continue  # the user's run file, the rendered job: part of the contract, not artifacts
        if schema is None:
            run.findings.append(Finding("info", "file.unknown", "not part of the run-directory contract", relpath))
            continue
        parsed = names.parse(relpath)
        file_rank, judge = (parsed.rank, parsed.judge) if parsed else (None, None)
        doc: Any = None
        try:
            data = safe.read_capped(relpath)
        except UnsafeFile as exc:
            run.findings.append(Finding("error", exc.code, str(exc), relpath, file_rank))
            data = None
        except OSError as exc:
            run.findings.append(Finding("error", "file.unreadable", f"cannot be read: {exc.strerror}", relpath))
            data = None
        if data is not None:
            doc, found = parse_json(data, relpath)
            run.findings.extend(found)
            if doc is not None and not isinstance(doc, dict):
                run.findings.append(
                    Finding("error", "json.not_object", f"is a JSON {type(doc).__name__}, not an object", relpath)
                )
                doc = None
        if isinstance(doc, dict) and not names.is_run_level(relpath) and doc.get("attempt", 1) != attempt:
            # A straggler or a planted record: the agents of this attempt ignored it, so do we.
            run.findings.append(
                Finding(
                    "warning",
                    "record.other_attempt",
                    f"stamped attempt {doc.get('attempt')!r}, but this is attempt {attempt}; ignored",
                    relpath,
                    file_rank,
                )
            )
            continue
        run.artifacts[relpath] = Artifact(relpath, schema, file_rank, judge, doc)
    return run


def _load_jsonl(safe: SafeDir, run: LoadedRun, relpath: str, schema: str) -> None:
    parsed = names.parse(relpath)
    file_rank = parsed.rank if parsed else None
    try:
        fd = safe.open_file(relpath)
    except UnsafeFile as exc:
        run.findings.append(Finding("error", exc.code, str(exc), relpath, file_rank))
        return
    except OSError as exc:
        run.findings.append(Finding("error", "file.unreadable", f"cannot be read: {exc.strerror}", relpath))
        return
    art, found = read_jsonl(fd, relpath, schema, file_rank)
    run.jsonl[relpath] = art
    run.findings.extend(found)
