"""Judge replies counted independently of the driver's claim: from the managed judge's own access
log (less the canaries' replies) and from grades-RANK.jsonl (its rotated segments too, with `seq`
telling how many lines rotation dropped). Run directories built by the real writers; the grades
lines follow the shared contract (schemas/grade.schema.json, validated where the schema exists)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit._judge_replies import ACCESS_RE, count_access_log
from audit._lines import LineReader
from audit._model import AuditResult
from audit.api import audit_run
from audit.safedir import SafeDir
from schemas import names, validation
from tests.harness.grades import diagnostics
from tests.harness.rundirs import RunBuilder, success
from tests.test_training_evidence import judge_log


def with_claim(root: Path, claimed: int) -> RunBuilder:
    b = success(root)
    doc = json.loads((b.path / names.DRIVER_RESULT).read_text())
    fields = {k: doc[k] for k in ("optimizer_steps", "losses", "final_loss", "policy_version", "policy_refreshes")}
    b.write(names.DRIVER_RESULT, b.driver_rank, {**fields, "judge_replies": claimed}, kind="driver")
    return b


def canaries(b: RunBuilder, replies_per_binding: int) -> None:
    """judge-canaries.json whose samples carry the judge's reply excerpts (as agent/judges/_canary.py writes)."""
    sample = {"repetition": 0, "answer": "known-good", "score": 0.9, "reply_excerpt": "SCORE: 9", "latency_s": 0.1}
    b.write(
        names.CANARIES,
        b.head_rank,
        {
            "passed": True,
            "repetitions": replies_per_binding,
            "bindings": [
                {
                    "verifier": x.verifier,
                    "judge": x.judge,
                    "rubric": x.rubric,
                    "model_listed": True,
                    "passed": True,
                    "reason": "ok",
                    "samples": [sample] * replies_per_binding + [{**sample, "reply_excerpt": None, "score": None}],
                }
                for x in b.config.bindings
            ],
        },
    )


def grade_line(seq: int, *, replied: bool = True, outcome: str = "graded", judge: str = "general") -> dict[str, Any]:
    """One line as the judge client library writes it (schemas/grade.schema.json)."""
    return {
        "schema": "grade",
        "schema_version": 1,
        "seq": seq,
        "writer": "0123456789ab",
        "pid": 4242,
        "at": "2026-12-01T10:00:00.000Z",
        "rank": 1,
        "binding": "general-quality",
        "judge": judge,
        "rubric": {"name": "general-quality", "digest": "0" * 64},
        "outcome": outcome,
        "score": 0.7 if outcome == "graded" else None,
        "replied": replied,
        "error": None if outcome == "graded" else f"{outcome} reply",
        "diagnostics": diagnostics() if outcome == "graded" else {},
    }


def write_grades(b: RunBuilder, rank: int, segment: int, lines: list[dict[str, Any]]) -> None:
    lines = [{**x, "rank": rank} for x in lines]  # a file holds its own rank's grades
    if "grade" in validation.schema_names():  # the writer's schema (helper B's part of issue 22)
        for line in lines:
            assert not validation.violations("grade", line), validation.violations("grade", line)
    (b.path / names.grades(rank, segment)).write_text("".join(json.dumps(x) + "\n" for x in lines))


def found(result: AuditResult, code: str) -> str:
    (f,) = [f for f in result.findings if f.code == code]
    return f"{f.severity}: {f.message}"


def test_a_claim_above_what_the_judge_answered_is_an_error(tmp_path: Path) -> None:
    b = with_claim(tmp_path, 30)
    judge_log(b, 16)
    canaries(b, 3)  # 3 replies per binding, 2 bindings: 6 of the 16 were the agent's canaries
    result = audit_run(b.path)
    message = found(result, "judge_replies.claim_exceeds")
    assert message.startswith("error: the driver claims 30 judge replies, but the judges answered at most 10")
    assert "16 chat completion(s) answered 200 in judge-general-2.log, less 6 canary replies" in message
    assert result.judge_replies is not None
    assert result.judge_replies["judges"]["general"]["server_driver_replies"] == 10


def test_an_exact_claim_passes_and_one_below_warns(tmp_path: Path) -> None:
    b = with_claim(tmp_path / "exact", 10)
    judge_log(b, 16)
    canaries(b, 3)
    result = audit_run(b.path)
    assert result.verdict == "pass" and not result.codes("warning"), result.findings
    b = with_claim(tmp_path / "below", 4)
    judge_log(b, 16)
    canaries(b, 3)
    result = audit_run(b.path)
    assert result.verdict == "pass"
    assert found(result, "judge_replies.claim_below").startswith("warning: the driver claims 4 judge replies")


def test_failed_requests_are_not_replies(tmp_path: Path) -> None:
    b = with_claim(tmp_path, 3)
    judge_log(b, 5, status=400)  # refused (overflow): the judge answered nothing
    assert "judge_replies.claim_exceeds" in audit_run(b.path).codes("error")


def test_without_access_lines_or_grades_the_claim_is_unchecked(tmp_path: Path) -> None:
    result = audit_run(with_claim(tmp_path, 24).path)  # the builder's judge log has no access lines
    assert result.verdict == "pass"
    assert found(result, "judge_replies.unchecked").startswith("info: the driver's claim of 24")
    assert result.judge_replies is not None and result.judge_replies["independent"] is None


def test_grades_files_count_replies_and_the_lines_rotation_dropped(tmp_path: Path) -> None:
    b = with_claim(tmp_path, 9)
    # Rank 1's driver: seq 1-3 rotated away entirely, 4-6 in segment 1, 7-9 current. One refused
    # request (no reply): replied lines 5 seen, 3 lost (maybe replies): at most 8 < 9.
    write_grades(b, 1, 1, [grade_line(4), grade_line(5, replied=False, outcome="unavailable"), grade_line(6)])
    write_grades(b, 1, 0, [grade_line(7), grade_line(8, outcome="invalid"), grade_line(9, outcome="truncated")])
    result = audit_run(b.path)
    counts = result.judge_replies
    assert counts is not None
    general = counts["judges"]["general"]
    assert (general["grades_replied"], general["grades_lines"], general["grades_lost_to_rotation"]) == (5, 6, 3)
    assert counts["grades_files"] == [names.grades(1, 1), names.grades(1, 0)]
    assert "5 replied grade(s) in grades-RANK.jsonl, 3 line(s) lost to rotation" in found(
        result, "judge_replies.claim_exceeds"
    )
    assert not result.codes("info") & {"file.unknown"}  # grades files are part of the run directory
    b = with_claim(tmp_path / "ok", 7)
    write_grades(b, 1, 1, [grade_line(4), grade_line(5, replied=False, outcome="unavailable"), grade_line(6)])
    write_grades(b, 1, 0, [grade_line(7), grade_line(8, outcome="invalid"), grade_line(9, outcome="truncated")])
    assert audit_run(b.path).verdict == "pass"


def test_the_server_log_wins_over_grades_for_a_managed_judge(tmp_path: Path) -> None:
    b = with_claim(tmp_path, 12)
    judge_log(b, 12)  # the driver's own client (MILES') wrote no grades for 10 of them
    write_grades(b, 0, 0, [grade_line(1), grade_line(2)])
    result = audit_run(b.path)
    assert result.verdict == "pass", [f.to_json() for f in result.errors]


@pytest.mark.parametrize(
    ("line", "counted"),
    [
        (b'INFO:     10.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK', True),
        (b'[2026-12-01 10:00:00] INFO:   127.0.0.1:5 - "POST /v1/chat/completions?x=1 HTTP/1.1" 200 OK', True),
        (b'2026-12-01T10:00:00.000Z INFO: 127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 0.010s', True),
        (b'INFO:     10.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable', False),
        (b'INFO:     10.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK', False),
        (b"POST /v1/chat/completions 200", False),
    ],
)
def test_access_lines(tmp_path: Path, line: bytes, counted: bool) -> None:
    (tmp_path / "judge-general-0.log").write_bytes(b"noise\n" + line + b"\n")
    with SafeDir(tmp_path) as safe:
        n = count_access_log(safe, "judge-general-0.log", [])
    assert n == (1 if counted else (0 if ACCESS_RE.search(line) else None))


def test_reading_is_bounded_per_line_and_per_file(tmp_path: Path) -> None:
    chat = b'INFO:     10.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    # An endless line (a progress bar without newlines, 9 MiB) between access lines.
    (tmp_path / "big.log").write_bytes(chat + b"x" * (9 << 20) + b"\n" + chat * 3 + b"tail without newline")
    with SafeDir(tmp_path) as safe:
        reader = LineReader(safe, "big.log", cap=1 << 30)
        lines = list(reader.lines())
        assert reader.skipped == 1 and not reader.truncated
        assert lines == [chat.rstrip(b"\n")] * 4 + [b"tail without newline"]
        assert count_access_log(safe, "big.log", []) == 4
        short = LineReader(safe, "big.log", cap=1 << 20)
        assert list(short.lines()) == [chat.rstrip(b"\n")] and short.truncated
