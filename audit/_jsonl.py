"""JSON Lines artifacts (grades-RANK.jsonl and its rotated segments): read line by line, every line
parsed and validated against its schema, a compact summary of each kept for the cross-checks.

Why not the JSON artifacts' path: a grades segment may be far larger than any JSON artifact
(``[judging] grades_max_bytes``), so it is streamed in chunks (at most MAX_JSONL_BYTES per file,
MAX_LINE_BYTES per line) and only each line's top-level facts are kept, not its diagnostics.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

from audit._model import Finding
from schemas import violations

__all__ = ["DROPPED", "JsonlArtifact", "MAX_FINDINGS_PER_FILE", "MAX_JSONL_BYTES", "MAX_LINE_BYTES", "read_jsonl"]

MAX_JSONL_BYTES = 1 << 30  # per file: more is read no further (a warning says so)
MAX_LINE_BYTES = 1 << 20  # a writer's line is bounded far below this (agent/judges/_grade_log.py)
MAX_FINDINGS_PER_FILE = 20  # a wholly wrong file would otherwise bury every other finding
DROPPED = ("diagnostics",)  # per-line detail the audit does not keep in memory


@dataclass(frozen=True)
class JsonlArtifact:
    """One JSON Lines file: ``lines`` holds each valid line's top-level fields (without diagnostics)."""

    relpath: str
    schema: str
    file_rank: int | None
    lines: tuple[dict[str, Any], ...]
    bad_lines: int  # lines that did not parse or did not match the schema


def _chunks(fd: int, cap: int) -> Any:
    total = 0
    while total < cap:
        chunk = os.read(fd, min(1 << 20, cap - total))
        if not chunk:
            return
        total += len(chunk)
        yield chunk


def read_jsonl(fd: int, relpath: str, schema: str, file_rank: int | None) -> tuple[JsonlArtifact, list[Finding]]:
    """Read, parse and validate every line of ``relpath`` from ``fd`` (the audit's safe open; closed
    here). Never raises for bad content."""
    findings: list[Finding] = []
    kept: list[dict[str, Any]] = []
    bad = 0
    shown = 0

    def problem(severity: str, code: str, message: str, path: str | None = None) -> None:
        nonlocal shown
        shown += 1
        if shown <= MAX_FINDINGS_PER_FILE:
            findings.append(Finding(severity, code, message, relpath, file_rank, path))  # type: ignore[arg-type]

    number = 0
    pending = b""
    read = 0
    try:
        for chunk in _chunks(fd, MAX_JSONL_BYTES):
            read += len(chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                number += 1
                bad += _one_line(raw, number, schema, kept, problem)
            if len(pending) > MAX_LINE_BYTES:
                number += 1
                bad += 1
                problem("error", "json.invalid", f"line {number}: longer than {MAX_LINE_BYTES} bytes; not read")
                pending = b""
        if read >= MAX_JSONL_BYTES and os.read(fd, 1):
            problem("warning", "file.too_large", f"larger than {MAX_JSONL_BYTES} bytes; the rest not audited")
    finally:
        os.close(fd)
    if pending.strip():
        # A writer that died mid-line (or a file still being written): the torn line is no grade.
        problem("warning", "grades.torn_line", f"line {number + 1} has no end (an interrupted write); not counted")
    if shown > MAX_FINDINGS_PER_FILE:
        findings.append(
            Finding(
                "error",
                "schema.violation",
                f"{shown - MAX_FINDINGS_PER_FILE} more problems not shown",
                relpath,
                file_rank,
            )
        )
    return JsonlArtifact(relpath, schema, file_rank, tuple(kept), bad), findings


def _one_line(raw: bytes, number: int, schema: str, kept: list[dict[str, Any]], problem: Any) -> int:
    """Parse and validate one line; 1 when it is bad."""
    if not raw.strip():
        problem("error", "json.invalid", f"line {number}: empty")
        return 1
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        problem("error", "json.invalid", f"line {number}: not valid JSON: {str(exc)[:120]}")
        return 1
    if not isinstance(doc, dict):
        problem("error", "json.not_object", f"line {number}: a JSON {type(doc).__name__}, not an object")
        return 1
    try:
        found = violations(schema, doc)
    except RecursionError:
        problem("error", "schema.violation", f"line {number}: nested too deeply to validate")
        return 1
    if found:
        for v in found[:3]:
            problem("error", "schema.violation", f"line {number}: {v.reason}", v.path)
        return 1
    kept.append({k: v for k, v in doc.items() if k not in DROPPED})
    return 0
