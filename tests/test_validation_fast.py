"""The compiled validator (jsonschema_rs) decides, jsonschema words: `violations` must equal the
reference's answer on every document, valid or not. Realistic artifacts of every scenario are
mutated (wrong types, deleted and extra keys, trailing newlines, huge numbers, NaN) and both are
asked; a document the compiled one accepts and the reference rejects would be a finding lost."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from schemas import names
from schemas.validation import _fast_ok, reference_violations, violations
from tests.harness.rundirs import SCENARIOS

VALUES: list[Any] = [None, True, 0, -1, 1.0, 2.5, 2**64, 2**80, -(2**70), 1.5e308, float("nan"), float("inf")]
VALUES += ["", "x", "x\n", "\n", "a" * 300, "é", "\u0663", [], [1, "a"], {}, {"a": {"b": []}}]


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    where = rng.choice(_paths(doc))
    parent: Any = doc
    for k in where[:-1]:
        parent = parent[k]
    key, roll = where[-1], rng.random()
    if roll < 0.2 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.3 and isinstance(parent, dict):
        parent["unexpected_key"] = 1
    elif roll < 0.45 and isinstance(parent[key], str):
        parent[key] += rng.choice(["\n", " ", "é", "\u0663", "X"])
    elif roll < 0.55 and type(parent[key]) in (int, float):
        parent[key] = rng.choice([parent[key] * 1.0, parent[key] + 0.5, -parent[key], parent[key] + 2**65])
    else:
        parent[key] = rng.choice(VALUES)
    return doc


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("scenarios")
    out = []
    for name in ("success", "killed_replica", "judge_failure"):  # every kind of record the others have
        path: Path = SCENARIOS[name](root / name).path
        for f in sorted(path.rglob("*.json")):
            schema = names.schema_for(str(f.relative_to(path)))
            if schema is not None:
                out.append((schema, json.loads(f.read_bytes())))
    assert len({s for s, _ in out}) >= 14, sorted({s for s, _ in out})  # most kinds of record
    return out


def test_valid_artifacts_pass_the_compiled_validator(artifacts: list[tuple[str, dict[str, Any]]]) -> None:
    for schema, doc in artifacts:
        assert _fast_ok(schema, doc), (schema, reference_violations(schema, doc))
        assert violations(schema, doc) == []


def test_same_violations_as_the_reference_on_mutated_artifacts(artifacts: list[tuple[str, dict[str, Any]]]) -> None:
    rng = random.Random(24)
    rejected = 0
    for i in range(400):
        schema, doc = rng.choice(artifacts)
        bad = _mutate(doc, rng)
        if i % 3 == 0:
            bad = _mutate(bad, rng)
        reference = reference_violations(schema, bad)
        assert violations(schema, bad) == reference, (schema, bad)
        if reference:
            assert not _fast_ok(schema, bad), ("accepted by jsonschema_rs, rejected by jsonschema", schema, bad)
            rejected += 1
    assert rejected > 150  # the mutations do break documents, so the comparison is not vacuous


def test_values_the_compiled_validator_cannot_take_go_to_the_reference() -> None:
    # Not JSON at all (a set, bytes, a non-string key): never an exception from the fast path.
    for odd in ({"rank": {1, 2}}, {"rank": b"1"}, {1: "x"}, object()):
        assert violations("heartbeat", odd) == reference_violations("heartbeat", odd)
    with pytest.raises(KeyError, match="no schema named 'nope'"):
        violations("nope", {})
