"""Canaries during the run: a managed reference judge that starts agreeing with everything (a real
server fault, switched on by a file the test creates) fails the run at the next canary round as
judge_degraded, naming the binding, both scores and the replies. No Ray: the judges are the subject.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    assert_artifacts_valid,
    audit,
    failures,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    read,
    uid,
    wait_phase,
)

pytestmark = pytest.mark.slow
INTERVAL = 2


def _rounds(run_dir: Path) -> list[dict]:
    try:
        return read(run_dir, names.CANARIES).get("rounds", [])
    except (OSError, ValueError):
        return []


def test_a_judge_that_starts_agreeing_with_everything_fails_the_run_at_the_next_round(tmp_path: Path) -> None:
    drift = tmp_path / "drift"
    spec = judge_spec(driver='command = ["python", "-c", "import time; time.sleep(120)"]\ntrains = false', ray=False)
    spec = spec.replace("timeout = 30\n", f"timeout = 30\ncanary_interval = {INTERVAL}\n", 1)
    run = launch_local(tmp_path, spec, uid("drift"), env={"GYM_REFERENCE_JUDGE_FAULTS": f"agree-when={drift}"})
    try:
        wait_phase(run.run_dir, 0, "driver", 120)
        deadline = time.monotonic() + 60
        while not _rounds(run.run_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        sane = _rounds(run.run_dir)
        assert sane and sane[0]["passed"], sane  # rounds run during the driver, and pass while the judge is sane
        drift.touch()
        drifted_at = time.monotonic()
        assert run.wait(120) != 0
        took = time.monotonic() - drifted_at
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    assert took < 60, took  # the next round (every 2 s), not the driver's end (120 s)
    record = failures(d)[0]
    assert record["kind"] == "judge_degraded" and record["judge"] == "general", record
    assert record["binding"] in ("general-quality", "general-quality_ref")
    cause = record["cause"]
    assert "known-good scored" in cause and "not above known-bad" in cause and "the judge answered" in cause
    rounds = _rounds(d)
    assert rounds[-1]["passed"] is False and all(r["passed"] for r in rounds[:-1])
    # Every canary went through the gateway, marked: none of them is a training reply.
    lines = [json.loads(x) for x in (d / names.gateway_log("general")).read_text().splitlines()]
    chats = [x for x in lines if x["generation"]]
    assert chats and all(x["canary"] for x in chats)
    assert_artifacts_valid(d)
    result = audit(d, verdict="fail", rank=0, kind="judge_degraded")
    assert result.first_cause is not None and result.first_cause.binding == record["binding"]
