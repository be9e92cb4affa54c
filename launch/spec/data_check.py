"""Dataset-to-judge compatibility: every judge-graded verifier in the data needs a binding.

Runs before any GPU work (``gym-launch check-data`` and agent startup). Rows are streamed, so
large JSONL files cost memory proportional to the number of distinct verifiers only.

The rules are the MILES trainer's own data check (seed 000), so data passing here passes there. A row
is a JSON object whose verifiers sit where the trainer's prepared data keeps them:
``metadata.verifiers``, a list of ``{"name": ..., "target": ...}``. A bound verifier's rows need
``metadata.judge_query`` (the question the judge sees) and, unless its rubric is the reference-free
``open-instruct/general-quality`` profile, a non-empty ``target``. An unbound ``general-*`` verifier
is an error, and so is a binding no row uses. Other verifiers are deterministic and need no binding.
A row with only a top-level ``verifier`` is refused: the trainer would not see it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch.spec.errors import GymError

__all__ = [
    "DataError",
    "DataProblem",
    "DataReport",
    "FileSummary",
    "JUDGED_PREFIX",
    "PathLike",
    "Paths",
    "binding_snippet",
    "check_data",
    "spec_bindings",
    "is_judged",
]

JUDGED_PREFIX = "general-"
REFERENCE_FREE_PROFILE = "open-instruct/general-quality"
PathLike = str | os.PathLike[str]
Paths = PathLike | Sequence[PathLike] | None


class DataError(GymError):
    """A data file is missing, unreadable or malformed; the message names file and line."""


def is_judged(verifier: str) -> bool:
    return verifier.startswith(JUDGED_PREFIX)


def binding_snippet(verifier: str) -> str:
    """The run-spec entry a user must add for ``verifier`` (names to fill in as placeholders)."""
    return f'[judging.bindings."{verifier}"]\njudge = "JUDGE_NAME"\nrubric = "RUBRIC_NAME"'


@dataclass(frozen=True)
class FileSummary:
    split: str  # "train" | "eval"
    path: str
    rows: int


@dataclass(frozen=True)
class DataProblem:
    verifier: str
    message: str


@dataclass(frozen=True)
class DataReport:
    files: tuple[FileSummary, ...]
    verifier_rows: Mapping[str, int]  # rows per verifier, all splits
    judged_verifiers: tuple[str, ...]
    missing_bindings: tuple[str, ...]
    unused_bindings: tuple[str, ...]  # each also a problem: the trainer refuses them
    problems: tuple[DataProblem, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        lines = [f"{f.split}: {f.path} ({f.rows} rows)" for f in self.files]
        for verifier in sorted(self.verifier_rows):
            kind = "judge-graded" if is_judged(verifier) else "deterministic"
            lines.append(f"verifier {verifier}: {self.verifier_rows[verifier]} rows ({kind})")
        lines += [f"error: {p.message}" for p in self.problems]
        lines.append("data check passed" if self.ok else f"data check failed: {len(self.problems)} problem(s)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "files": [{"split": f.split, "path": f.path, "rows": f.rows} for f in self.files],
            "verifier_rows": dict(sorted(self.verifier_rows.items())),
            "judged_verifiers": list(self.judged_verifiers),
            "missing_bindings": list(self.missing_bindings),
            "unused_bindings": list(self.unused_bindings),
            "problems": [{"verifier": p.verifier, "message": p.message} for p in self.problems],
        }


def _as_paths(paths: Paths) -> list[Path]:
    if paths is None:
        return []
    if isinstance(paths, str | os.PathLike):
        return [Path(paths)]
    return [Path(p) for p in paths]


@dataclass(frozen=True)
class _Verifier:
    name: str
    has_target: bool


@dataclass(frozen=True)
class _Row:
    path: Path
    line: int
    verifiers: tuple[_Verifier, ...]
    has_query: bool


def _rows(path: Path) -> Iterator[_Row]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise DataError(f"data file {path} does not exist") from None
    except OSError as exc:
        raise DataError(f"data file {path} cannot be read: {exc.strerror or exc}") from None
    with handle:
        try:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    row = json.loads(raw, parse_constant=_no_constant)
                except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
                    raise DataError(f"{where}: not valid JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
                yield _Row(path, number, _verifiers(row, where), _has_query(row))
        except OSError as exc:
            raise DataError(f"data file {path} cannot be read: {exc.strerror or exc}") from None


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (a trainer's strict parser refuses them too)."""
    raise ValueError(f"{name} is not a JSON value")


def _verifiers(row: Mapping[str, Any], where: str) -> tuple[_Verifier, ...]:
    metadata = row.get("metadata", {})
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: 'metadata' must be a JSON object, got {type(metadata).__name__}")
    if "verifiers" not in metadata:
        if "verifier" in row:  # the old top-level shape: the trainer reads metadata.verifiers only
            raise DataError(
                f"{where}: the trainer reads verifier names from metadata.verifiers, not a top-level "
                f'\'verifier\'; write it as "metadata": {{"verifiers": [{{"name": "NAME", "target": "REFERENCE"}}]}}'
            )
        return ()
    listed = metadata["verifiers"]
    if not isinstance(listed, list) or not all(
        isinstance(v, dict) and isinstance(v.get("name"), str) and v["name"] for v in listed
    ):
        raise DataError(
            f"{where}: 'metadata.verifiers' must be a list of objects with a non-empty \"name\", got {listed!r}"
        )
    return tuple(_Verifier(v["name"], v.get("target") not in (None, "")) for v in listed)


def _has_query(row: Mapping[str, Any]) -> bool:
    metadata = row.get("metadata")
    query = metadata.get("judge_query") if isinstance(metadata, dict) else None
    return isinstance(query, str) and bool(query.strip())


def spec_bindings(config: Any) -> dict[str, dict[str, Any]]:
    """A resolved spec's bindings as check_data reads them (judge, rubric and the rubric's profile)."""
    return {
        b.verifier: {"judge": b.judge, "rubric": b.rubric, "profile": config.rubrics[b.rubric].profile}
        for b in config.bindings
    }


def _needs_target(binding: Any) -> bool:
    """The trainer grades every open-instruct profile but general-quality against a reference."""
    profile = binding.get("profile") if isinstance(binding, Mapping) else None
    return isinstance(profile, str) and profile.startswith("open-instruct/") and profile != REFERENCE_FREE_PROFILE


def check_data(train: Paths, eval: Paths, bindings: Mapping[str, Any]) -> DataReport:  # noqa: A002
    """Stream every train/eval file; raises DataError for a missing file or a malformed row.

    ``bindings`` maps a verifier to its binding (``profile`` is its rubric's profile, if any).
    """
    files: list[FileSummary] = []
    counts: Counter[str] = Counter()
    first_seen: dict[str, str] = {}
    missing_query: dict[str, tuple[int, str]] = {}  # verifier -> (rows, first file:line)
    missing_target: dict[str, tuple[int, str]] = {}
    splits: Iterable[tuple[str, Path]] = [
        *(("train", p) for p in _as_paths(train)),
        *(("eval", p) for p in _as_paths(eval)),
    ]
    for split, path in splits:
        rows = 0
        for row in _rows(path):
            rows += 1
            here = f"{row.path}:{row.line}"
            for verifier in row.verifiers:
                name = verifier.name
                counts[name] += 1
                first_seen.setdefault(name, here)
                if name not in bindings:
                    continue
                if not row.has_query:
                    _tally(missing_query, name, here)
                if not verifier.has_target and _needs_target(bindings[name]):
                    _tally(missing_target, name, here)
        files.append(FileSummary(split, str(path), rows))

    judged = tuple(sorted(v for v in counts if is_judged(v) or v in bindings))
    missing = tuple(v for v in judged if v not in bindings)
    unused = tuple(sorted(v for v in bindings if v not in counts))
    problems = [
        DataProblem(
            v,
            f'judge-graded verifier "{v}" ({counts[v]} rows, first at {first_seen[v]}) has no judge binding; '
            f"add to the run spec:\n{binding_snippet(v)}",
        )
        for v in missing
    ]
    problems += [
        DataProblem(
            v,
            f'judge-graded verifier "{v}": {n} row(s) lack metadata.judge_query (the question the judge '
            f"grades against), first at {first}",
        )
        for v, (n, first) in sorted(missing_query.items())
    ]
    problems += [
        DataProblem(
            v,
            f'judge-graded verifier "{v}": {n} row(s) lack a reference "target" in metadata.verifiers (its '
            f"rubric grades against one), first at {first}",
        )
        for v, (n, first) in sorted(missing_target.items())
    ]
    problems += [
        DataProblem(
            v,
            f'binding "{v}" is used by no train/eval row (the trainer refuses unused bindings); add rows with '
            f'metadata.verifiers [{{"name": "{v}"}}] or remove [judging.bindings."{v}"]',
        )
        for v in unused
    ]
    return DataReport(tuple(files), dict(counts), judged, missing, unused, tuple(problems))


def _tally(found: dict[str, tuple[int, str]], verifier: str, where: str) -> None:
    seen, first = found.get(verifier, (0, where))
    found[verifier] = (seen + 1, first)
