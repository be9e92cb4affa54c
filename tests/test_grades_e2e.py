"""grades-RANK.jsonl and the degraded-judge alarm under real agents: a managed reference judge on
node 2 of a 3-node run (no Ray: the judge path is what is tested), a driver that grades through
the registry's bindings and swallows every judge error.

The judge degrades through a real fault of the reference server (``invalid-after N``: the first N
chat completions, the canaries' 12 and the driver's first two, are valid; every later one is not).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from schemas import names, violations
from tests.harness import (
    BIN,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    judge_spec,
    judge_tables,
    kill_tree_by_session,
    launch_local,
    read,
    uid,
)

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).resolve().parent / "data" / "grading_driver.py"
COMMAND = f'command = ["{sys.executable}", "{DRIVER}"]'
CANARY_CHATS = 12  # 2 bindings x 3 repetitions x (known-good, known-bad)


def _grade_lines(run_dir: Path, rank: int) -> list[dict]:
    return [orjson.loads(x) for x in (run_dir / names.grades(rank)).read_bytes().splitlines()]


@pytest.mark.parametrize(
    "mode",
    [
        "swallow",  # the driver catches JudgeDegraded and exits 0: the agent's check at exit
        "raise",  # JudgeDegraded ends the driver (exit 1): the cause is the alarm, not the exit
        "linger",  # the driver catches it and runs on: the agent's watch stops the run
    ],
)
def test_a_degraded_judge_fails_the_run_whatever_the_driver_does(tmp_path: Path, mode: str) -> None:
    env = {"GYM_REFERENCE_JUDGE_FAULTS": f"invalid-after={CANARY_CHATS + 2}", "GRADES": "20", "DEGRADED": mode}
    # One try per grade: an invalid reply is not asked again (3 tries would wait 3 s per grade); what
    # counts towards the alarm is the grade's outcome, however many tries it took.
    spec = judge_spec(driver=COMMAND, ray=False, judges=judge_tables(invalid_reply_attempts=1))
    run = launch_local(tmp_path, spec, uid(f"degraded-{mode}"), env=env)
    started = time.monotonic()
    try:
        assert run.wait(180) != 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    if mode == "linger":
        # Whether the driver got to say it lingers is a race with the agent's watch; that the run
        # ended at the alarm, long before the driver's 60 s sleep, is what the agent promises.
        assert time.monotonic() - started < 55, "the run waited for the driver instead of failing at the alarm"
    d = run.run_dir
    assert_artifacts_valid(d)  # every grades line and the alarm record against their schemas
    fails = failures(d)
    rec = fails[0]
    assert rec["kind"] == "judge_degraded", fails
    assert rec["binding"] == "general-quality" and rec["judge"] == "general"
    assert "binding 'general-quality'" in rec["cause"] and rec["cause"].count("invalid: 'Reasoning:") == 2
    assert rec["log"] == names.driver_log(0)
    assert all(fails[r]["reacting_to"]["rank"] == 0 for r in (1, 2))
    alarm = read(d, names.judge_degraded(0))
    assert (alarm["binding"], alarm["bad"], alarm["allowed"], alarm["window"]) == ("general-quality", 6, 5, 100)
    log = (d / names.driver_log(0)).read_text()
    if mode == "raise":
        assert "JudgeDegraded" in log and "judge degraded: binding 'general-quality'" in log
    # The agent stops the driver at the alarm: a swallowing driver may or may not have written
    # its result first (a race); the others never do.
    if mode != "swallow":
        assert names.DRIVER_RESULT not in {p.name for p in d.iterdir()}
    lines = _grade_lines(d, 0)
    # Once tripped, a binding sends nothing more: its grades stop at the 6th bad reply.
    by_binding = {
        b: [x["outcome"] for x in lines if x["binding"] == b] for b in ("general-quality", "general-quality_ref")
    }
    assert by_binding["general-quality"] == ["graded"] + ["invalid"] * 6
    assert [x["seq"] for x in lines] == list(range(1, len(lines) + 1))
    assert_nothing_left(d)
    audit(d, verdict="fail", rank=0, kind="judge_degraded")
    out = subprocess.run(
        [str(BIN / "gym-audit"), "--json", str(d)], capture_output=True, text=True, timeout=120, check=False
    )
    first = json.loads(out.stdout)["first_cause"]
    assert out.returncode == 1 and first["kind"] == "judge_degraded", out.stdout[-2000:]
    assert first["binding"] == "general-quality" and "seq" in first["cause"]


def test_a_driver_that_grades_fine_leaves_a_valid_grades_file(tmp_path: Path) -> None:
    run = launch_local(tmp_path, judge_spec(driver=COMMAND, ray=False), uid("grades"), env={"GRADES": "5"})
    try:
        assert run.wait(180) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    seen = assert_artifacts_valid(d)
    assert names.grades(0) in seen and names.judge_degraded(0) not in seen
    lines = _grade_lines(d, 0)
    assert len(lines) == 10 and all(not violations("grade", x) for x in lines)
    assert {x["outcome"] for x in lines} == {"graded"} and all(x["replied"] for x in lines)
    assert {x["binding"] for x in lines} == {"general-quality", "general-quality_ref"}
    registry = read(d, names.REGISTRY)
    assert {x["rubric"]["digest"] for x in lines} == {r["digest"] for r in registry["rubrics"].values()}
    assert all(x["fingerprint"] == registry["fingerprint"] and x["rank"] == 0 for x in lines)
    # The answer was graded without its reasoning block, and the line says so.
    assert all(x["diagnostics"]["answer"]["extracted"] == "The capital of France is Paris." for x in lines)
    assert read(d, names.DRIVER_RESULT)["judge_replies"] == sum(x["replied"] for x in lines)
    chats = (d / names.judge_log("general", 2)).read_text().count("POST /v1/chat/completions")
    assert chats == CANARY_CHATS + len(lines)  # canaries are not in the grades file
    assert_nothing_left(d)
    audit(d, verdict="pass")


def test_an_invalid_reply_fails_a_strict_driver_with_the_binding_named(tmp_path: Path) -> None:
    # The first reply after the canaries and one good grade is invalid; the driver lets it end it.
    env = {"GYM_REFERENCE_JUDGE_FAULTS": f"invalid-after={CANARY_CHATS + 1}", "GRADES": "5", "DEGRADED": "strict"}
    run = launch_local(tmp_path, judge_spec(driver=COMMAND, ray=False), uid("strict"), env=env)
    try:
        assert run.wait(180) == 1, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    assert_artifacts_valid(d)
    result = audit(d, verdict="fail", rank=0, kind="driver_exit")
    fc = result.first_cause
    assert fc is not None
    said = "\n".join(fc.excerpt)
    assert "InvalidGrade: binding 'general-quality_ref' (judge general): invalid judge reply" in said, said
    lines = _grade_lines(d, 0)
    assert [x["outcome"] for x in lines] == ["graded", "invalid"], lines
    assert_nothing_left(d)
