"""Grading parity with open-instruct's MILES judges: its templates read from the installed package (a
stand-in package the test writes, tests/harness/open_instruct_stand_in.py), its lenient reply forms,
the decision format, and invalid replies asked again before they count (real HTTP to a stand-in judge).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from _recording_judge import recording_judge

from agent.judges import _open_instruct as open_instruct
from agent.judges._replies import ReplyFormat, ReplyFormatError, parse_reply
from agent.judges.client import INVALID_REPLY_BACKOFF_S, ContextOverflow, InvalidGrade, JudgeClient, TruncatedGrade
from agent.judges.rubrics import RubricError, resolve_rubric, rubric_from_spec
from tests.harness import open_instruct_stand_in as stand_in

ROOT = Path(__file__).resolve().parent.parent
QUALITY = "open-instruct/general-quality"
VERIFIER = "open-instruct/general-web_instruct_general_verifier"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = stand_in.write(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    return root


def table(profile: str, **extra: object) -> dict[str, object]:
    return {"profile": profile, "max_output_tokens": 64, "temperature": 1.0, **extra}


@pytest.mark.parametrize("layout", ["rewards", "inline", "utils"])
def test_the_template_is_read_from_the_installed_package_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    root = stand_in.write(tmp_path / "site", layout=layout)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    if layout == "utils":  # no table of pins in the package: this project's record of them must match
        with pytest.raises(open_instruct.OpenInstructError, match="prompt drift"):
            open_instruct.read_template(QUALITY)
        return
    found = open_instruct.read_template(QUALITY)  # the stand-in's __init__ raises if it were imported
    assert found.text == stand_in.QUALITY and found.digest == stand_in.sha256(stand_in.QUALITY)
    assert found.pinned_by.startswith("open_instruct/miles/")
    rubric = rubric_from_spec("q", table(QUALITY))
    assert rubric.reply_format is ReplyFormat.JSON and not rubric.uses_reference
    assert rubric.digest == found.digest and rubric.open_instruct is not None
    # The registry carries the text and its pin: a driver without the package resolves the same rubric.
    entry = rubric.to_json()
    assert entry["pinned"] == found.digest and entry["template_source"] == found.source
    assert resolve_rubric("q", entry).digest == rubric.digest
    with pytest.raises(RubricError, match="changed since"):
        resolve_rubric("q", {**entry, "template": entry["template"] + " "})
    verifier = rubric_from_spec("v", table(VERIFIER))
    assert verifier.reply_format is ReplyFormat.DECISION and verifier.uses_reference


def _validate(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(Path(sys.executable).parent / "gym-launch"), "validate", "tests/data/miles/three-node.toml"]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)


def test_a_drifted_package_and_a_missing_one_are_refused_with_what_to_do(tmp_path: Path) -> None:
    missing = _validate()
    assert missing.returncode == 2
    assert "rubrics.quality.profile" in missing.stderr and "pip install open-instruct" in missing.stderr
    assert "template_file" in missing.stderr
    drifted = stand_in.write(tmp_path / "drift", pins={"general-quality": "0" * 64})
    with_drift = _validate({"PATH": "/usr/bin:/bin", **stand_in.env(drifted)})
    assert with_drift.returncode == 2 and "prompt drift" in with_drift.stderr, with_drift.stderr


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"REASONING": "fine", "SCORE": "7"}', 0.7),  # the JSON the template asks for
        ('```json\n{"REASONING": "fine", "SCORE": 6}\n```', 0.6),
        ('<think>hm</think>My grade: "SCORE": 6 because it is right', 0.6),  # "SCORE" inside prose
        ("Correct and clear.\n**SCORE**: 8", 0.8),  # one SCORE line
        ('<answer>{"SCORE": 9}</answer>', 0.9),
    ],
)
def test_open_instructs_lenient_forms_are_read(reply: str, score: float) -> None:
    assert parse_reply(reply, ReplyFormat.JSON).score == score


@pytest.mark.parametrize(
    "reply",
    ["SCORE: 8\nSCORE: 3", '{"SCORE": true}', "A fine answer, I give it eight.", '"SCORE": 11'],
)
def test_ambiguous_or_scoreless_replies_are_invalid_never_zero(reply: str) -> None:
    with pytest.raises(ReplyFormatError):
        parse_reply(reply, ReplyFormat.JSON)


def test_the_decision_format_is_one_yes_or_no_whatever_the_scale() -> None:
    from agent.judges._replies import ScoreScale

    assert parse_reply("Looks equivalent.\nFinal Decision: Yes", ReplyFormat.DECISION, ScoreScale(1, 10)).score == 1.0
    assert parse_reply("final decision: no", ReplyFormat.DECISION).score == 0.0
    assert parse_reply("Final Decision: No. ... Final Decision: no", ReplyFormat.DECISION).score == 0.0
    for bad in ("Final Decision: Yes\nFinal Decision: No", "It is equivalent.", "<think>Final Decision: Yes</think>"):
        with pytest.raises(ReplyFormatError):
            parse_reply(bad, ReplyFormat.DECISION)


def _client(base_url: str, sleeps: list[float], **kw: object) -> JudgeClient:
    return JudgeClient(base_url, "stand-in", timeout=10, sleep=sleeps.append, **kw)  # type: ignore[arg-type]


def test_an_invalid_reply_is_asked_again_1_then_2_seconds_later(installed: Path) -> None:
    rubric = rubric_from_spec("q", table(QUALITY))
    sleeps: list[float] = []
    script = [("I would not give a number.", "stop"), ('{"SCORE": 9', "length")]
    with recording_judge(reply='{"REASONING": "ok", "SCORE": 8}', script=script) as judge:
        grade = _client(judge.base_url, sleeps).grade(rubric, "What is the capital of France?", "Paris.")
        assert len(judge.requests) == 3
        # Exactly open-instruct's request: one user message, the filled template; nothing else.
        assert [m["role"] for m in judge.requests[0]["messages"]] == ["user"]
        assert judge.requests[0]["messages"][0]["content"].lstrip().startswith("Stand-in rubric")
        assert all(r["seed"] == 1 for r in judge.requests)  # open-instruct's default judge seed
    assert grade.score == 0.8 and sleeps == [INVALID_REPLY_BACKOFF_S, 2 * INVALID_REPLY_BACKOFF_S]
    failed = grade.verifier_diagnostics["failed_attempts"]
    assert [f["attempt"] for f in failed] == [1, 2] and failed[1]["finish_reason"] == "length"


def test_invalid_replies_past_the_attempts_are_an_invalid_grade(installed: Path) -> None:
    rubric = rubric_from_spec("q", table(QUALITY, invalid_reply_attempts=2))
    sleeps: list[float] = []
    with recording_judge(reply='{"SCORE": 9', finish_reason="length") as judge:
        with pytest.raises(TruncatedGrade) as exc:
            _client(judge.base_url, sleeps).grade(rubric, "Q?", "A.")
        assert len(judge.requests) == 2 and sleeps == [INVALID_REPLY_BACKOFF_S]
    assert len(exc.value.diagnostics["failed_attempts"]) == 2
    assert isinstance(exc.value, InvalidGrade)


def test_a_context_overflow_is_never_asked_again(judge_server_overflow: str) -> None:
    rubric = rubric_from_spec("q", {"profile": "general-quality", "max_output_tokens": 64, "temperature": 1.0})
    sleeps: list[float] = []
    client = _client(judge_server_overflow, sleeps, max_context_length=70)
    with pytest.raises(ContextOverflow):
        client.grade(rubric, "What is the capital of France? " * 20, "Paris.")
    assert sleeps == []


@pytest.fixture
def judge_server_overflow(tmp_path: Path) -> object:
    from _judge_server import server_factory

    factory = server_factory(tmp_path)
    start = next(factory)
    yield start().base_url
    next(factory, None)
