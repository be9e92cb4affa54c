"""Reply formats and score scales (agent/judges/_replies.py), and the client grading through a real
reference judge server in each format and scale, with answer extraction on and off."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _judge_server import RunningServer

from agent.judges._canary import KNOWN_GOOD, QUESTION
from agent.judges._replies import ReplyFormat, ReplyFormatError, ScoreScale, parse_reply
from agent.judges.client import InvalidGrade, JudgeClient
from agent.judges.rubrics import PROFILES, Rubric
from schemas.validation import sample_violations

Factory = Callable[..., RunningServer]
JSON = ReplyFormat.JSON
ONE_TO_TEN = ScoreScale(1, 10)


@pytest.mark.parametrize(
    ("reply", "raw", "reasoning"),
    [
        ('{"REASONING": "close", "SCORE": 7}', 7.0, "close"),
        ('```json\n{"REASONING": "fenced", "SCORE": "8"}\n```', 8.0, "fenced"),
        ('Sure! {"reasoning": "lower-case keys", "score": 3.5} Hope that helps.', 3.5, "lower-case keys"),
        # the last object with a SCORE wins: an earlier one may be quoted material
        ('{"SCORE": 1} then {"note": "x"} and finally {"REASONING": "r", "SCORE": 9}', 9.0, "r"),
        ('<think>{"SCORE": 2}</think>{"SCORE": 6}', 6.0, ""),
    ],
)
def test_json_replies(reply: str, raw: float, reasoning: str) -> None:
    parsed = parse_reply(reply, JSON)
    assert (parsed.raw_score, parsed.score, parsed.reasoning) == (raw, raw / 10, reasoning)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ('{"REASONING": "no score here"}', "no JSON object with a 'SCORE' key"),
        ("SCORE: 7\nSCORE: 8", "ambiguous"),  # open-instruct's lone-line form takes exactly one
        ('{"SCORE": true}', "not a number"),
        ('{"SCORE": "seven"}', "not a number"),
        ('{"SCORE": null}', "not a number"),
        ('{"SCORE": 11}', "outside 0..10"),
        ('{"SCORE": -1}', "outside 0..10"),
        ('{"REASONING": "cut off"', "no JSON object"),  # truncated mid-object, before any score
    ],
)
def test_invalid_json_replies(reply: str, message: str) -> None:
    with pytest.raises(ReplyFormatError, match=message):
        parse_reply(reply, JSON)


def test_scales_bound_the_score_and_set_the_reward() -> None:
    assert parse_reply("SCORE: 10", scale=ONE_TO_TEN).score == 1.0
    assert parse_reply("SCORE: 1", scale=ONE_TO_TEN).score == pytest.approx(0.1)  # open-instruct's 1-10 / 10
    with pytest.raises(ReplyFormatError, match="outside 1..10"):
        parse_reply("SCORE: 0", scale=ONE_TO_TEN)
    assert parse_reply('{"SCORE": 1}', JSON, ScoreScale(0, 1)).score == 1.0
    with pytest.raises(ValueError, match="0 <= MIN < MAX"):
        ScoreScale(10, 1)
    with pytest.raises(ValueError, match="0 <= MIN < MAX"):
        ScoreScale(-1, 1)


ZERO_TO_TEN = ScoreScale(0, 10)


def rubric(fmt: ReplyFormat = ReplyFormat.SCORE_LINE, scale: ScoreScale = ZERO_TO_TEN, **kw: object) -> Rubric:
    return Rubric(
        "r",
        PROFILES["general-quality-ref"],
        512,
        0.0,
        reply_format=fmt,
        score_scale=scale,
        **kw,  # type: ignore[arg-type]
    )


def client(server: RunningServer) -> JudgeClient:
    return JudgeClient(server.base_url, server.model, timeout=10, max_context_length=32768)


@pytest.mark.parametrize(
    ("fmt", "scale"),
    [(ReplyFormat.SCORE_LINE, (0, 10)), (ReplyFormat.JSON, (1, 10)), (ReplyFormat.JSON, (0, 1))],
)
def test_grading_through_a_real_judge_in_each_format_and_scale(
    judge_server: Factory, fmt: ReplyFormat, scale: tuple[int, int]
) -> None:
    server = judge_server("--reply-format", fmt.value, "--score-scale", str(scale[0]), str(scale[1]))
    with client(server) as c:
        good = c.grade(rubric(fmt, ScoreScale(*scale)), QUESTION, "Paris.", "Paris.")
        bad = c.grade(rubric(fmt, ScoreScale(*scale)), QUESTION, "Bananas are yellow.", "Paris.")
    assert good.score == 1.0 and bad.score == scale[0] / scale[1]
    assert good.verifier_diagnostics["reply_format"] == fmt.value
    assert good.verifier_diagnostics["score_scale"] == list(scale)


def test_a_reply_in_the_other_format_is_an_invalid_grade_not_a_zero(judge_server: Factory) -> None:
    server = judge_server("--reply-format", "json")
    with client(server) as c, pytest.raises(InvalidGrade, match="no 'SCORE: N' line") as info:
        c.grade(rubric(ReplyFormat.SCORE_LINE), QUESTION, KNOWN_GOOD, "Paris.")
    assert '"SCORE"' in info.value.diagnostics["raw_reply"]
    server = judge_server("--score-scale", "0", "100")
    with client(server) as c, pytest.raises(InvalidGrade, match="outside 0..10"):
        c.grade(rubric(), QUESTION, KNOWN_GOOD, "Paris.")


def test_the_judge_grades_the_extracted_answer(judge_server: Factory) -> None:
    """The reference judge scores content-word overlap, so reasoning that reaches it lowers the grade."""
    server = judge_server()
    musing = "<think>Hmm, maybe Lyon or Marseille; bananas, trains and weather first.</think>\n"
    with client(server) as c:
        plain = c.grade(rubric(), QUESTION, KNOWN_GOOD, "Paris.")
        thought = c.grade(rubric(), QUESTION, musing + KNOWN_GOOD, "Paris.")
        verbatim = c.grade(rubric(extract_answer=False), QUESTION, musing + KNOWN_GOOD, "Paris.")
    assert thought.score == plain.score > verbatim.score
    answer = thought.verifier_diagnostics["answer"]
    assert answer == {"raw": musing + KNOWN_GOOD, "extracted": KNOWN_GOOD.strip(), "rule": "after_think"}
    assert verbatim.verifier_diagnostics["answer"]["rule"] == "disabled"


def test_a_graded_sample_carries_its_evidence(judge_server: Factory) -> None:
    server = judge_server(model="org/judge")
    sample = {"ground_truth": ["Paris."], "metadata": {"judge_query": QUESTION, "source": "kept"}}
    with client(server) as c:
        grade, graded = c.graded_sample(rubric(), sample, "<think>hm</think> Paris.")
    assert sample["metadata"] == {"judge_query": QUESTION, "source": "kept"}  # the input is not changed
    meta = graded["metadata"]
    assert meta["judge_query"] == QUESTION and meta["source"] == "kept" and graded["ground_truth"] == ["Paris."]
    diag = meta["verifier_diagnostics"]
    assert diag["score"] == grade.score == 1.0
    assert diag["reference"] == "Paris."
    assert diag["answer"]["extracted"] == "Paris."
    assert diag["model"] == {"requested": "org/judge", "served": "org/judge", "endpoint": server.base_url}
    sent = diag["request"]["messages"]
    assert sent[0]["content"] == rubric().text and "Paris." in sent[1]["content"] and "hm" not in sent[1]["content"]
    assert diag["rubric"]["digest"] == rubric().digest and diag["raw_reply"].endswith("SCORE: 10")
    assert {"retries", "latency_s", "reasoning", "finish_reason"} <= set(diag)
    assert not sample_violations(graded), sample_violations(graded)  # common.schema.json's graded_sample
    broken = {**graded, "metadata": {**meta, "verifier_diagnostics": {**diag, "answer": {"raw": "x"}}}}
    assert {v.path for v in sample_violations(broken)} == {"$.metadata.verifier_diagnostics.answer"}


def test_a_rubric_names_its_format_and_scale_and_its_digest_covers_them() -> None:
    from agent.judges.rubrics import RubricError, resolve_rubric

    base = {"profile": "general-quality", "max_output_tokens": 256, "temperature": 0.0}
    default = resolve_rubric("q", base)
    assert default.text == PROFILES["general-quality"].text  # the built-in text, unchanged
    one_to_ten = resolve_rubric("q", {**base, "reply_format": "json", "score_scale": [1, 10]})
    assert '{"REASONING"' in one_to_ten.text and "an integer from 1 to 10" in one_to_ten.text
    assert "Use the whole scale: 1 = wrong" in one_to_ten.text
    assert len({default.digest, one_to_ten.digest, resolve_rubric("q", {**base, "score_scale": [0, 1]}).digest}) == 3
    entry = one_to_ten.to_json()
    assert entry["reply_format"] == "json" and entry["score_scale"] == [1, 10] and entry["extract_answer"] is True
    assert resolve_rubric("q", entry) == one_to_ten  # the registry entry round-trips
    with pytest.raises(RubricError, match="does not match"):
        resolve_rubric("q", {**entry, "score_scale": [0, 10]})  # the text recorded was another scale's
    for bad, where in (({"reply_format": "xml"}, "reply_format"), ({"score_scale": [10, 1]}, "score_scale")):
        with pytest.raises(RubricError, match=where):
            resolve_rubric("q", {**base, **bad})


def test_the_reference_judge_replies_as_the_rubric_asks(judge_server: Factory) -> None:
    """No fixed format: the server follows the rubric's instructions, as a model would."""
    server = judge_server()
    asked = rubric(JSON, ONE_TO_TEN)
    with client(server) as c:
        good = c.grade(asked, QUESTION, "Paris.", "Paris.")
        bad = c.grade(asked, QUESTION, "Bananas are yellow.", "Paris.")
    assert good.verifier_diagnostics["raw_reply"].startswith("```json")
    assert (good.verifier_diagnostics["raw_score"], bad.verifier_diagnostics["raw_score"]) == (10, 1)
    assert (good.score, bad.score) == (1.0, pytest.approx(0.1))
