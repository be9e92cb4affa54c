"""The audit reads grades-RANK.jsonl line by line (each line against the grade schema) and names a
judge_degraded first cause with its binding, in every report."""

from __future__ import annotations

import io
import json
from pathlib import Path

from agent.judges._alarm import DegradedAlarm
from agent.judges._grade_log import GradeLog
from agent.judges._recorder import GradeRecorder
from agent.judges.rubrics import resolve_rubric
from audit._load import load_run
from audit._report_html import render as render_html
from audit._report_json import render as render_json
from audit._report_text import render as render_text
from audit.api import audit_run
from audit.safedir import SafeDir
from schemas import names
from schemas.vocab import GradeOutcome
from tests.harness.grades import diagnostics
from tests.harness.rundirs import RunBuilder, judge_degraded, success

RUBRIC = resolve_rubric("general-quality", {"profile": "general-quality", "max_output_tokens": 256, "temperature": 1.0})


def _grades(b: RunBuilder, rank: int, outcomes: list[GradeOutcome], *, max_bytes: int = 1 << 20) -> None:
    rec = GradeRecorder(
        GradeLog(b.path, rank, max_bytes=max_bytes, keep=3),
        DegradedAlarm(),
        rank=rank,
        attempt=1,
        fingerprint=b.fingerprint,
        stderr=io.StringIO(),
    )
    for outcome in outcomes:
        graded = outcome is GradeOutcome.GRADED
        rec.record(
            binding="general-quality",
            judge="general",
            rubric=RUBRIC,
            outcome=outcome,
            score=0.7 if graded else None,
            error=None if graded else f"{outcome}: x",
            diagnostics=diagnostics(pad="p" * 200),
        )
    rec.close()


def test_valid_grades_files_pass_and_every_line_is_kept(tmp_path: Path) -> None:
    b = success(tmp_path)
    _grades(b, b.driver_rank, [GradeOutcome.GRADED] * 30 + [GradeOutcome.UNAVAILABLE], max_bytes=4096)
    result = audit_run(b.path)
    errors = [f for f in result.findings if f.severity == "error"]
    assert result.verdict == "pass", errors
    assert not any(f.code == "file.unknown" for f in result.findings)
    with SafeDir(b.path) as safe:
        run = load_run(safe)
    lines = run.jsonl_lines("grade")
    assert len(run.jsonl) > 1  # rotated: several segments, all read
    seqs = sorted(line["seq"] for _, line in lines)
    assert seqs == list(range(seqs[0], 32))  # the kept segments: one run of seq up to the last grade
    assert sum(1 for _, line in lines if not line["replied"]) == 1
    assert all("diagnostics" not in line for _, line in lines)


def test_bad_lines_are_findings_that_name_their_line(tmp_path: Path) -> None:
    b = success(tmp_path)
    _grades(b, b.driver_rank, [GradeOutcome.GRADED] * 3)
    path = b.path / names.grades(b.driver_rank)
    good = path.read_bytes().splitlines()
    wrong_rank = json.loads(good[0])
    wrong_rank["rank"] = b.driver_rank + 1
    no_score = json.loads(good[1])
    no_score["score"] = None  # graded without a score: the schema refuses it
    straggler = json.loads(good[2])
    straggler["attempt"] = 7  # an earlier attempt's driver still writing after the archive
    with path.open("ab") as f:
        f.write(json.dumps(straggler).encode() + b"\n")
        f.write(b"not json\n")
        f.write(json.dumps(no_score).encode() + b"\n")
        f.write(json.dumps(wrong_rank).encode() + b"\n")
        f.write(b'{"schema": "grade", "seq"')  # torn: the writer died mid-line
    result = audit_run(b.path)
    found = {(f.code, f.message.split(":")[0]) for f in result.findings if f.file == names.grades(b.driver_rank)}
    assert ("json.invalid", "line 5") in found
    assert ("schema.violation", "line 6") in found
    assert ("grades.torn_line", "line 8 has no end (an interrupted write); not counted") in found
    assert any(code == "record.other_attempt" for code, _ in found)
    assert any(code == "header.rank" for code, _ in found)
    assert result.verdict == "fail"


def test_a_planted_symlink_grades_file_is_refused(tmp_path: Path) -> None:
    b = success(tmp_path)
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    (b.path / names.grades(0)).symlink_to(outside)
    result = audit_run(b.path)
    assert any(f.code == "file.symlink" and f.file == names.grades(0) for f in result.findings)


def test_judge_degraded_is_the_first_cause_with_its_binding(tmp_path: Path) -> None:
    b = judge_degraded(tmp_path)
    result = audit_run(b.path)
    fc = result.first_cause
    assert result.verdict == "fail" and fc is not None
    assert (fc.kind, fc.rank, fc.binding, fc.judge) == ("judge_degraded", b.driver_rank, "general-quality", "general")
    doc = json.loads(render_json(result))
    assert doc["first_cause"]["kind"] == "judge_degraded" and doc["first_cause"]["binding"] == "general-quality"
    text = render_text(result)
    assert "judge_degraded" in text and "binding general-quality (judge general)" in text
    assert "seq 39 invalid" in text  # the bad replies the cause shows
    assert 'id="binding"' in render_html(result)
