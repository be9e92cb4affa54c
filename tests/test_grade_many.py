"""grade_many / agrade_many / graded_samples: many grades at the judge's throughput, results in order,
each recorded like a single grade. Real HTTP to real judge processes (the reference judge, which grades
each answer on its own words; the fixed-latency stand-in, which counts what is in flight at it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from _judge_server import RunningServer, server_factory, start_module
from _recording_judge import recording_judge

from agent.judges import GradeItem, JudgeClient, bindings_from_registry
from agent.judges.client import InvalidGrade
from agent.judges.rubrics import resolve_rubric
from schemas import DriverEnv, RunDir, names

RUBRIC = resolve_rubric("q", {"profile": "general-quality", "max_output_tokens": 64, "temperature": 0.0})
QUESTION = "What is the capital of France?"
ANSWERS = ["Paris.", "The capital of France is Paris.", "Lyon.", "France's capital city is Paris, on the Seine."]


@pytest.fixture
def judge_server(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    yield from server_factory(tmp_path)


def test_results_come_in_order_and_equal_single_grades(judge_server: Callable[..., RunningServer]) -> None:
    server = judge_server()
    items = [GradeItem(QUESTION, a) for a in ANSWERS * 4]
    with JudgeClient(server.base_url, server.model, timeout=10, max_connections=4) as client:
        one_by_one = [client.grade(RUBRIC, QUESTION, a).score for a in ANSWERS * 4]
        many = client.grade_many(RUBRIC, items)
        also = asyncio.run(client.agrade_many(RUBRIC, [(QUESTION, a) for a in ANSWERS * 4]))
    assert [g.score for g in many] == one_by_one == [g.score for g in also]  # type: ignore[union-attr]
    assert len(set(one_by_one)) > 1  # the answers grade differently: order is checkable


def test_at_most_max_concurrent_calls_are_in_flight_and_all_of_them_are(tmp_path: Path) -> None:
    judge = start_module(tmp_path, "tests.harness.fixed_judge", "--latency", "0.2", name="fixed")
    try:
        with JudgeClient(judge.base_url, "fixed-judge", timeout=10, max_connections=4) as client:
            grades = client.grade_many(RUBRIC, [(QUESTION, f"answer {i}") for i in range(24)])
        stats = httpx.get(judge.base_url + "/stats").json()
    finally:
        judge.stop()
    assert len(grades) == 24 and {g.score for g in grades} == {0.7}  # type: ignore[union-attr]
    assert stats == {"max_in_flight": 4, "served": 24}


def test_errors_are_raised_in_order_or_returned_in_place() -> None:
    once = resolve_rubric("q", {**RUBRIC.to_json(), "invalid_reply_attempts": 1})
    with (
        recording_judge(reply="No score from me.") as judge,
        JudgeClient(judge.base_url, judge.model, timeout=10, max_connections=2) as client,
    ):
        with pytest.raises(InvalidGrade):
            client.grade_many(once, [(QUESTION, "a"), (QUESTION, "b")])
        got = client.grade_many(once, [(QUESTION, "a"), (QUESTION, "b")], return_exceptions=True)
    assert [type(g) for g in got] == [InvalidGrade, InvalidGrade]  # never a zero


def test_a_bound_judge_grades_prepared_samples_and_records_each(
    judge_server: Callable[..., RunningServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = judge_server()
    run = RunDir.create(tmp_path, "run", mode=0o750)
    for key, value in {DriverEnv.RUN_DIR: str(run.path), DriverEnv.RANK: "0"}.items():
        monkeypatch.setenv(key, value)
    registry = {
        "judges": {
            "general": {"endpoint": server.base_url, "model": server.model, "timeout": 10, "max_concurrent_calls": 3}
        },
        "rubrics": {"q": RUBRIC.to_json()},
        "bindings": {"general-quality": {"judge": "general", "rubric": "q"}},
    }
    bound = bindings_from_registry(registry)["general-quality"]
    samples = [{"metadata": {"judge_query": QUESTION}, "id": i} for i in range(len(ANSWERS))]
    try:
        graded = bound.graded_samples(samples, ANSWERS)
        again = asyncio.run(bound.agraded_samples(samples, ANSWERS))
    finally:
        bound.client.close()
    assert [s["id"] for _, s in graded] == list(range(len(ANSWERS)))
    assert all(s["metadata"]["verifier_diagnostics"]["score"] == g.score for g, s in graded)
    assert [g.score for g, _ in graded] == [g.score for g, _ in again]
    lines = [orjson.loads(x) for x in (run.path / names.grades(0)).read_bytes().splitlines()]
    assert len(lines) == 2 * len(ANSWERS) and {x["binding"] for x in lines} == {"general-quality"}
