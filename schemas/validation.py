"""Validate artifacts against the JSON Schemas shipped in this package (draft 2020-12)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_VERSION = 1
URN = "urn:gym-agent:"


@dataclass(frozen=True)
class Violation:
    """One schema violation: where in the document (a JSON path) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def schema_names() -> tuple[str, ...]:
    files = resources.files(__package__).iterdir()
    names = sorted(f.name.removesuffix(".schema.json") for f in files if f.name.endswith(".schema.json"))
    return tuple(n for n in names if n != "common")


@functools.cache
def _registry() -> Registry:
    resources_ = []
    for f in resources.files(__package__).iterdir():
        if f.name.endswith(".schema.json"):
            doc = json.loads(f.read_text(encoding="utf-8"))
            resources_.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources_)


@functools.cache
def validator(name: str) -> Draft202012Validator:
    if name not in schema_names():
        raise KeyError(f"no schema named {name!r}; known: {', '.join(schema_names())}")
    schema = _registry().get_or_retrieve(URN + name).value.contents
    return Draft202012Validator(schema, registry=_registry())


def _json_path(parts: Any) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def violations(name: str, document: Any) -> list[Violation]:
    """Every violation of `document` against schema `name`, most specific first."""
    found: Iterator[Any] = validator(name).iter_errors(document)
    out = []
    for err in sorted(found, key=lambda e: list(e.absolute_path), reverse=False):
        reason = err.message if len(err.message) <= 200 else err.message[:197] + "..."
        out.append(Violation(_json_path(err.absolute_path), reason))
    return out


@functools.cache
def _sample_validator() -> Draft202012Validator:
    return Draft202012Validator({"$ref": URN + "common#/$defs/graded_sample"}, registry=_registry())


def sample_violations(sample: Any) -> list[Violation]:
    """Every violation of a graded sample (JudgeClient.graded_sample's copy: metadata.judge_query
    and metadata.verifier_diagnostics) against its definition in common.schema.json."""
    found = sorted(_sample_validator().iter_errors(sample), key=lambda e: list(e.absolute_path))
    return [Violation(_json_path(e.absolute_path), e.message[:200]) for e in found]


def check(name: str, document: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first violations; used by writers so nothing invalid is written."""
    found = violations(name, document)
    if found:
        raise ValueError(f"{name} artifact does not match its schema: " + "; ".join(map(str, found[:3])))
