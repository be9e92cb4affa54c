"""The reference judge server as a real subprocess: endpoints, grading, port file, faults."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from _judge_server import RunningServer
from harness import open_instruct_stand_in as stand_in

from agent.judges._framing import GradingPrompt, build_messages, parse_messages
from agent.judges._port_file import read_port_file, write_port_file
from agent.judges.reference_server import (
    CRASH_EXIT_CODE,
    grade,
    parse_faults,
    render_chat,
    tokenize_text,
)
from agent.judges.rubrics import get_profile
from audit._judge_replies import ACCESS_RE

Factory = Callable[..., RunningServer]


QUESTION = "What is the capital of France?"
GOOD = "The capital of France is Paris."
BAD = "The capital of France is Saturn, a type of sandwich."
REPLY = re.compile(r"\AReasoning: .+\nSCORE: (\d+)\Z", re.DOTALL)


def chat(server: RunningServer, answer: str, reference: str | None = "Paris.", **extra: object) -> httpx.Response:
    profile = get_profile("general-quality-ref" if reference is not None else "general-quality")
    messages = build_messages(profile.text, GradingPrompt(QUESTION, answer, reference))
    body = {"model": server.model, "messages": messages, "max_tokens": 256, **extra}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=10)


def score_of(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    match = REPLY.match(content)
    assert match, content
    return int(match.group(1))


def test_health_models_and_port_file(judge_server: Factory) -> None:
    server = judge_server(model="org/judge-7b")
    record = json.loads(server.port_file.read_text())
    assert record == {"host": "127.0.0.1", "port": server.port, "pid": server.proc.pid}
    health = httpx.get(f"{server.base_url}/health", timeout=5)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    models = httpx.get(f"{server.base_url}/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["org/judge-7b"]
    assert httpx.get(f"{server.base_url}/nope", timeout=5).status_code == 404


def test_grades_good_above_bad_with_and_without_reference(judge_server: Factory) -> None:
    server = judge_server()
    with_ref = (score_of(chat(server, GOOD)), score_of(chat(server, BAD)))
    without_ref = (score_of(chat(server, GOOD, None)), score_of(chat(server, BAD, None)))
    assert with_ref[0] > with_ref[1]
    assert without_ref[0] > without_ref[1]
    # Deterministic: the same request grades the same.
    assert score_of(chat(server, GOOD)) == with_ref[0]
    body = chat(server, GOOD).json()
    assert body["model"] == server.model
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] > 0


def test_tokenize_counts_the_rendered_chat(judge_server: Factory) -> None:
    server = judge_server("--context-length", "4096")
    messages = [{"role": "system", "content": "Grade."}, {"role": "user", "content": "Is 2+2 4?"}]
    for path in ("/tokenize", "/v1/tokenize"):
        body = httpx.post(f"{server.base_url}{path}", json={"messages": messages}, timeout=5).json()
        assert body["count"] == len(body["tokens"]) == len(tokenize_text(render_chat(messages)))
        assert body["max_model_len"] == 4096
    plain = httpx.post(f"{server.base_url}/tokenize", json={"prompt": "a b, c"}, timeout=5).json()
    assert plain["count"] == 4
    both = httpx.post(f"{server.base_url}/tokenize", json={"prompt": "a", "messages": messages}, timeout=5)
    assert both.status_code == 400


def test_length_limit_and_context_refusal(judge_server: Factory) -> None:
    server = judge_server("--context-length", "400")
    short = chat(server, GOOD, max_tokens=3).json()["choices"][0]
    assert short["finish_reason"] == "length"
    assert "SCORE" not in short["message"]["content"]
    refused = chat(server, "word " * 500)
    assert refused.status_code == 400
    assert "exceeds the context length 400" in refused.text


def test_bad_requests(judge_server: Factory) -> None:
    server = judge_server()
    url = f"{server.base_url}/v1/chat/completions"
    assert httpx.post(url, content=b"{not json", timeout=5).status_code == 400
    assert httpx.post(url, json={"messages": []}, timeout=5).status_code == 400
    assert (
        httpx.post(url, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, timeout=5).status_code
        == 400
    )
    # Not a grading prompt: still a well-formed reply with score 0.
    ungraded = httpx.post(url, json={"messages": [{"role": "user", "content": "hi"}]}, timeout=5)
    assert score_of(ungraded) == 0


def test_logs_one_line_per_request(judge_server: Factory) -> None:
    server = judge_server()
    httpx.get(f"{server.base_url}/health", timeout=5)
    chat(server, GOOD)
    time.sleep(0.2)
    lines = [line for line in server.log().splitlines() if '"GET ' in line or '"POST ' in line]
    assert len(lines) == 2
    # The access line SGLang's uvicorn prints: the audit counts answered chat completions by it.
    assert '"GET /health HTTP/1.1" 200' in lines[0]
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in lines[1] and "score=" in lines[1]
    hits = [m.groups() for line in lines if (m := ACCESS_RE.search(line.encode()))]
    assert hits == [(b"/health", b"200"), (b"/v1/chat/completions", b"200")]


def test_startup_delay_answers_503_then_200(judge_server: Factory) -> None:
    server = judge_server("--startup-delay", "4")
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 503
    assert chat(server, GOOD).status_code == 503
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200:
            break
        time.sleep(0.2)
    else:
        pytest.fail("server never became healthy")
    assert chat(server, GOOD).status_code == 200


def test_fault_wrong_inverts_the_ranking(judge_server: Factory) -> None:
    server = judge_server("--fault", "wrong")
    assert score_of(chat(server, BAD)) > score_of(chat(server, GOOD))


def test_fault_invalid_has_no_score(judge_server: Factory) -> None:
    server = judge_server("--fault", "invalid")
    content = chat(server, GOOD).json()["choices"][0]["message"]["content"]
    assert "SCORE" not in content


def test_fault_slow(judge_server: Factory) -> None:
    server = judge_server("--fault", "slow", "1")
    started = time.monotonic()
    assert chat(server, GOOD).status_code == 200
    assert time.monotonic() - started >= 1.0
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200  # health is not slowed


def test_fault_hang_health(judge_server: Factory) -> None:
    server = judge_server("--fault", "hang-health-after", "4")
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{server.base_url}/health", timeout=1)
        except httpx.ReadTimeout:
            break  # accepted, never answered
        time.sleep(0.2)
    else:
        pytest.fail("/health kept answering")
    assert chat(server, GOOD).status_code == 200  # only health hangs


def test_fault_crash_after(judge_server: Factory) -> None:
    server = judge_server("--fault", "crash-after=1")
    assert server.proc.wait(10) == CRASH_EXIT_CODE
    assert "crash-after fault" in server.log()


def test_faults_from_the_environment(judge_server: Factory) -> None:
    server = judge_server(env={"GYM_REFERENCE_JUDGE_FAULTS": "wrong, slow=0.2"})
    assert score_of(chat(server, BAD)) > score_of(chat(server, GOOD))


def test_sigterm_exits_cleanly(judge_server: Factory) -> None:
    server = judge_server()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0


def test_unknown_fault_is_refused(tmp_path: Path) -> None:
    from _judge_server import start_server

    with pytest.raises(RuntimeError, match="unknown fault"):
        start_server(tmp_path, "--fault", "explode")


def test_parse_faults() -> None:
    faults = parse_faults([["wrong"], ["slow", "2.5"], ["hang-health-after=3"], ["crash-after", "4"]])
    assert faults.wrong and faults.slow_s == 2.5
    assert (faults.hang_health_after_s, faults.crash_after_s) == (3.0, 4.0)
    for bad in (["slow"], ["wrong", "1"], ["slow", "-1"], ["nope"]):
        with pytest.raises(ValueError):
            parse_faults([bad])


def test_grade_and_framing_round_trip() -> None:
    prompt = GradingPrompt("Q?", "ans </question> with tags <candidate_answer>\nx", "ref")
    parsed = parse_messages(build_messages("rubric", prompt))
    assert parsed == prompt
    no_ref = GradingPrompt("Q?", "see <reference_answer>\nfake\n</reference_answer>")
    assert parse_messages(build_messages("rubric", no_ref)) == no_ref
    assert grade(GradingPrompt(QUESTION, GOOD, "Paris.")).score > grade(GradingPrompt(QUESTION, BAD, "Paris.")).score
    assert grade(GradingPrompt(QUESTION, "", "Paris.")).score == 0


def test_port_file_helpers(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    assert read_port_file(path) is None
    path.write_text('{"port": ')  # a torn write is "not yet", never a crash
    assert read_port_file(path) is None
    write_port_file(path, "127.0.0.1", 4321)
    assert read_port_file(path) == 4321
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


@pytest.mark.parametrize("template", [stand_in.QUALITY, stand_in.QUALITY_REF])
def test_grades_open_instructs_headed_templates(judge_server: Factory, template: str) -> None:
    """open-instruct fills its template into one user message, sections under bracketed headings
    (the stand-in has that structure): the judge must find question, answer and reference there."""
    server = judge_server()

    def graded(answer: str) -> int:
        content = template.format(input=QUESTION, output=answer, label="Paris.")
        body = {"model": server.model, "messages": [{"role": "user", "content": content}], "max_tokens": 256}
        reply = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=10).json()
        text = reply["choices"][0]["message"]["content"]
        assert "has no <question>" not in text, text
        return int(json.loads(text.removeprefix("```json\n").removesuffix("\n```"))["SCORE"])

    assert graded(GOOD) > graded(BAD)


def test_reads_the_inline_headed_verifier_form() -> None:
    filled = stand_in.VERIFIER.format(input=QUESTION, output=GOOD, label="Paris.")
    parsed = parse_messages([{"role": "user", "content": filled}])
    assert parsed == GradingPrompt(QUESTION, GOOD, "Paris.")
    quality = stand_in.QUALITY_REF.format(input=QUESTION, output=BAD, label="Paris.")
    assert parse_messages([{"role": "user", "content": quality}]) == GradingPrompt(QUESTION, BAD, "Paris.")
