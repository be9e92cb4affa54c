"""grades-RANK.jsonl and the degraded-judge alarm, against the real reference judge server: every
outcome recorded and schema-valid, rotation that keeps seq, the size cap, concurrent writers,
planted symlinks and FIFOs, the alarm's threshold (trips at it, not below) and its record."""

from __future__ import annotations

import io
import os
import pickle
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from _judge_server import RunningServer, dead_port

from agent.judges._alarm import BadReply, DegradedAlarm, allowance
from agent.judges._bindings import bindings_from_registry
from agent.judges._canary import KNOWN_GOOD as GOOD
from agent.judges._canary import QUESTION
from agent.judges._grade_log import GradeLog, RotatingLog
from agent.judges._recorder import GradeRecorder
from agent.judges.client import (
    ContextOverflow,
    InvalidGrade,
    JudgeClient,
    JudgeDegraded,
    JudgeRequestError,
    JudgeUnavailable,
    TruncatedGrade,
)
from agent.judges.rubrics import PROFILES, Rubric, resolve_rubric
from schemas import DriverEnv, RunDir, names, violations
from schemas.vocab import GradeOutcome
from tests.harness.grades import diagnostics

Factory = Callable[..., RunningServer]
QUALITY = resolve_rubric("quality", {"profile": "general-quality", "max_output_tokens": 256, "temperature": 0.0})
FP = "f" * 64


def lines_of(path: Path) -> list[dict[str, Any]]:
    """Every line of a grades file, each validated against the grade schema."""
    out = []
    for raw in path.read_bytes().splitlines():
        doc = orjson.loads(raw)
        assert not violations("grade", doc), violations("grade", doc)
        out.append(doc)
    return out


def recorder_in(run_dir: Path, *, max_bytes: int = 1 << 20, keep: int = 3, **alarm: Any) -> GradeRecorder:
    return GradeRecorder(
        GradeLog(run_dir, 0, max_bytes=max_bytes, keep=keep),
        DegradedAlarm(**alarm),
        rank=0,
        attempt=1,
        fingerprint=FP,
        stderr=io.StringIO(),
    )


def client_for(server: RunningServer, recorder: GradeRecorder | None, **options: Any) -> JudgeClient:
    options.setdefault("timeout", 10)
    options.setdefault("max_context_length", 32768)
    return JudgeClient(server.base_url, server.model, name="general", recorder=recorder, **options)


# -- the window -------------------------------------------------------------------------------------


def _feed(alarm: DegradedAlarm, outcomes: list[GradeOutcome]) -> list[int]:
    """Add outcomes in order; the 1-based positions at which the alarm tripped."""
    trips = []
    for i, outcome in enumerate(outcomes, 1):
        bad = BadReply(i, "t", outcome, f"reply {i}", "stop", "x") if outcome.bad_reply else None
        if alarm.add("b", "general", "quality", outcome, bad) is not None:
            trips.append(i)
    return trips


G, B, T = GradeOutcome.GRADED, GradeOutcome.INVALID, GradeOutcome.TRUNCATED  # good, bad (invalid), truncated


def test_the_alarm_trips_at_the_threshold_and_not_below() -> None:
    assert allowance(100, 0.05) == 5 and allowance(100, 0.07) == 7 and allowance(30, 0.05) == 1
    # 5 bad in a full window of 100: not tripped; the 6th (the oldest, good, leaves) trips.
    alarm = DegradedAlarm(100, 0.05)
    assert _feed(alarm, [G] * 95 + [B, T, B, T, B]) == []
    assert _feed(alarm, [T]) == [1]
    trip = alarm.tripped("b")
    assert trip is not None and (trip.bad, trip.replies, trip.allowed) == (6, 100, 5)
    assert [b.outcome for b in trip.bad_replies] == [B, T]  # the last two bad replies
    assert "6 of its last 100 replies" in trip.message() and "'reply 100'" in trip.message()
    assert _feed(alarm, [B] * 10) == []  # tripped once, stays tripped


def test_bad_replies_that_left_the_window_do_not_count() -> None:
    alarm = DegradedAlarm(100, 0.05)
    # 5 bad, 95 good, then a bad one: the first bad reply has left the window -> still 5.
    assert _feed(alarm, [B] * 5 + [G] * 95 + [B]) == []
    # One more: the 2nd bad reply leaves as this one enters -> 5 again, and so on.
    assert _feed(alarm, [B] * 4) == []
    assert alarm.tripped("b") is None


def test_a_window_not_yet_full_counts_against_the_same_allowance() -> None:
    assert _feed(DegradedAlarm(100, 0.05), [B] * 6) == [6]
    assert _feed(DegradedAlarm(100, 0.05), [G, B, G, B, B, G, B, B, G, B]) == [10]
    assert _feed(DegradedAlarm(100, 0.05), [B] * 5) == []


def test_only_replies_count_and_the_ends_of_the_share() -> None:
    no_reply = [GradeOutcome.OVERFLOW, GradeOutcome.UNAVAILABLE, GradeOutcome.REFUSED] * 10
    assert _feed(DegradedAlarm(100, 0.0), no_reply) == []
    assert _feed(DegradedAlarm(100, 0.0), [G, G, T]) == [3]  # 0: the first bad reply trips
    assert _feed(DegradedAlarm(100, 1.0), [B] * 300) == []  # 1: never
    assert _feed(DegradedAlarm(10, 0.05), [G] * 9 + [B]) == [10]  # floor(0.5) = 0 allowed


# -- every outcome, one schema-valid line each -----------------------------------------------------


def test_every_outcome_is_recorded_before_it_is_raised(tmp_path: Path, judge_server: Factory) -> None:
    good = judge_server()
    invalid = judge_server("--fault", "invalid")
    small = judge_server("--context-length", "300")
    rec = recorder_in(tmp_path)
    tiny = Rubric("tiny", PROFILES["general-quality"], max_output_tokens=4, temperature=0.0)
    with client_for(good, rec) as client:
        assert client.grade(QUALITY, QUESTION, GOOD, binding="general-quality").score > 0
        with pytest.raises(TruncatedGrade):
            client.grade(tiny, QUESTION, GOOD, binding="general-quality")
    with client_for(good, rec, max_context_length=64) as client, pytest.raises(ContextOverflow):
        client.grade(QUALITY, QUESTION, GOOD, binding="general-quality")
    with client_for(invalid, rec) as client, pytest.raises(InvalidGrade):
        client.grade(QUALITY, QUESTION, GOOD, binding="general-quality")
    with client_for(small, rec, max_context_length=None) as client, pytest.raises(JudgeRequestError):
        client.grade(QUALITY, QUESTION, GOOD, binding="general-quality")
    dead = JudgeClient(f"http://127.0.0.1:{dead_port()}", "m", timeout=2, max_retries=0, name="gone", recorder=rec)
    with dead, pytest.raises(JudgeUnavailable):
        dead.grade(QUALITY, QUESTION, GOOD)
    rec.close()
    lines = lines_of(tmp_path / names.grades(0))
    assert [x["outcome"] for x in lines] == ["graded", "truncated", "overflow", "invalid", "refused", "unavailable"]
    assert [x["seq"] for x in lines] == [1, 2, 3, 4, 5, 6]
    assert [x["replied"] for x in lines] == [True, True, False, True, False, False]
    first = lines[0]
    assert first["binding"] == "general-quality" and first["judge"] == "general"
    assert first["rubric"] == {"name": "quality", "digest": QUALITY.digest}
    assert first["diagnostics"]["raw_reply"].startswith("Reasoning:") and first["error"] is None
    assert lines[1]["diagnostics"]["finish_reason"] == "length" and lines[1]["score"] is None
    assert lines[2]["diagnostics"]["answer"]["raw"] == GOOD  # which sample overflowed
    assert "rather not give a number" in lines[3]["diagnostics"]["raw_reply"]
    assert lines[4]["diagnostics"]["status"] == 400
    assert lines[5]["binding"] is None and lines[5]["judge"] == "gone" and "ConnectError" in lines[5]["error"]
    assert all(x["fingerprint"] == FP and x["rank"] == 0 and x["writer"] == rec.writer for x in lines)


def test_long_strings_are_shortened_and_no_credential_is_written(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server()
    rec = recorder_in(tmp_path)
    answer = "Paris " * 3000  # 18000 characters
    client = JudgeClient(
        f"http://user:secret@127.0.0.1:{server.port}", server.model, timeout=10, name="general", recorder=rec
    )
    with client:
        client.grade(QUALITY, QUESTION, answer)
    rec.close()
    (line,) = lines_of(tmp_path / names.grades(0))
    assert line["shortened"] is True
    assert line["diagnostics"]["answer"]["raw"].endswith("more chars cut]")
    assert len(line["diagnostics"]["answer"]["raw"]) < 4200
    assert len(orjson.dumps(line)) < 40_000
    assert b"secret" not in (tmp_path / names.grades(0)).read_bytes()


# -- rotation, cap, threads ---------------------------------------------------------------------------


def _record(rec: GradeRecorder, n: int, outcome: GradeOutcome = GradeOutcome.GRADED) -> None:
    for _ in range(n):
        rec.record(
            binding="b",
            judge="general",
            rubric=QUALITY,
            outcome=outcome,
            score=0.5 if outcome is GradeOutcome.GRADED else None,
            error=None if outcome is GradeOutcome.GRADED else "InvalidGrade: x",
            diagnostics=diagnostics(raw_reply="SCORE: 5", pad="p" * 300),
        )


def test_rotation_keeps_seq_and_respects_the_cap(tmp_path: Path) -> None:
    rec = recorder_in(tmp_path, max_bytes=4096, keep=2)
    _record(rec, 200)
    rec.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [names.grades(0, 1), names.grades(0, 2), names.grades(0)]
    segments = [tmp_path / names.grades(0, n) for n in (2, 1, 0)]  # oldest first
    assert all(0 < p.stat().st_size <= 4096 for p in segments)
    seqs = [x["seq"] for p in segments for x in lines_of(p)]
    assert seqs == list(range(seqs[0], 201))  # one run of seq across the kept segments, ending at 200
    assert seqs[0] > 1  # the older lines were rotated away: seq says how many (seqs[0] - 1)
    assert rec.log is not None and rec.log.rotations > 2


def test_a_batch_is_split_where_the_cap_falls(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path, partial(names.gateway_log, "j"), max_bytes=250, keep=100)
    batch = [b'{"n": %03d, "pad": "%s"}\n' % (i, b"x" * 78) for i in range(10)]  # 100 bytes each
    log.append_many(batch[:3])
    log.append_many(batch[3:])
    kept = {p.name: p for p in tmp_path.iterdir()}
    segments = [kept[names.gateway_log("j", n)] for n in range(4, 0, -1)] + [kept[names.gateway_log("j")]]
    assert all(p.stat().st_size == 200 for p in segments)  # two lines each: a third would pass the cap
    assert b"".join(p.read_bytes() for p in segments) == b"".join(batch)  # every line, once, in order


def test_keep_zero_keeps_only_the_current_segment(tmp_path: Path) -> None:
    rec = recorder_in(tmp_path, max_bytes=2048, keep=0)
    _record(rec, 50)
    rec.close()
    assert [p.name for p in tmp_path.iterdir()] == [names.grades(0)]
    assert (tmp_path / names.grades(0)).stat().st_size <= 2048
    assert lines_of(tmp_path / names.grades(0))[-1]["seq"] == 50


def test_concurrent_writers_from_threads_write_whole_ordered_lines(tmp_path: Path) -> None:
    rec = recorder_in(tmp_path, max_bytes=64 * 1024, keep=1000)
    threads = [threading.Thread(target=_record, args=(rec, 150)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    segments = sorted(tmp_path.glob("grades-0*.jsonl"), key=lambda p: names.grades_segment(p.name) or (0, 0))
    ordered = [segments[0], *reversed(segments[1:])]  # .N (oldest) ... .1, then the current one
    seqs = [x["seq"] for p in ordered[1:] + ordered[:1] for x in lines_of(p)]
    assert seqs == list(range(1, 1201))


def test_a_second_process_rotating_is_followed(tmp_path: Path) -> None:
    """Another writer of the same rank renamed the file away: the next line goes to the new name."""
    rec = recorder_in(tmp_path)
    _record(rec, 1)
    os.rename(tmp_path / names.grades(0), tmp_path / names.grades(0, 1))
    _record(rec, 1)
    rec.close()
    assert [x["seq"] for x in lines_of(tmp_path / names.grades(0))] == [2]


def test_a_forked_child_is_another_writer_with_its_own_seq(tmp_path: Path) -> None:
    rec = recorder_in(tmp_path)
    _record(rec, 2)
    pid = os.fork()
    if pid == 0:  # the child: one line, then out without running the parent's cleanup
        try:
            _record(rec, 1)
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    _record(rec, 1)
    rec.close()
    lines = lines_of(tmp_path / names.grades(0))
    parent = [x["seq"] for x in lines if x["writer"] == rec.writer]
    child = [x for x in lines if x["writer"] != rec.writer]
    assert parent == [1, 2, 3] and [x["seq"] for x in child] == [1] and child[0]["pid"] == pid


# -- hostile run directories -------------------------------------------------------------------------


def test_a_planted_symlink_is_not_followed_and_the_grade_still_returns(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / names.grades(0)).symlink_to(outside)
    err = io.StringIO()
    rec = GradeRecorder(GradeLog(run_dir, 0), DegradedAlarm(), rank=0, stderr=err)
    with client_for(server, rec) as client:
        assert client.grade(QUALITY, QUESTION, GOOD).score > 0
        assert client.grade(QUALITY, QUESTION, GOOD).score > 0
        assert outside.read_text() == "keep me\n"
        assert err.getvalue().count("cannot write") == 1  # said once
        assert "symlink" in err.getvalue() and rec.lost == 2
        (run_dir / names.grades(0)).unlink()
        client.grade(QUALITY, QUESTION, GOOD)
    rec.close()
    assert [x["seq"] for x in lines_of(run_dir / names.grades(0))] == [3]  # the gap shows 2 lost


def test_a_planted_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / names.grades(0))
    err = io.StringIO()
    rec = GradeRecorder(GradeLog(tmp_path, 0), None, rank=0, stderr=err)
    _record(rec, 1)
    assert rec.lost == 1 and "cannot write" in err.getvalue()


# -- the alarm through the client library ----------------------------------------------------------


def _registry(server: RunningServer, **judging: Any) -> dict[str, Any]:
    return {
        "judges": {
            "general": {
                "endpoint": server.base_url,
                "model": server.model,
                "timeout": 10,
                "max_context_length": 8192,
                "max_concurrent_calls": 4,
            }
        },
        # One request per grade: the alarm counts grades (a reply asked again is one grade).
        "rubrics": {"quality": {**QUALITY.to_json(), "invalid_reply_attempts": 1}},
        "bindings": {"general-quality": {"judge": "general", "rubric": "quality"}},
        "judging": {
            "grades_max_bytes": 1 << 20,
            "grades_keep": 3,
            "degraded_window": 100,
            "degraded_max_share": 0.05,
            **judging,
        },
    }


def _driver_env(run_dir: Path) -> dict[str, str]:
    return {
        DriverEnv.RUN_DIR: str(run_dir),
        DriverEnv.RANK: "0",
        DriverEnv.FINGERPRINT: FP,
        DriverEnv.INCARNATION: "abc123",
        DriverEnv.ATTEMPT: "1",
    }


def test_the_alarm_trips_on_the_sixth_bad_reply_writes_its_record_and_stops_grading(
    tmp_path: Path, judge_server: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = judge_server("--fault", "invalid-after", "3")
    run = RunDir.create(tmp_path, "run", mode=0o750)
    for key, value in _driver_env(run.path).items():
        monkeypatch.setenv(key, value)
    bound = bindings_from_registry(_registry(server))["general-quality"]
    sample = {"metadata": {"judge_query": QUESTION}}
    try:
        assert all(bound.grade_sample(sample, GOOD).score > 0 for _ in range(3))
        for _ in range(5):  # 5 bad replies: the alarm allows them
            with pytest.raises(InvalidGrade):
                bound.grade_sample(sample, GOOD)
        assert not (run.path / names.judge_degraded(0)).exists()
        with pytest.raises(JudgeDegraded) as info:  # the 6th trips it
            bound.grade_sample(sample, GOOD)
        assert isinstance(info.value.__cause__, InvalidGrade)
        sent = server.log().count("POST /v1/chat/completions")
        with pytest.raises(JudgeDegraded):  # and from then on nothing is sent through that binding
            bound.grade_sample(sample, GOOD)
        assert server.log().count("POST /v1/chat/completions") == sent == 9
    finally:
        bound.client.close()
    assert "'general-quality'" in str(info.value) and "6 of its last 9 replies" in str(info.value)
    copy = pickle.loads(pickle.dumps(info.value))  # as a Ray task that grades raises it to its caller
    assert isinstance(copy, JudgeDegraded) and copy.trip == info.value.trip
    alarm = orjson.loads((run.path / names.judge_degraded(0)).read_bytes())
    assert not violations("judge-degraded", alarm), violations("judge-degraded", alarm)
    assert alarm["binding"] == "general-quality" and alarm["judge"] == "general"
    assert (alarm["bad"], alarm["replies"], alarm["window"], alarm["allowed"]) == (6, 9, 100, 5)
    assert [b["seq"] for b in alarm["bad_replies"]] == [8, 9]
    assert all("rather not give a number" in b["excerpt"] for b in alarm["bad_replies"])
    assert alarm["writer"] == "driver" and alarm["fingerprint"] == FP and alarm["rank"] == 0
    lines = lines_of(run.path / names.grades(0))
    assert [x["outcome"] for x in lines] == ["graded"] * 3 + ["invalid"] * 6  # the refused 10th is no grade
    run.close()


def test_the_registry_s_judging_settings_reach_the_driver(tmp_path: Path, judge_server: Factory) -> None:
    """A window of 10 with a 20 % share allows 2 bad replies: the 3rd trips; 4 KiB segments, none kept."""
    server = judge_server("--fault", "invalid")
    registry = _registry(server, degraded_window=10, degraded_max_share=0.2, grades_max_bytes=4096, grades_keep=0)
    rec = GradeRecorder.from_env(registry, _driver_env(tmp_path), stderr=io.StringIO())
    assert rec is not None and rec.log is not None and (rec.log.max_bytes, rec.log.keep) == (4096, 0)
    bound = bindings_from_registry(registry, recorder=rec)["general-quality"]
    with bound.client:
        for _ in range(2):
            with pytest.raises(InvalidGrade):
                bound.grade(QUESTION, GOOD)
        with pytest.raises(JudgeDegraded, match="3 of its last 3 replies"):
            bound.grade(QUESTION, GOOD)
    rec.close()
    assert (tmp_path / names.judge_degraded(0)).exists()


def test_outside_a_run_nothing_is_written(
    tmp_path: Path, judge_server: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = judge_server()
    for key in (DriverEnv.RUN_DIR, DriverEnv.RANK):
        monkeypatch.delenv(key, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    bound = bindings_from_registry(_registry(server))["general-quality"]
    with bound.client:
        assert bound.client.recorder is None
        bound.grade(QUESTION, GOOD)
    assert list(cwd.iterdir()) == []


def test_a_direct_client_call_is_matched_to_its_binding(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server()
    rec = GradeRecorder.from_env(_registry(server), _driver_env(tmp_path), stderr=io.StringIO())
    assert rec is not None
    with client_for(server, rec) as client:
        client.grade(QUALITY, QUESTION, GOOD)  # no binding named: the registry's for general/quality
    rec.close()
    (line,) = lines_of(tmp_path / names.grades(0))
    assert line["binding"] == "general-quality" and line["attempt"] == 1
