"""The configuration reference is generated from the model: docs/spec.md is current, and the
JSON Schema `gym-launch schema` prints accepts every example and refuses what the resolver refuses."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from launch.spec.reference import DOC_PATH, run_spec_schema, spec_markdown

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted([*ROOT.glob("examples/*.toml"), *ROOT.glob("examples/**/*.toml"), *ROOT.glob("tests/data/miles/*.toml")])


def validator() -> Draft202012Validator:
    schema = run_spec_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_docs_spec_md_is_current() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == spec_markdown(), (
        "docs/spec.md is stale: run python -m launch.spec.reference"
    )


def test_docs_name_every_default_and_the_decisions() -> None:
    text = spec_markdown()
    for needle in ("`startup_timeout` | seconds | `1200`", "`timeout` | integer | `600`", "`max_concurrent_calls`"):
        assert needle in text
    assert "MILES run files" in text and "max_response_tokens" in text


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_schema_accepts_every_example(path: Path) -> None:
    doc = json.loads(json.dumps(tomllib.loads(path.read_text())))
    errors = sorted(validator().iter_errors(doc), key=str)
    assert not errors, errors[0].message


@pytest.mark.parametrize(
    "change",
    [
        {"trainer": {"gpus_per_node": 4, "gpu_per_node": 1}},
        {"launch": {"gpus_per_replica": 100}},
        {"judges": {"general": {"mode": "external", "model": "m", "endpoint": "http://j:1/v1", "gpus": 1}}},
        {"judges": {"general": {"mode": "external", "model": "m"}}},
    ],
)
def test_schema_refuses_what_the_resolver_refuses(change: dict) -> None:
    doc = tomllib.loads((ROOT / "examples/three-node.toml").read_text())
    for section, value in change.items():
        doc[section] = value
    assert list(validator().iter_errors(json.loads(json.dumps(doc))))


def test_gym_launch_schema_prints_it() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "gym-launch"), "schema"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert json.loads(out.stdout) == run_spec_schema()
