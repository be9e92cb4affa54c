"""Rubric text the user owns: ``[rubrics.NAME] template_file`` pinned by ``template_sha256``.

The template fills ``{input}``, ``{output}`` and ``{label}`` as open-instruct's judge templates do,
reaches the judge as ONE user message, unchanged otherwise; a bad field or a changed file is refused
naming the file (and the line and field, or both digests) at validate time, when the agent writes
registry.json, and when a driver reads the registry.
"""

from __future__ import annotations

import copy
import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _judge_server import RunningServer
from _recording_judge import recording_judge

from agent.judges._canary import run_canaries
from agent.judges._templates import MAX_TEMPLATE_BYTES, TemplateError, load_template, parse_template
from agent.judges.client import JudgeClient
from agent.judges.rubrics import PROFILES, RubricError, resolve_rubric, rubric_from_spec
from launch._rubric_files import template_problems
from launch.spec.config import RunConfig
from launch.spec.load import load_spec, resolved_from_dict
from launch.spec.validate import validate
from schemas import validation

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rubrics" / "graded-against-reference.txt"
GYM_LAUNCH = ROOT / ".venv" / "bin" / "gym-launch"
Factory = Callable[..., RunningServer]

QUESTION = "What is the capital of France? Answer in {curly} braces if you like."
THINKING = "<think>France... its capital is Paris, I am sure.</think>\nThe capital of France is {Paris}."
REFERENCE = "Paris."


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def spec_table(path: Path, **extra: Any) -> dict[str, Any]:
    table = {
        "template_file": str(path),
        "template_sha256": sha(path),
        "max_output_tokens": 256,
        "temperature": 0.0,
        "reply_format": "json",
        "score_scale": [1, 10],
        "extract_answer": True,
    }
    table.update(extra)
    return table


def registry_document(rubrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": "registry",
        "schema_version": 1,
        "fingerprint": "0" * 64,
        "rank": 0,
        "incarnation": "test",
        "attempt": 1,
        "writer": "agent",
        "written_at": 0.0,
        "judges": {},
        "rubrics": rubrics,
        "bindings": {},
    }


# --- the template language ---------------------------------------------------------------------


def test_each_placeholder_is_filled_and_doubled_braces_are_literal() -> None:
    text = 'Q: {input}\nA: {output}\nR: {label}\nJSON: {{"SCORE": N}} and }} and {{{input}}}\n'
    template = parse_template(text, "t.txt")
    assert template.fields == {"input", "output", "label"} and template.uses_reference
    filled = template.fill(input="q {output}", output="a {label}", label="r {{x}}")
    # A value is inserted as written, never read as a template itself.
    assert filled == 'Q: q {output}\nA: a {label}\nR: r {{x}}\nJSON: {"SCORE": N} and } and {q {output}}\n'
    # The same as Python's str.format on this (trusted) text: open-instruct's semantics.
    assert filled == text.format(input="q {output}", output="a {label}", label="r {{x}}")
    without_label = parse_template("{input} -> {output}", "t.txt")
    assert not without_label.uses_reference
    assert without_label.fill(input="x", output="y") == "x -> y"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("{output}\nGrade {answer} now", 2, "unknown field {answer}"),
        ("{output}\n\n{}", 3, "positional field {}"),
        ("{output} {0}", 1, "positional field {0}"),
        ("{output}\n{input!r}", 2, "field {input!r}: conversions and format specs are not supported"),
        ("{output:>20}", 1, "field {output:>20}"),
        ("{output}\n}", 2, "a single '}'"),
        ("{output}\nopen { here", 2, "a '{' that opens no field"),
        ('{output} {"SCORE": 1}', 1, 'unknown field {"SCORE": 1}'),
    ],
)
def test_a_bad_field_is_refused_naming_the_file_line_and_field(text: str, line: int, fragment: str) -> None:
    with pytest.raises(TemplateError) as info:
        parse_template(text, "/specs/my-rubric.txt")
    message = str(info.value)
    assert f"template /specs/my-rubric.txt: line {line}: " in message and fragment in message, message
    assert {p.key for p in info.value.problems} == {"template_file"}


def test_every_problem_is_reported_at_once_and_a_template_needs_output() -> None:
    with pytest.raises(TemplateError) as info:
        parse_template("{question}\n{response}\n", "t.txt")
    assert len(info.value.problems) == 2
    # open-instruct's factuality template doubles every brace: nothing would reach the judge.
    with pytest.raises(TemplateError, match=r"has no \{output\} field"):
        parse_template("Q: {{input}}\nA: {{output}}\n", "t.txt")


def test_the_file_must_match_its_pin_and_both_digests_are_named(tmp_path: Path) -> None:
    path = tmp_path / "rubric.txt"
    shutil.copy(EXAMPLE, path)
    pinned = sha(path)
    assert load_template(str(path), pinned).digest == pinned  # the digest is of the file's bytes
    path.write_bytes(path.read_bytes().replace(b"most weight", b"least weight"))
    with pytest.raises(TemplateError) as info:
        load_template(str(path), pinned)
    message = str(info.value)
    assert pinned in message and sha(path) in message and str(path) in message
    assert [p.key for p in info.value.problems] == ["template_sha256"]
    (tmp_path / "latin1.txt").write_bytes(b"{output} caf\xe9\n")
    with pytest.raises(TemplateError, match="line 1: not UTF-8"):
        load_template(str(tmp_path / "latin1.txt"), "0" * 64)
    with pytest.raises(TemplateError, match="cannot be read"):
        load_template(str(tmp_path / "missing.txt"), "0" * 64)


# --- the Rubric, the registry entry and the driver's check -------------------------------------


def test_a_template_rubric_records_its_text_and_digest_and_a_driver_rechecks_them() -> None:
    rubric = rubric_from_spec("mine", spec_table(EXAMPLE))
    assert rubric.profile is None and rubric.uses_reference
    assert rubric.digest == sha(EXAMPLE) and rubric.text == EXAMPLE.read_text(encoding="utf-8")
    entry = rubric.to_json()
    assert entry["template_file"] == str(EXAMPLE) and entry["template"] == rubric.text
    assert "profile" not in entry and entry["digest"] == sha(EXAMPLE)
    assert validation.violations("registry", registry_document({"mine": entry})) == []
    # The driver needs no access to the file: the registry carries the text.
    assert resolve_rubric("mine", {**entry, "template_file": "/nowhere/on/this/node.txt"}).digest == rubric.digest
    # A text that changed after the digest was recorded is refused with both digests and the file.
    changed = {**entry, "template": entry["template"] + "Be lenient.\n"}
    with pytest.raises(RubricError) as info:
        resolve_rubric("mine", changed)
    actual = hashlib.sha256(changed["template"].encode()).hexdigest()
    assert entry["digest"] in str(info.value) and actual in str(info.value) and str(EXAMPLE) in str(info.value)
    with pytest.raises(RubricError, match="not both"):
        resolve_rubric("mine", {**entry, "profile": "general-quality"})
    bad_schema = registry_document({"mine": {**entry, "profile": "general-quality"}})
    assert validation.violations("registry", bad_schema) != []


def test_built_in_profiles_are_unchanged() -> None:
    # The digests a registry of an earlier version recorded must still resolve.
    quality = resolve_rubric("q", {"profile": "general-quality", "max_output_tokens": 8, "temperature": 0.0})
    assert quality.digest == PROFILES["general-quality"].digest and quality.template is None
    # The digests before template files existed (the text is byte-identical).
    assert PROFILES["general-quality"].digest == "0f2b4dcc2e177eba93b37a1aea9d2987b5a4a977a346942b6a15cc46b9dc8a79"
    assert PROFILES["general-quality-ref"].digest == "8058d7160fefce9413118ef12e67a8f23339d276c68d58810a80747ee8cc2ebd"
    json_ref = {"profile": "general-quality-ref", "reply_format": "json", "score_scale": [1, 10]}
    json_ref.update(max_output_tokens=8, temperature=0.0)
    assert resolve_rubric("r", json_ref).digest == "2993e3226cc1be35553bb70049381da1c7788c374083877b280e768913560455"
    assert quality.to_json()["profile"] == "general-quality" and "template" not in quality.to_json()
    assert quality.identity() == {"name": "q", "profile": "general-quality", "digest": quality.digest}
    assert validation.violations("registry", registry_document({"q": quality.to_json()})) == []


# --- what the judge receives ---------------------------------------------------------------------


def test_the_judge_receives_the_filled_template_as_one_user_message() -> None:
    rubric = rubric_from_spec("mine", spec_table(EXAMPLE))
    with recording_judge(reply='{"REASONING": "agrees", "SCORE": 9}') as judge:
        with JudgeClient(judge.base_url, judge.model, timeout=10) as client:
            grade = client.grade(rubric, QUESTION, THINKING, REFERENCE)
        (request,) = judge.requests
    expected = EXAMPLE.read_text(encoding="utf-8").format(
        input=QUESTION, output="The capital of France is {Paris}.", label=REFERENCE
    )
    assert request["messages"] == [{"role": "user", "content": expected}]
    assert "<think>" not in expected and "</think>" not in expected
    assert grade.score == pytest.approx(0.9)  # json, SCORE 9 on [1, 10]: 9 / 10
    d = grade.verifier_diagnostics
    assert d["rubric"] == {"name": "mine", "profile": None, "template_file": str(EXAMPLE), "digest": sha(EXAMPLE)}
    assert d["request"]["messages"] == request["messages"]
    assert d["answer"] == {"raw": THINKING, "extracted": "The capital of France is {Paris}.", "rule": "after_think"}


def test_a_template_without_label_sends_no_reference(tmp_path: Path) -> None:
    path = tmp_path / "plain.txt"
    path.write_text("Rate this reply to {input}:\n{output}\nEnd with SCORE: N.\n", encoding="utf-8")
    rubric = rubric_from_spec("plain", spec_table(path, reply_format="score_line", score_scale=[0, 10]))
    assert not rubric.uses_reference
    with recording_judge(reply="Reasoning: fine\nSCORE: 4") as judge:
        with JudgeClient(judge.base_url, judge.model, timeout=10) as client:
            grade = client.grade(rubric, "Q?", "A.", reference="never sent")
        (request,) = judge.requests
    assert request["messages"] == [{"role": "user", "content": "Rate this reply to Q?:\nA.\nEnd with SCORE: N.\n"}]
    assert grade.score == pytest.approx(0.4) and grade.verifier_diagnostics["reference"] is None


def test_the_canary_passes_with_a_template_rubric_on_the_reference_judge(judge_server: Factory) -> None:
    """The reference judge reads the tagged sections of the example template and replies in the
    format and scale the template asks for (JSON, 1 to 10)."""
    server = judge_server()
    rubric = rubric_from_spec("mine", spec_table(EXAMPLE))
    with JudgeClient(server.base_url, server.model, timeout=10, max_context_length=8192) as client:
        report = run_canaries(
            {"general-quality_ref": {"judge": "j", "rubric": "mine"}}, {"j": client}, {"mine": rubric}
        )
    assert report.passed, report.summary()
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


# --- the spec keys -----------------------------------------------------------------------------

DEMO = load_spec(ROOT / "examples" / "demo.toml").data


def with_rubric(table: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(dict(DEMO))
    data["rubrics"]["general-quality-ref"] = table
    return data


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    return {p.key: p.message for p in validate(data)}


def test_profile_or_template_file_never_both_nor_neither() -> None:
    base = {"max_output_tokens": 256}
    both = problems_of(with_rubric({**base, "profile": "general-quality-ref", "template_file": "r.txt"}))
    assert "both set" in both["rubrics.general-quality-ref.profile"]
    assert "is required with template_file" in both["rubrics.general-quality-ref.template_sha256"]
    neither = problems_of(with_rubric(base))
    assert "template_file" in neither["rubrics.general-quality-ref"]
    stray = problems_of(with_rubric({**base, "profile": "general-quality-ref", "template_sha256": "a" * 64}))
    assert "pins a template_file" in stray["rubrics.general-quality-ref.template_sha256"]
    short = problems_of(with_rubric({**base, "template_file": "r.txt", "template_sha256": "abc"}))
    assert "64 lowercase hex" in short["rubrics.general-quality-ref.template_sha256"]
    other = problems_of(with_rubric({**base, "prompt": "Grade it."}))
    assert "template_file" in other["rubrics.general-quality-ref.prompt"]
    fine = {**base, "template_file": "rubrics/r.txt", "template_sha256": "a" * 64}
    assert problems_of(with_rubric(fine)) == {}


def test_a_relative_template_file_resolves_from_the_spec_folder() -> None:
    table = {"template_file": "rubrics/r.txt", "template_sha256": "a" * 64, "max_output_tokens": 256}
    config = RunConfig.from_spec(resolved_from_dict(with_rubric(table), "/specs/here"))
    rubric = config.rubrics["general-quality-ref"]
    assert rubric.template_path(config.spec.base_dir) == "/specs/here/rubrics/r.txt"
    assert rubric.table(config.spec.base_dir)["template_file"] == "/specs/here/rubrics/r.txt"
    absolute = {**table, "template_file": "/abs/r.txt"}
    config = RunConfig.from_spec(resolved_from_dict(with_rubric(absolute), "/specs/here"))
    assert config.rubrics["general-quality-ref"].template_path("/specs/here") == "/abs/r.txt"


def write_spec(tmp_path: Path, template: Path, pinned: str) -> Path:
    text = (ROOT / "examples" / "demo.toml").read_text(encoding="utf-8")
    rel = template.relative_to(tmp_path)
    text = text.replace(
        '[rubrics.general-quality-ref]\nprofile = "general-quality-ref"\n',
        f'[rubrics.general-quality-ref]\ntemplate_file = "{rel}"\ntemplate_sha256 = "{pinned}"\n'
        'reply_format = "json"\nscore_scale = [1, 10]\n',
    )
    assert "template_file" in text
    text = text.replace('"examples/demo_driver.py"', f'"{ROOT / "examples" / "demo_driver.py"}"')
    text = text.replace('"data/', f'"{ROOT / "examples" / "data"}/')
    spec = tmp_path / "run.toml"
    spec.write_text(text, encoding="utf-8")
    return spec


def validate_cli(spec: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GYM_LAUNCH), "validate", str(spec)], capture_output=True, text=True, timeout=60)


def test_gym_launch_validate_refuses_a_changed_template_naming_both_digests(tmp_path: Path) -> None:
    (tmp_path / "rubrics").mkdir()
    template = tmp_path / "rubrics" / "mine.txt"
    shutil.copy(EXAMPLE, template)
    pinned = sha(template)
    spec = write_spec(tmp_path, template, pinned)
    ok = validate_cli(spec)
    assert ok.returncode == 0, ok.stderr
    template.write_bytes(template.read_bytes() + b"Be generous.\n")
    refused = validate_cli(spec)
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "rubrics.general-quality-ref.template_sha256:" in refused.stderr
    assert pinned in refused.stderr and sha(template) in refused.stderr and str(template) in refused.stderr


def test_gym_launch_validate_refuses_an_unknown_field(tmp_path: Path) -> None:
    (tmp_path / "rubrics").mkdir()
    template = tmp_path / "rubrics" / "mine.txt"
    template.write_text("Question: {input}\nAnswer: {output}\nGold: {reference}\n", encoding="utf-8")
    spec = write_spec(tmp_path, template, sha(template))
    refused = validate_cli(spec)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "rubrics.general-quality-ref.template_file:" in refused.stderr
    assert f"template {template}: line 3: unknown field {{reference}}" in refused.stderr, refused.stderr


def test_templates_are_bounded_one_by_one_and_together(tmp_path: Path) -> None:
    """registry.json carries the bound templates' text to the driver in one environment variable."""
    big = tmp_path / "big.txt"
    big.write_text("{output}\n" + "x" * MAX_TEMPLATE_BYTES, encoding="utf-8")
    with pytest.raises(TemplateError, match=f"at most {MAX_TEMPLATE_BYTES}"):
        load_template(str(big), sha(big))
    half = tmp_path / "half.txt"
    half.write_text("{input} {output} {label}\n" + "y" * (MAX_TEMPLATE_BYTES // 2), encoding="utf-8")
    data = copy.deepcopy(dict(DEMO))
    for name in ("general-quality", "general-quality-ref"):
        data["rubrics"][name] = {"template_file": "half.txt", "template_sha256": sha(half), "max_output_tokens": 256}
    config = RunConfig.from_spec(resolved_from_dict(data, str(tmp_path)))
    (problem,) = template_problems(config)
    assert problem.key == "rubrics" and "general-quality (" in problem.message and "together" in problem.message
    data["rubrics"]["general-quality"] = {"profile": "general-quality", "max_output_tokens": 256}
    assert template_problems(RunConfig.from_spec(resolved_from_dict(data, str(tmp_path)))) == []
