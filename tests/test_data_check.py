"""Dataset-to-judge compatibility checks on real JSONL files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launch.spec.data_check import DataError, binding_snippet, check_data

BINDINGS = {
    "general-quality": {"judge": "general", "rubric": "quality"},
    "general-quality_ref": {"judge": "general", "rubric": "quality_ref"},
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def judged(verifier: str, query: str | None = "Q?") -> dict[str, Any]:
    row: dict[str, Any] = {"verifier": verifier, "messages": [{"role": "user", "content": "Q?"}]}
    if query is not None:
        row["metadata"] = {"judge_query": query}
    return row


def test_all_judged_verifiers_bound(tmp_path: Path) -> None:
    train = write_jsonl(
        tmp_path / "train.jsonl",
        [
            judged("general-quality"),
            {"verifier": "math"},
            {"verifier": ["code", "general-quality_ref"], "metadata": {"judge_query": "Q"}},
        ],
    )
    evaluation = write_jsonl(tmp_path / "eval.jsonl", [judged("general-quality_ref"), {"verifier": "ifeval"}])
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
    assert [(f.split, f.rows) for f in report.files] == [("train", 3), ("eval", 2)]
    assert report.unused_bindings == ()
    assert "data check passed" in report.text()


def test_missing_binding_names_the_verifier_and_the_entry(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [{"verifier": "math"}, judged("general-helpfulness")])
    report = check_data([train], None, BINDINGS)
    assert not report.ok
    assert report.missing_bindings == ("general-helpfulness",)
    message = report.problems[0].message
    assert '[judging.bindings."general-helpfulness"]' in message
    assert f"{train}:2" in message
    assert binding_snippet("general-helpfulness") in message


def test_unused_bindings_are_reported_not_errors(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [{"verifier": "math"}])
    report = check_data(train, None, BINDINGS)
    assert report.ok
    assert report.unused_bindings == ("general-quality", "general-quality_ref")
    assert 'note: binding "general-quality" is not used by the data' in report.text()
    assert report.to_json()["unused_bindings"] == ["general-quality", "general-quality_ref"]


def test_no_judges_no_bindings(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [{"verifier": "math"}, {"verifier": "code"}])
    assert check_data(train, [], {}).ok


def test_judged_rows_need_a_judge_query(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [judged("general-quality"), judged("general-quality", None)])
    report = check_data(train, None, BINDINGS)
    assert not report.ok
    assert "1 row(s) lack metadata.judge_query" in report.problems[0].message
    assert f"{train}:2" in report.problems[0].message


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        check_data(tmp_path / "absent.jsonl", None, BINDINGS)


def test_unreadable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot be read"):
        check_data(tmp_path, None, BINDINGS)  # a directory


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text('{"verifier": "math"}\n\n{"verifier": \n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:3: not valid JSON"):
        check_data(path, None, BINDINGS)


@pytest.mark.parametrize("row", ['["a"]', '{"verifier": 3}', '{"verifier": []}', '{"x": 1}'])
def test_malformed_rows(tmp_path: Path, row: str) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text(row + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:1"):
        check_data(None, path, BINDINGS)
