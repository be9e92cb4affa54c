"""Dataset-to-judge compatibility checks on real JSONL files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launch.spec.data_check import DataError, binding_snippet, check_data

BINDINGS = {
    "general-quality": {"judge": "general", "rubric": "quality", "profile": "open-instruct/general-quality"},
    "general-quality_ref": {
        "judge": "general",
        "rubric": "quality_ref",
        "profile": "open-instruct/general-quality_ref",
    },
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def row(*names: str, query: str | None = "Q?", target: str | None = "A.") -> dict[str, Any]:
    """A row in the trainer's prepared shape: verifiers under metadata.verifiers."""
    verifiers = [{"name": n} if target is None else {"name": n, "target": target} for n in names]
    metadata: dict[str, Any] = {"verifiers": verifiers}
    if query is not None:
        metadata["judge_query"] = query
    return {"messages": [{"role": "user", "content": "Q?"}], "metadata": metadata}


def test_all_judged_verifiers_bound(tmp_path: Path) -> None:
    train = write_jsonl(
        tmp_path / "train.jsonl",
        [row("general-quality", target=None), row("math", query=None), row("code", "general-quality_ref"), {"x": 1}],
    )
    evaluation = write_jsonl(tmp_path / "eval.jsonl", [row("general-quality_ref"), row("ifeval")])
    report = check_data(train, evaluation, BINDINGS)
    assert report.ok, report.text()
    assert report.judged_verifiers == ("general-quality", "general-quality_ref")
    assert report.verifier_rows == {
        "general-quality": 1,
        "math": 1,
        "code": 1,
        "general-quality_ref": 2,
        "ifeval": 1,
    }
    assert [(f.split, f.rows) for f in report.files] == [("train", 4), ("eval", 2)]
    assert report.unused_bindings == ()
    assert "data check passed" in report.text()


def test_missing_binding_names_the_verifier_and_the_entry(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [row("math"), row("general-helpfulness")])
    report = check_data([train], None, {})
    assert not report.ok
    assert report.missing_bindings == ("general-helpfulness",)
    message = report.problems[0].message
    assert '[judging.bindings."general-helpfulness"]' in message
    assert f"{train}:2" in message
    assert binding_snippet("general-helpfulness") in message


def test_unused_bindings_fail_as_in_the_trainer(tmp_path: Path) -> None:
    """The trainer refuses a binding no train/eval row uses; so do we, naming it and the fix."""
    train = write_jsonl(tmp_path / "train.jsonl", [row("math")])
    report = check_data(train, None, BINDINGS)
    assert not report.ok
    assert report.unused_bindings == ("general-quality", "general-quality_ref")
    assert 'binding "general-quality" is used by no train/eval row' in report.text()
    assert '[judging.bindings."general-quality_ref"]' in report.text()
    assert report.to_json()["unused_bindings"] == ["general-quality", "general-quality_ref"]


def test_top_level_verifier_is_refused_with_the_shape_to_use(tmp_path: Path) -> None:
    """The trainer reads metadata.verifiers only: the old top-level field would be silently unjudged."""
    train = write_jsonl(tmp_path / "train.jsonl", [row("math"), {"verifier": "general-quality"}])
    with pytest.raises(DataError, match=rf"{train}:2: the trainer reads verifier names from metadata.verifiers"):
        check_data(train, None, BINDINGS)


def test_no_judges_no_bindings(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [row("math"), row("code")])
    assert check_data(train, [], {}).ok


def test_judged_rows_need_a_judge_query(tmp_path: Path) -> None:
    train = write_jsonl(
        tmp_path / "train.jsonl",
        [row("general-quality", "general-quality_ref"), row("general-quality", "general-quality_ref", query=None)],
    )
    report = check_data(train, None, BINDINGS)
    assert not report.ok
    assert "1 row(s) lack metadata.judge_query" in report.problems[0].message
    assert f"{train}:2" in report.problems[0].message


def test_reference_rubric_rows_need_a_target(tmp_path: Path) -> None:
    """Every open-instruct profile but general-quality grades against the row's target."""
    train = write_jsonl(
        tmp_path / "train.jsonl",
        [row("general-quality", target=None), row("general-quality_ref"), row("general-quality_ref", target="")],
    )
    report = check_data(train, None, BINDINGS)
    assert [p.verifier for p in report.problems] == ["general-quality_ref"]
    assert 'lack a reference "target"' in report.problems[0].message
    assert f"{train}:3" in report.problems[0].message


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        check_data(tmp_path / "absent.jsonl", None, BINDINGS)


def test_unreadable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot be read"):
        check_data(tmp_path, None, BINDINGS)  # a directory


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row("math")) + '\n\n{"metadata": \n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:3: not valid JSON"):
        check_data(path, None, BINDINGS)


@pytest.mark.parametrize(
    "line",
    [
        '["a"]',
        '{"metadata": 3}',
        '{"metadata": {"verifiers": "math"}}',
        '{"metadata": {"verifiers": [{"target": "5"}]}}',
        '{"metadata": {"verifiers": [{"name": ""}]}}',
    ],
)
def test_malformed_rows(tmp_path: Path, line: str) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:1"):
        check_data(None, path, BINDINGS)
