"""Loading a run spec: TOML (or a run directory's spec.json) plus ``--set`` overrides.

The resolved spec is the data exactly as spelled after overrides: no defaults
are injected, so an omitted key and a key set to its default value are
different specs with different fingerprints (seed 000: omitted ``cuda_graphs``
vs ``cuda_graphs = false``). Defaults live in ``launch.config``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch.errors import Problem, SpecError, UsageError
from launch.keypath import format_key
from launch.overrides import apply_overrides


def canonical_json(data: Mapping[str, Any]) -> str:
    """Sorted keys, no whitespace, UTF-8 text (not ASCII-escaped), no NaN/Infinity."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, eq=False)
class ResolvedSpec:
    """The resolved spec and its identity.

    ``data`` is a private deep copy; treat it as read-only (use ``to_dict()``
    for a copy you may change). Two specs are equal when their fingerprints are.
    """

    data: Mapping[str, Any]
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", copy.deepcopy(dict(self.data)))
        digest = hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()
        object.__setattr__(self, "fingerprint", digest)

    def canonical_json(self) -> str:
        return canonical_json(self.data)

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.data))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResolvedSpec) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)


def _non_json_values(value: Any, path: list[str]) -> list[Problem]:
    """TOML can hold dates, times and inf/nan; canonical JSON cannot."""
    if isinstance(value, dict):
        out: list[Problem] = []
        for k, v in value.items():
            out += _non_json_values(v, [*path, str(k)])
        return out
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            out += _non_json_values(v, [*path, str(i)])
        return out
    if isinstance(value, float) and not math.isfinite(value):
        return [Problem(format_key(path), f"{value} is not allowed; use a finite number")]
    if value is None or isinstance(value, str | int | float | bool):
        return []
    return [Problem(format_key(path), f"{type(value).__name__} values are not supported; use a string")]


def resolved_from_dict(data: Mapping[str, Any]) -> ResolvedSpec:
    """Wrap an already-resolved spec. Raises SpecError for values JSON cannot hold."""
    if not isinstance(data, Mapping):
        raise UsageError(f"a run spec must be a table/object, not {type(data).__name__}")
    problems = _non_json_values(dict(data), [])
    if problems:
        raise SpecError(problems)
    return ResolvedSpec(data)


def _read_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already reads "... (at line L, column C)".
        raise UsageError(f"{path}: invalid TOML: {exc}") from None


def _read_json(path: Path, text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise UsageError(f"{path}: invalid JSON: {exc.msg} (at {where})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object, found {type(doc).__name__}")
    # A run directory's spec.json wraps the spec next to its fingerprint and
    # schema name; a bare spec has no "spec" key (it would be an unknown key).
    if isinstance(doc.get("spec"), dict):
        return doc["spec"]
    return doc


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> ResolvedSpec:
    """Read a TOML run spec (or a ``.json`` resolved spec) and apply ``--set`` overrides.

    Raises UsageError for file-level problems (one line) and SpecError for
    values canonical JSON cannot represent. Key validation is ``launch.validate``.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a directory, expected a run spec file") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    data = _read_json(p, text) if p.suffix.lower() == ".json" else _read_toml(p, text)
    return resolved_from_dict(apply_overrides(data, overrides))
