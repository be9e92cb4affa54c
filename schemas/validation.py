"""Validate artifacts against the JSON Schemas shipped in this package (draft 2020-12).

Two validators, one verdict. `jsonschema` is the reference: its messages name what is wrong and
its error paths become the findings' JSON paths. It costs ~0.3-0.8 ms per artifact, which made
it ~90 % of an audit of thousands of artifacts; `jsonschema_rs` (compiled) decides pass/fail in a
few microseconds. `violations` asks jsonschema_rs first and lets jsonschema word only the
documents it rejects, so the findings are exactly the reference's. Where the two disagree the
compiled one is the stricter (its `$` does not match before a trailing newline; NaN is not a
number to it): such a document is handed to jsonschema, whose word is final.

Writers (`check`) use the reference alone: every agent validates the few records it writes, and
jsonschema_rs's 15 MB library would be in each agent's resident memory (its idle budget is 50 MB).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use: an audit that finds nothing wrong never needs it
    from jsonschema import Draft202012Validator
    from referencing import Registry

__all__ = [
    "SCHEMA_VERSION",
    "URN",
    "Violation",
    "check",
    "reference_violations",
    "sample_violations",
    "schema_names",
    "validator",
    "violations",
]

SCHEMA_VERSION = 1
URN = "urn:gym-agent:"


@dataclass(frozen=True)
class Violation:
    """One schema violation: where in the document (a JSON path) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# The schema files sit beside this module (the package is never zipped: its data are plain files).
# Read as files, not through importlib.resources, whose import alone is a tenth of an audit's start.
_HERE = Path(__file__).parent


@functools.cache
def schema_names() -> tuple[str, ...]:
    names = sorted(f.name.removesuffix(".schema.json") for f in _HERE.glob("*.schema.json"))
    return tuple(n for n in names if n != "common")


@functools.cache
def _schema_documents() -> dict[str, Any]:
    """$id -> schema document, for every schema file of this package."""
    out = {}
    for f in sorted(_HERE.glob("*.schema.json")):
        doc = json.loads(f.read_text(encoding="utf-8"))
        out[doc["$id"]] = doc
    return out


@functools.cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    return Registry().with_resources((uri, Resource.from_contents(doc)) for uri, doc in _schema_documents().items())


def _known(name: str) -> None:
    if name not in schema_names():
        raise KeyError(f"no schema named {name!r}; known: {', '.join(schema_names())}")


@functools.cache
def validator(name: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    _known(name)
    return Draft202012Validator(_schema_documents()[URN + name], registry=_registry())


@functools.cache
def _fast_registry() -> Any:
    import jsonschema_rs

    return jsonschema_rs.Registry(list(_schema_documents().items()))


@functools.cache
def _fast_validator(name: str) -> Any:
    import jsonschema_rs

    _known(name)
    # offline: every $ref is to a schema of this package; nothing is ever fetched.
    return jsonschema_rs.validator_for(_schema_documents()[URN + name], registry=_fast_registry(), offline=True)


def _fast_ok(name: str, document: Any) -> bool:
    try:
        return bool(_fast_validator(name).is_valid(document))
    except Exception:  # not JSON it can convert, or an unknown name: the reference answers (or raises)
        return False


def _json_path(parts: Any) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def violations(name: str, document: Any) -> list[Violation]:
    """Every violation of `document` against schema `name`, most specific first. Decided by the
    compiled validator, worded by the reference (identical to `reference_violations`).

    Documents parsed from JSON (depth at most ~1,000: orjson's limit, the stdlib's recursion limit)
    are safe for the compiled validator; it has no depth limit of its own."""
    if _fast_ok(name, document):
        return []
    return reference_violations(name, document)


def reference_violations(name: str, document: Any) -> list[Violation]:
    """Every violation of `document` against schema `name` found by jsonschema alone."""
    found: Iterator[Any] = validator(name).iter_errors(document)
    out = []
    for err in sorted(found, key=lambda e: list(e.absolute_path), reverse=False):
        reason = err.message if len(err.message) <= 200 else err.message[:197] + "..."
        out.append(Violation(_json_path(err.absolute_path), reason))
    return out


@functools.cache
def _sample_validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator({"$ref": URN + "common#/$defs/graded_sample"}, registry=_registry())


def sample_violations(sample: Any) -> list[Violation]:
    """Every violation of a graded sample (JudgeClient.graded_sample's copy: metadata.judge_query
    and metadata.verifier_diagnostics) against its definition in common.schema.json."""
    found = sorted(_sample_validator().iter_errors(sample), key=lambda e: list(e.absolute_path))
    return [Violation(_json_path(e.absolute_path), e.message[:200]) for e in found]


def check(name: str, document: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first violations; used by writers so nothing invalid is written."""
    found = reference_violations(name, document)
    if found:
        raise ValueError(f"{name} artifact does not match its schema: " + "; ".join(map(str, found[:3])))
