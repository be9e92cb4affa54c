"""Loading a run spec: TOML (or a run directory's spec.json) plus ``--set`` overrides.

The resolved spec is the data exactly as spelled after overrides: no defaults
are injected, so an omitted key and a key set to its default value are
different specs with different fingerprints (omitted ``cuda_graphs``
vs ``cuda_graphs = false``). Defaults live in ``launch.spec.config``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch.spec._overrides import apply_overrides
from launch.spec.errors import Problem, SpecError, UsageError
from launch.spec.keypath import format_key

__all__ = [
    "MAX_SOURCE_TEXT",
    "ORDERED_TABLES",
    "ResolvedSpec",
    "SPEC_JSON_ENV",
    "YAML_SUFFIXES",
    "canonical_json",
    "key_order",
    "load_spec",
    "load_spec_record",
    "resolved_from_dict",
    "restore_key_order",
    "spec_differences",
    "spec_record",
]

# Tables whose key order means something: pools take contiguous node ranges in declaration order,
# so that order is part of the run's identity (one fingerprint, one plan).
ORDERED_TABLES: frozenset[tuple[str, ...]] = frozenset({("pools",)})


def _canonical(value: Any, path: tuple[str, ...]) -> Any:
    if isinstance(value, Mapping):
        items = value.items() if path in ORDERED_TABLES else sorted(value.items())
        return {k: _canonical(v, (*path, k)) for k, v in items}
    if isinstance(value, list | tuple):
        return [_canonical(v, path) for v in value]
    return value


def canonical_json(data: Mapping[str, Any]) -> str:
    """Sorted keys (but for ORDERED_TABLES), no whitespace, UTF-8 text, no NaN/Infinity."""
    return json.dumps(_canonical(data, ()), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def key_order(data: Mapping[str, Any]) -> dict[str, list[str]]:
    """The declaration order of ORDERED_TABLES, for writers that sort keys (spec.json)."""
    out: dict[str, list[str]] = {}
    for path in ORDERED_TABLES:
        node: Any = data
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and len(node) > 1:
            out[".".join(path)] = list(node)
    return out


def restore_key_order(data: dict[str, Any], order: Any) -> None:
    if not isinstance(order, dict):
        return
    for dotted, keys in order.items():
        *parents, last = dotted.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        table = node.get(last) if isinstance(node, dict) else None
        if isinstance(table, dict) and isinstance(keys, list) and set(keys) == set(table):
            node[last] = {k: table[k] for k in keys}


@dataclass(frozen=True, eq=False)
class ResolvedSpec:
    """The resolved spec and its identity.

    ``data`` is a private deep copy; treat it as read-only (use ``to_dict()``
    for a copy you may change). Two specs are equal when their fingerprints are.
    """

    data: Mapping[str, Any]
    # Where relative paths of the spec ([data] train/eval) resolve from: the spec file's folder.
    base_dir: str | None = field(default=None, compare=False)
    # The --set items already applied to data: a MILES trainer is given them too.
    overrides: tuple[str, ...] = field(default=(), compare=False)
    # The spec file's text as the user wrote it (the driver of a MILES run reads the file itself).
    source_text: str | None = field(default=None, compare=False, repr=False)
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


def resolved_from_dict(
    data: Mapping[str, Any],
    base_dir: str | None = None,
    *,
    overrides: Sequence[str] = (),
    source_text: str | None = None,
) -> ResolvedSpec:
    """Wrap an already-resolved spec. Raises SpecError for values JSON cannot hold."""
    if not isinstance(data, Mapping):
        raise UsageError(f"a run spec must be a table/object, not {type(data).__name__}")
    problems = _non_json_values(dict(data), [])
    if problems:
        raise SpecError(problems)
    return ResolvedSpec(data, base_dir, tuple(overrides), source_text)


def _read_toml(path: Path, text: str) -> dict[str, Any]:
    import tomllib  # imported when a run file is read: the audit reads only spec.json

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already reads "... (at line L, column C)".
        raise UsageError(f"{path}: invalid TOML: {exc}") from None


YAML_SUFFIXES = (".yaml", ".yml")


def _read_yaml(path: Path, text: str) -> dict[str, Any]:
    """A NeMo Gym submission config (seed 001's system): YAML whose top level has compute and services."""
    import yaml  # imported when a YAML file is read: the agent and the audit read spec.json

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (at line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path}: invalid YAML: {problem}{where}") from None
    if not isinstance(data, dict) or "compute" not in data or "services" not in data:
        raise UsageError(
            f"{path}: a YAML run spec is read as a NeMo Gym submission config, whose top level has compute and "
            "services; this project's own spec is TOML"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise UsageError(f"{path}: top-level key {bad[0]!r} is not a string")
    return data


@dataclass(frozen=True)
class _Recorded:
    """What a run directory's spec.json says besides the spec itself."""

    base_dir: str | None = None
    overrides: tuple[str, ...] = ()
    source_text: str | None = None


def _read_json(path: Path, text: str) -> tuple[dict[str, Any], _Recorded]:
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
        spec = doc["spec"]
        restore_key_order(spec, doc.get("key_order"))
        base, overrides, source = doc.get("base_dir"), doc.get("overrides"), doc.get("source_text")
        return spec, _Recorded(
            base if isinstance(base, str) else None,
            tuple(o for o in overrides if isinstance(o, str)) if isinstance(overrides, list) else (),
            source if isinstance(source, str) else None,
        )
    return doc, _Recorded(source_text=text)


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> ResolvedSpec:
    """Read a TOML run spec (a ``.json`` resolved spec, a ``.yaml`` NeMo Gym config) and apply ``--set`` overrides.

    Raises UsageError for file-level problems (one line) and SpecError for
    values canonical JSON cannot represent. Key validation is ``launch.spec.validate``.
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
    if p.suffix.lower() == ".json":
        data, recorded = _read_json(p, text)
    elif p.suffix.lower() in YAML_SUFFIXES:
        data, recorded = _read_yaml(p, text), _Recorded(source_text=text)
    else:
        data, recorded = _read_toml(p, text), _Recorded(source_text=text)
    return resolved_from_dict(
        apply_overrides(data, overrides),
        recorded.base_dir or str(p.absolute().parent),
        overrides=(*recorded.overrides, *overrides),
        source_text=recorded.source_text,
    )


def load_spec_record(text: str, origin: str, overrides: Sequence[str] = ()) -> ResolvedSpec:
    """A spec record (spec.json's body, as JSON text) carried without a file, e.g. inline in a
    Beaker task's environment (``SPEC_JSON_ENV``); ``origin`` names it in messages."""
    data, recorded = _read_json(Path(origin), text)
    return resolved_from_dict(
        apply_overrides(data, overrides),
        recorded.base_dir,
        overrides=(*recorded.overrides, *overrides),
        source_text=recorded.source_text,
    )


# The environment variable that carries a spec record inline (gym-agent reads it when neither
# --config nor GYM_RUN_SPEC names a file): every replica of a Beaker task loads the same bytes.
SPEC_JSON_ENV = "GYM_RUN_SPEC_JSON"

MAX_SOURCE_TEXT = 1 << 20  # a run file is kilobytes; a bound keeps spec.json small


def spec_record(resolved: ResolvedSpec, source: str) -> dict[str, Any]:
    """The body of a run directory's spec.json: the spec as spelled plus what reading it back needs."""
    body: dict[str, Any] = {"spec": resolved.to_dict(), "source": source}
    if resolved.base_dir:
        body["base_dir"] = resolved.base_dir
    if resolved.overrides:
        body["overrides"] = list(resolved.overrides)
    if resolved.source_text is not None and len(resolved.source_text) <= MAX_SOURCE_TEXT:
        body["source_text"] = resolved.source_text
    order = key_order(resolved.data)
    if order:
        body["key_order"] = order
    return body


def spec_differences(recorded: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between a run directory's recorded spec and a new one
    (a resume must run the same spec: the message names what to change back)."""
    out: list[str] = []
    for k in sorted(set(recorded) | set(new)):
        path = f"{prefix}{k}"
        a, b = recorded.get(k), new.get(k)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += spec_differences(a, b, path + ".")
        elif a != b:
            out.append(path)
    return out
