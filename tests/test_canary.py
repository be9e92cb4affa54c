"""Canaries through real reference judge servers: pass, wrong judge, invalid replies, discovery."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from _judge_server import RunningServer, dead_port

from agent.judges._canary import KNOWN_BAD, KNOWN_GOOD, run_canaries
from agent.judges.client import JudgeClient
from agent.judges.rubrics import resolve_rubric

Factory = Callable[..., RunningServer]


RUBRICS = {
    "quality": resolve_rubric("quality", {"profile": "general-quality", "max_output_tokens": 512, "temperature": 0.0}),
    "quality_ref": resolve_rubric(
        "quality_ref", {"profile": "general-quality-ref", "max_output_tokens": 512, "temperature": 0.0}
    ),
}
# The three-node shape: two verifiers, two rubrics, one judge service.
BINDINGS = {
    "general-quality": {"judge": "general", "rubric": "quality"},
    "general-quality_ref": {"judge": "general", "rubric": "quality_ref"},
}


@pytest.fixture
def clients() -> Iterator[list[JudgeClient]]:
    made: list[JudgeClient] = []
    yield made
    for client in made:
        client.close()


def client(made: list[JudgeClient], url: str, model: str = "judge-model", **options: object) -> JudgeClient:
    options.setdefault("timeout", 10)
    options.setdefault("max_context_length", 32768)
    result = JudgeClient(url, model, **options)  # type: ignore[arg-type]
    made.append(result)
    return result


def test_canaries_pass_against_the_reference_judge(judge_server: Factory, clients: list[JudgeClient]) -> None:
    server = judge_server()
    report = run_canaries(BINDINGS, {"general": client(clients, server.base_url)}, RUBRICS)
    assert report.passed, report.summary()
    assert report.repetitions == 3
    assert [b.verifier for b in report.bindings] == ["general-quality", "general-quality_ref"]
    for binding in report.bindings:
        assert binding.model_listed and binding.passed
        assert len(binding.samples) == 6
        assert [s.answer for s in binding.samples[:2]] == ["known-good", "known-bad"]
        for sample in binding.samples:
            assert sample.score is not None and sample.latency_s is not None and sample.latency_s > 0
            assert sample.reply_excerpt and "SCORE:" in sample.reply_excerpt
    body = report.to_json()
    assert body["passed"] is True and len(body["bindings"]) == 2
    assert body["bindings"][0]["samples"][0]["answer"] == "known-good"


def test_canary_report_matches_the_artifact_schema(judge_server: Factory, clients: list[JudgeClient]) -> None:
    validation = pytest.importorskip("schemas.validation")
    server = judge_server()
    report = run_canaries(BINDINGS, {"general": client(clients, server.base_url)}, RUBRICS, repetitions=1)
    document = {
        "schema": "judge-canaries",
        "schema_version": 1,
        "fingerprint": "0" * 64,
        "rank": 0,
        "incarnation": "test",
        "attempt": 1,
        "writer": "agent",
        "written_at": 0.0,
        **report.to_json(),
    }
    assert validation.violations("judge-canaries", document) == []


def test_wrong_judge_fails_naming_the_binding_and_the_answers(
    judge_server: Factory, clients: list[JudgeClient]
) -> None:
    server = judge_server("--fault", "wrong")
    report = run_canaries(BINDINGS, {"general": client(clients, server.base_url)}, RUBRICS)
    assert not report.passed
    assert [b.passed for b in report.bindings] == [False, False]
    failed = report.bindings[1]
    assert failed.model_listed
    assert "repetition 1: known-good scored" in failed.reason and "not above known-bad" in failed.reason
    assert "SCORE: 10" in failed.reason  # what the judge answered for the known-bad answer
    assert len(failed.samples) == 2  # stops at the first failing repetition, samples kept
    summary = report.summary()
    assert 'binding "general-quality_ref" (judge general, rubric quality_ref)' in summary
    assert 'binding "general-quality" (judge general, rubric quality)' in summary


def test_invalid_replies_fail_with_what_the_judge_said(judge_server: Factory, clients: list[JudgeClient]) -> None:
    server = judge_server("--fault", "invalid")
    report = run_canaries(BINDINGS, {"general": client(clients, server.base_url)}, RUBRICS, repetitions=2)
    binding = report.bindings[0]
    assert not binding.passed
    assert "InvalidGrade" in binding.reason and "rather not give a number" in binding.reason
    assert binding.samples[0].error is not None and binding.samples[0].score is None


def test_model_discovery_must_list_the_judge_model(judge_server: Factory, clients: list[JudgeClient]) -> None:
    server = judge_server(model="served-name")
    report = run_canaries(BINDINGS, {"general": client(clients, server.base_url, model="other-name")}, RUBRICS)
    binding = report.bindings[0]
    assert not binding.model_listed and not binding.passed and binding.samples == ()
    assert "does not list 'other-name'" in binding.reason and "served-name" in binding.reason


def test_unreachable_judge_fails_discovery(clients: list[JudgeClient]) -> None:
    dead = client(clients, f"http://127.0.0.1:{dead_port()}", max_retries=1, backoff_s=0.01)
    report = run_canaries({"general-quality": BINDINGS["general-quality"]}, {"general": dead}, RUBRICS)
    assert not report.passed
    assert report.bindings[0].reason.startswith("model discovery failed: JudgeUnavailable")


def test_unconfigured_rubric_or_judge_fails(judge_server: Factory, clients: list[JudgeClient]) -> None:
    server = judge_server()
    bindings = {
        "general-x": {"judge": "general", "rubric": "missing"},
        "general-y": {"judge": "nope", "rubric": "quality"},
    }
    report = run_canaries(bindings, {"general": client(clients, server.base_url)}, RUBRICS)
    reasons = [b.reason for b in report.bindings]
    assert reasons == ["no rubric 'missing' is configured", "no judge 'nope' is configured"]


def test_repetitions_are_honoured(judge_server: Factory, clients: list[JudgeClient]) -> None:
    server = judge_server()
    report = run_canaries(
        {"general-quality": BINDINGS["general-quality"]},
        {"general": client(clients, server.base_url)},
        RUBRICS,
        5,
    )
    assert len(report.bindings[0].samples) == 10
    assert KNOWN_GOOD != KNOWN_BAD
    with pytest.raises(ValueError):
        run_canaries(BINDINGS, {}, RUBRICS, repetitions=0)
