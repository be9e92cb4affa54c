"""Context enforcement per judge (`[judges.NAME] context_check`): counted by the judge's /tokenize
and refused above its context, or left to the service; an external service without /tokenize
grades with "none" (seed 000: its context is externally owned)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _judge_server import RunningServer

from agent.judges._bindings import bindings_from_registry
from agent.judges._canary import KNOWN_GOOD, QUESTION
from agent.judges.client import JudgeRequestError
from launch.spec.config import RunConfig
from launch.spec.load import load_spec, resolved_from_dict
from launch.spec.validate import validate

ROOT = Path(__file__).resolve().parent.parent
THREE_NODE = load_spec(ROOT / "examples" / "three-node.toml").data
Factory = Callable[..., RunningServer]


def judges_of(data: dict[str, Any]) -> dict[str, Any]:
    return dict(RunConfig.from_spec(resolved_from_dict(data)).judges)


def test_the_default_follows_the_mode_and_a_choice_is_kept() -> None:
    data = copy.deepcopy(dict(THREE_NODE))
    managed = next(n for n, t in data["judges"].items() if t["mode"] == "managed")
    data["judges"]["ext"] = {"mode": "external", "model": "m", "endpoint": "http://127.0.0.1:9/v1"}
    judges = judges_of(data)
    assert judges[managed].context_check == "tokenize" and judges["ext"].context_check == "none"
    data["judges"]["ext"]["context_check"] = "tokenize"
    data["judges"][managed]["context_check"] = "none"
    judges = judges_of(data)
    assert judges[managed].context_check == "none" and judges["ext"].context_check == "tokenize"
    data["judges"]["ext"]["context_check"] = "count"
    problems = {p.key: p.message for p in validate(data)}
    assert "judges.ext.context_check" in problems and "tokenize" in problems["judges.ext.context_check"]


def registry(server: RunningServer, context_check: str | None) -> dict[str, Any]:
    judge: dict[str, Any] = {
        "mode": "external",
        "model": server.model,
        "endpoint": server.base_url + "/v1",
        "timeout": 10,
        "max_context_length": 32768,
        "max_concurrent_calls": 2,
    }
    if context_check is not None:
        judge["context_check"] = context_check
    rubric = {"profile": "general-quality", "max_output_tokens": 256, "temperature": 0.0}
    return {
        "judges": {"ext": judge},
        "rubrics": {"q": rubric},
        "bindings": {"general-quality": {"judge": "ext", "rubric": "q"}},
    }


def test_an_external_judge_without_tokenize_grades_with_none(judge_server: Factory) -> None:
    server = judge_server("--fault", "no-tokenize")
    sample = {"metadata": {"judge_query": QUESTION}}
    bound = bindings_from_registry(registry(server, "none"))["general-quality"]
    grade = bound.grade_sample(sample, KNOWN_GOOD)
    assert 0 < grade.score <= 1 and grade.verifier_diagnostics["prompt_tokens"] is None
    # Counting needs /tokenize: the service refuses it and nothing is graded on a guess.
    for check in ("tokenize", None):  # None: a registry from before the key counts, as it always did
        counting = bindings_from_registry(registry(server, check))["general-quality"]
        with pytest.raises(JudgeRequestError, match="/tokenize -> HTTP 404"):
            counting.grade_sample(sample, KNOWN_GOOD)
