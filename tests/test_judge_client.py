"""The judge client against the real reference server: grades, diagnostics, overflow, invalid
grades, retries and timeouts."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from _judge_server import RunningServer, dead_port
from _recording_judge import recording_judge

from agent.judges._bindings import bindings_from_registry
from agent.judges._canary import KNOWN_BAD as BAD  # the canary's own question and answer pair
from agent.judges._canary import KNOWN_GOOD as GOOD
from agent.judges._canary import QUESTION
from agent.judges._framing import GradingPrompt, build_messages
from agent.judges.client import (
    ContextOverflow,
    InvalidGrade,
    JudgeClient,
    JudgeRequestError,
    JudgeUnavailable,
    normalize_endpoint,
    reference_from_sample,
)
from agent.judges.rubrics import PROFILES, Rubric, RubricError, parse_reply, resolve_rubric

Factory = Callable[..., RunningServer]

QUALITY = resolve_rubric("quality", {"profile": "general-quality", "max_output_tokens": 512, "temperature": 0.0})
QUALITY_REF = resolve_rubric(
    "quality_ref", {"profile": "general-quality-ref", "max_output_tokens": 256, "temperature": 0.0}
)


def client_for(server: RunningServer, **options: object) -> JudgeClient:
    options.setdefault("timeout", 10)
    options.setdefault("max_context_length", 32768)
    return JudgeClient(server.base_url + "/v1", server.model, **options)  # type: ignore[arg-type]


def chat_lines(server: RunningServer) -> list[str]:
    return [line for line in server.log().splitlines() if "POST /v1/chat/completions" in line]


def test_grade_returns_score_and_diagnostics(judge_server: Factory) -> None:
    server = judge_server(model="org/judge")
    with client_for(server) as client:
        good = client.grade(QUALITY_REF, QUESTION, GOOD, "Paris.")
        bad = client.grade(QUALITY_REF, QUESTION, BAD, "Paris.")
    assert 0.0 <= bad.score < good.score <= 1.0
    diag = good.verifier_diagnostics
    assert diag["raw_reply"].endswith(f"SCORE: {round(good.score * 10)}")
    assert diag["reasoning"].startswith("The candidate shares")
    assert diag["rubric"] == {
        "name": "quality_ref",
        "profile": "general-quality-ref",
        "digest": QUALITY_REF.digest,
    }
    assert diag["model"]["served"] == "org/judge" and diag["model"]["requested"] == "org/judge"
    assert diag["retries"] == 0
    assert diag["latency_s"] > 0
    assert diag["prompt_tokens"] > 0 and diag["finish_reason"] == "stop"


def test_grade_sample_uses_judge_query_and_label(judge_server: Factory) -> None:
    server = judge_server()
    sample = {
        "verifier": "general-quality_ref",
        "ground_truth": ["Paris."],
        "metadata": {"judge_query": QUESTION},
    }
    with client_for(server) as client:
        grade = client.grade_sample(QUALITY_REF, sample, GOOD)
        assert grade.score > client.grade_sample(QUALITY_REF, sample, BAD).score
        with pytest.raises(ValueError, match="judge_query"):
            client.grade_sample(QUALITY, {"metadata": {}}, GOOD)
        with pytest.raises(ValueError, match="needs a reference"):
            client.grade(QUALITY_REF, QUESTION, GOOD)
    assert reference_from_sample({"label": "x"}) == "x"
    assert reference_from_sample({"ground_truth": ["a", "b"]}) is None


def test_list_models(judge_server: Factory) -> None:
    server = judge_server(model="m-1")
    with client_for(server) as client:
        assert client.list_models() == ["m-1"]


def test_context_overflow_is_rejected_without_truncation(judge_server: Factory) -> None:
    server = judge_server()
    long_answer = "Paris is the capital. " * 300
    messages = build_messages(QUALITY.text, GradingPrompt(QUESTION, long_answer))
    with client_for(server) as probe:
        full, _ = probe.count_tokens(messages)
    reserve = QUALITY.max_output_tokens
    # Exactly fitting is accepted...
    with client_for(server, max_context_length=full + reserve) as client:
        assert client.grade(QUALITY, QUESTION, long_answer).verifier_diagnostics["prompt_tokens"] == full
    # The server logs a request after answering it: wait for the accepted grade's line.
    deadline = time.monotonic() + 10
    while not chat_lines(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    before = len(chat_lines(server))
    assert before == 1
    # ...one token short is refused, counting the whole request plus the reservation.
    with (
        client_for(server, max_context_length=full + reserve - 1) as client,
        pytest.raises(ContextOverflow) as info,
    ):
        client.grade(QUALITY, QUESTION, long_answer)
    assert (info.value.prompt_tokens, info.value.reserved, info.value.limit) == (
        full,
        reserve,
        full + reserve - 1,
    )
    assert "not truncated" in str(info.value)
    time.sleep(0.2)
    assert len(chat_lines(server)) == before  # nothing was sent for grading


def test_reply_cut_by_length_is_invalid(judge_server: Factory) -> None:
    server = judge_server()
    tiny = Rubric("tiny", PROFILES["general-quality"], max_output_tokens=4, temperature=0.0)
    with client_for(server) as client, pytest.raises(InvalidGrade, match="finish_reason='length'") as info:
        client.grade(tiny, QUESTION, GOOD)
    assert info.value.diagnostics["finish_reason"] == "length"
    assert info.value.diagnostics["raw_reply"]


def test_reply_without_score_is_invalid(judge_server: Factory) -> None:
    server = judge_server("--fault", "invalid")
    with client_for(server) as client, pytest.raises(InvalidGrade, match="no 'SCORE: N' line") as info:
        client.grade(QUALITY, QUESTION, GOOD)
    assert "rather not give a number" in info.value.diagnostics["raw_reply"]


def test_exhausted_transport_retries_raise() -> None:
    waits: list[float] = []
    client = JudgeClient(
        f"http://127.0.0.1:{dead_port()}",
        "m",
        timeout=2,
        max_context_length=None,
        max_retries=2,
        sleep=waits.append,
    )
    with client, pytest.raises(JudgeUnavailable, match="after 3 attempt") as info:
        client.grade(QUALITY, QUESTION, GOOD)
    assert "ConnectError" in str(info.value)
    assert info.value.diagnostics["retries"] == 2
    assert waits == [0.5, 1.0]  # exponential backoff between attempts


def test_retryable_503_then_success(judge_server: Factory) -> None:
    server = judge_server("--startup-delay", "3")
    with client_for(server, max_retries=20, backoff_s=0.3, max_backoff_s=0.6) as client:
        grade = client.grade(QUALITY, QUESTION, GOOD)
    assert grade.verifier_diagnostics["retries"] >= 1


def test_timeout_is_per_request(judge_server: Factory) -> None:
    server = judge_server("--fault", "slow", "4")
    started = time.monotonic()
    with (
        client_for(server, timeout=0.5, max_retries=0) as client,
        pytest.raises(JudgeUnavailable, match="ReadTimeout"),
    ):
        client.grade(QUALITY, QUESTION, GOOD)
    assert time.monotonic() - started < 3.5  # the 0.5 s timeout fired, not the 4 s reply
    # The same server answers when the timeout allows it: the timeout, not the server, failed.
    with client_for(server, timeout=10, max_retries=0) as client:
        assert client.grade(QUALITY, QUESTION, GOOD).score > 0


def test_server_refusal_is_not_retried(judge_server: Factory) -> None:
    server = judge_server("--context-length", "300")
    waits: list[float] = []
    with (
        client_for(server, max_context_length=None, sleep=waits.append) as client,
        pytest.raises(JudgeRequestError),
    ):
        client.grade(QUALITY, QUESTION, GOOD)  # the server refuses prompt + 512 > 300
    assert waits == []


def test_bindings_from_registry(judge_server: Factory) -> None:
    server = judge_server(model="judge-a")
    registry = {
        "judges": {
            "general": {
                "endpoint": server.base_url,
                "model": "judge-a",
                "timeout": 30,
                "max_context_length": 8192,
                "max_concurrent_calls": 4,
            }
        },
        "rubrics": {"quality_ref": QUALITY_REF.to_json()},
        "bindings": {"general-quality_ref": {"judge": "general", "rubric": "quality_ref"}},
    }
    bound = bindings_from_registry(registry)["general-quality_ref"]
    sample = {"ground_truth": "Paris.", "metadata": {"judge_query": QUESTION}}
    try:
        assert bound.grade_sample(sample, GOOD).score > bound.grade_sample(sample, BAD).score
    finally:
        bound.client.close()
    tampered = {**registry, "rubrics": {"quality_ref": {**QUALITY_REF.to_json(), "digest": "0" * 64}}}
    with pytest.raises(RubricError, match="does not match"):
        bindings_from_registry(tampered)


def test_rubric_profiles_and_parsing() -> None:
    assert {"general-quality", "general-quality-ref"} <= set(PROFILES)
    assert PROFILES["general-quality"].digest != PROFILES["general-quality-ref"].digest
    assert len(QUALITY.digest) == 64
    parsed = parse_reply("<think>\nSCORE: 1\n</think>\nReasoning: fine.\nSCORE: 7")
    assert (parsed.raw_score, parsed.score, parsed.reasoning) == (7.0, 0.7, "fine.")
    with pytest.raises(ValueError):
        parse_reply("SCORE: 11")
    with pytest.raises(RubricError):
        resolve_rubric("x", {"profile": "nope"})
    assert normalize_endpoint("http://h:1/v1/") == "http://h:1"


def test_requests_carry_what_open_instructs_client_sends() -> None:
    """open-instruct's MILES judge client sends ``seed`` (1 by default) with each grading request and
    ``add_generation_prompt: true`` to /tokenize, and retries an HTTP 500; a real server records ours."""
    with (
        recording_judge(count=40, statuses=[500, 500], reply="Close to the reference.\nSCORE: 7") as judge,
        JudgeClient(
            judge.base_url + "/v1", judge.model, timeout=10, max_context_length=4096, sleep=lambda _s: None
        ) as client,
    ):
        grade = client.grade(QUALITY_REF, QUESTION, GOOD, "Paris.")
    assert grade.score == 0.7 and grade.verifier_diagnostics["retries"] == 2
    assert len(judge.requests) == 3 and all(r["seed"] == 1 for r in judge.requests)
    assert judge.requests[0]["messages"] == judge.tokenize_requests[0]["messages"]
    assert [t["add_generation_prompt"] for t in judge.tokenize_requests] == [True]


def test_a_persistent_500_is_unavailable_after_the_retries() -> None:
    with (
        recording_judge(count=40, statuses=[500] * 4) as judge,
        JudgeClient(
            judge.base_url + "/v1",
            judge.model,
            timeout=10,
            max_context_length=4096,
            max_retries=3,
            sleep=lambda _s: None,
        ) as client,
        pytest.raises(JudgeUnavailable, match="HTTP 500"),
    ):
        client.grade(QUALITY_REF, QUESTION, GOOD, "Paris.")
    assert len(judge.requests) == 4
