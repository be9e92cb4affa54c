"""Load a run directory's artifacts: classify every entry, read and parse every JSON artifact.

Bytes that are not UTF-8 or not JSON become findings, never tracebacks. All reading goes through
audit.safedir.SafeDir (no symlink followed, no FIFO opened, reads capped).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from audit._jsonl import JsonlArtifact, read_jsonl
from audit._model import Finding
from audit._sanitize import clean_text
from audit.safedir import MAX_ENTRIES, SafeDir, UnsafeFile
from schemas import names

__all__ = ["Artifact", "LoadedRun", "current_attempt", "load_run", "parse_json"]


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
    judge_logs: dict[str, str] = field(default_factory=dict)  # the judges' among logs: relpath -> judge
    others: dict[str, int] = field(default_factory=dict)  # names.OTHER_FILES present: relpath -> size
    # Streamed JSON Lines artifacts (the sample ledger): relpath -> size; their own check reads them.
    streamed: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    _index: dict[str, list[Artifact]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: dict[str, Artifact] | None = field(default=None, init=False, repr=False, compare=False)
    _indexed_len: int = field(default=0, init=False, repr=False, compare=False)

    def by_schema(self, schema: str) -> list[Artifact]:
        # Asked once per view and check: indexed once, not a pass over 6,000 artifacts each time.
        # The index is rebuilt whenever the artifacts changed (load_run only ever adds).
        if self._indexed is not self.artifacts or self._indexed_len != len(self.artifacts):
            index: dict[str, list[Artifact]] = {}
            for a in self.artifacts.values():
                index.setdefault(a.schema, []).append(a)
            self._index, self._indexed, self._indexed_len = index, self.artifacts, len(self.artifacts)
        return list(self._index.get(schema, ()))

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
        if _set_aside(run, relpath, kind):
            continue
        parsed = names.parse(relpath)  # one lookup says log, JSON Lines or artifact (8,000 names)
        if parsed is None or parsed.log is not None or parsed.lines:
            _load_other(safe, run, relpath, parsed)
            continue
        doc = _read_object(safe, run, relpath, parsed.rank)
        # The stamp first: asking each of thousands of names whether it is the run's costs more.
        if isinstance(doc, dict) and doc.get("attempt", 1) != attempt and not names.is_run_level(relpath):
            # A straggler or a planted record: the agents of this attempt ignored it, so do we.
            run.findings.append(
                Finding(
                    "warning",
                    "record.other_attempt",
                    f"stamped attempt {doc.get('attempt')!r}, but this is attempt {attempt}; ignored",
                    relpath,
                    parsed.rank,
                )
            )
            continue
        run.artifacts[relpath] = _artifact(relpath, parsed, doc)
    return run


def _artifact(relpath: str, parsed: names.Parsed, doc: dict[str, Any] | None) -> Artifact:
    """Artifact(relpath, parsed.schema, parsed.rank, parsed.judge, doc), filled at once: a frozen
    dataclass's __init__ sets each field through object.__setattr__ (6,000 artifacts at 1,024 ranks)."""
    art: Artifact = object.__new__(Artifact)
    art.__dict__.update(relpath=relpath, schema=parsed.schema, file_rank=parsed.rank, judge=parsed.judge, doc=doc)
    return art


def _set_aside(run: LoadedRun, relpath: str, kind: str) -> bool:
    """An entry that is not a file to read (a name no writer of ours produces, a link, a folder,
    a device, a leftover temp file): its finding, if any, and True."""
    if clean_text(relpath) != relpath:
        # Not a name any writer of ours produces; keep it out of every other code path.
        run.findings.append(Finding("info", "file.unknown", "file name is not UTF-8", clean_text(relpath)))
        return True
    if kind == "symlink":
        run.findings.append(
            Finding("error", "file.symlink", "is a symlink; not followed (someone planted it?)", relpath)
        )
        return True
    if kind == "dir":
        if relpath in (names.ATTEMPTS_DIR, names.CHECKPOINTS_DIR):
            return True  # earlier attempts are audited on their own; checkpoints are the driver's
        if relpath not in names.SUBDIRS and not names.is_log_dir(relpath):
            run.findings.append(Finding("info", "file.unknown", "unknown directory (not audited)", relpath))
        return True
    if kind == "other":
        run.findings.append(Finding("error", "file.not_regular", "is not a regular file; not read", relpath))
        return True
    if names.is_temp(names.leaf(relpath)):
        run.findings.append(Finding("info", "file.temp", "leftover temporary file of an interrupted write", relpath))
        return True
    return False


def _load_other(safe: SafeDir, run: LoadedRun, relpath: str, parsed: names.Parsed | None) -> None:
    """A file that is not a JSON artifact: a log (its size), JSON Lines, a contract file that is
    not an artifact (the user's run file, the rendered job), or an unknown one."""
    if parsed is not None and parsed.log is not None:
        size = safe.size(relpath)
        if size is None:
            run.findings.append(Finding("error", "file.unreadable", "log cannot be opened", relpath))
        else:
            run.logs[relpath] = size
            if parsed.log == "judge" and parsed.judge:  # named once here, not parsed again per log
                run.judge_logs[relpath] = parsed.judge
    elif parsed is not None and parsed.streamed:
        size = safe.size(relpath)
        if size is None:
            run.findings.append(Finding("error", "file.unreadable", "cannot be opened", relpath))
        else:
            run.streamed[relpath] = size
    elif parsed is not None:
        _load_jsonl(safe, run, relpath, parsed.schema, parsed.rank)
    elif names.is_other_file(relpath):
        size = safe.size(relpath)
        if size is not None:
            run.others[relpath] = size
    else:
        run.findings.append(Finding("info", "file.unknown", "not part of the run-directory contract", relpath))


def _read_object(safe: SafeDir, run: LoadedRun, relpath: str, file_rank: int | None) -> Any:
    """The artifact's JSON object, or None (unreadable, not JSON, not an object: each a finding)."""
    try:
        data = safe.read_capped(relpath)
    except UnsafeFile as exc:
        run.findings.append(Finding("error", exc.code, str(exc), relpath, file_rank))
        return None
    except OSError as exc:
        run.findings.append(Finding("error", "file.unreadable", f"cannot be read: {exc.strerror}", relpath))
        return None
    doc, found = parse_json(data, relpath)
    run.findings.extend(found)
    if doc is not None and not isinstance(doc, dict):
        run.findings.append(
            Finding("error", "json.not_object", f"is a JSON {type(doc).__name__}, not an object", relpath)
        )
        return None
    return doc


def _load_jsonl(safe: SafeDir, run: LoadedRun, relpath: str, schema: str, file_rank: int | None) -> None:
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
