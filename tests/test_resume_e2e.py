"""Resume (issue 16, DESIGN §10) with real agents started by `gym-launch local`: a run killed
mid-driver is resumed as attempt 2 in the same run directory; stale records of attempt 1 never
affect attempt 2; a changed spec and a concurrent second attempt are refused."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from schemas import RunDir, Writer, names
from tests.harness import (
    agent_pid,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    kill_tree_by_session,
    launch_local,
    read,
    small_spec,
    start_agent,
    uid,
    wait_all,
    wait_for_file,
    wait_phase,
)

pytestmark = pytest.mark.slow

# Attempt 1 leaves a checkpoint and hangs; attempt 2 finds the checkpoint, outlives any stale
# record for a few seconds (so a record it wrongly reacted to would end it), then succeeds.
DRIVER = """
import os, pathlib, time
from agent import driver_api
attempt = int(os.environ["GYM_ATTEMPT"])
ckpt = pathlib.Path(os.environ["GYM_CHECKPOINT_DIR"])
if attempt == 1:
    (ckpt / "step-1").write_text("1")
    time.sleep(600)
assert (ckpt / "step-1").read_text() == "1", "checkpoint of attempt 1 missing"
time.sleep(4)
driver_api.write_result(optimizer_steps=2, final_loss=0.25, policy_version=2, policy_refreshes=1, judge_replies=0)
"""


def spec_text(tmp: Path, **kw: object) -> str:
    drv = tmp / "resume_driver.py"
    drv.write_text(DRIVER)
    driver = f'command = ["python", "{drv}"]'
    return small_spec(replicas=2, driver=driver, ray=False, **kw)  # type: ignore[arg-type]


def snapshot(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def failed_attempt_1(tmp: Path, text: str, how: str = "sigkill_agent") -> tuple[Path, str]:
    """Attempt 1 ends mid-driver: rank 1's agent SIGKILLed (its reaper records it), or the
    launcher SIGTERMed (the agents record it)."""
    u = uid("resume")
    run = launch_local(tmp, text, u)
    try:
        wait_phase(run.run_dir, 0, "driver", 60)
        wait_phase(run.run_dir, 1, "driver", 60)
        wait_for_file(run.run_dir / names.CHECKPOINTS_DIR / "step-1", 60)
        if how == "sigkill_agent":
            os.kill(agent_pid(run.run_dir, 1), signal.SIGKILL)
        else:
            run.proc.send_signal(signal.SIGTERM)
        assert run.wait(90) != 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert_nothing_left(run.run_dir)
    assert (run.run_dir / names.CHECKPOINTS_DIR / "step-1").exists()
    return run.run_dir, u


def plant_stale(run_dir: Path) -> None:
    """Records stamped attempt 1 written into attempt 2's places: failure, complete, ack,
    heartbeat and an address for a rank that does not exist."""
    spec = read(run_dir, names.SPEC)
    with RunDir.open(run_dir) as run:
        run.attempt = 1
        w = Writer(spec["fingerprint"], 1, "stale1")
        run.write_artifact(
            names.failure(1),
            w,
            {
                "kind": "peer_failure",
                "cause": "stale",
                "phase": "driver",
                "wall_time": time.time(),
                "monotonic_time": 1.0,
                "log": None,
                "reacting_to": None,
                "peers": [],
            },
        )
        run.write_artifact(names.COMPLETE, Writer(spec["fingerprint"], 0, "stale0"), _complete(run_dir))
        run.write_artifact(names.ack(1), w, {"outcome": "success"})


def _complete(run_dir: Path) -> dict:
    return {"driver_rank": 0, "driver_exit_code": 0, "driver_seconds": 1.0}


@pytest.mark.parametrize("how", ["sigkill_agent", "sigterm_launcher"])
def test_killed_run_resumes_as_attempt_2_and_stale_records_never_count(tmp_path: Path, how: str) -> None:
    text = spec_text(tmp_path)
    run_dir, u = failed_attempt_1(tmp_path, text, how)
    run = launch_local(tmp_path, text, u, args=("--resume",))
    try:
        wait_for_file(run_dir / names.attempt_ready(2), 60)  # attempt 1's records moved away
        wait_phase(run_dir, 0, "driver", 60)
        plant_stale(run_dir)  # while attempt 2's driver runs
        assert run.wait(120) == 0, run.text[-4000:]
    finally:
        kill_tree_by_session(run.proc)
    assert_nothing_left(run_dir)
    # Attempt 1's files were moved under attempts/1/ with the names users grep for.
    old = run_dir / names.attempt_dir(1)
    assert (old / names.driver_log(0)).exists() and (old / names.placement(0)).exists()
    assert read(old, names.failure(1))["attempt"] == 1
    assert read(run_dir, names.attempt_claim(2))["attempt"] == 2
    assert read(run_dir, names.placement(0))["attempt"] == 2
    assert read(run_dir, names.DRIVER_RESULT)["attempt"] == 2
    assert read(run_dir, names.phases(1))["attempt"] == 2
    assert "data_check" in [p["phase"] for p in read(run_dir, names.phases(0))["phases"]]  # ran again
    # The planted records are still there, stamped attempt 1, and changed nothing.
    assert read(run_dir, names.failure(1))["attempt"] == 1
    assert assert_artifacts_valid(run_dir)
    assert read(run_dir, names.COMPLETE)["attempt"] == 2  # attempt 2 wrote its own over the planted one
    result = audit(run_dir, verdict="pass")  # the planted failure is reported, not judged
    stale = [f for f in result.findings if f.code == "record.other_attempt"]
    assert [f.file for f in stale] == [names.failure(1)], stale
    attempts = getattr(result, "attempts", None)
    assert attempts is not None and [a.attempt for a in attempts] == [1, 2], attempts
    assert attempts[0].verdict == "fail" and attempts[0].first_cause is not None
    assert attempts[0].first_cause.kind == ("agent_died" if how == "sigkill_agent" else "signal")
    from audit._report_text import render

    text = render(result)
    assert "attempt 1: FAIL" in text and "attempt 2: PASS" in text and attempts[0].first_cause.kind in text, text


def test_resume_with_a_changed_spec_is_refused_naming_the_keys(tmp_path: Path) -> None:
    text = spec_text(tmp_path)
    run_dir, u = failed_attempt_1(tmp_path, text)
    before = snapshot(run_dir)
    changed = text.replace("heartbeat_timeout = 6", "heartbeat_timeout = 7")
    run = launch_local(tmp_path, changed, u, args=("--resume",))
    try:
        assert run.wait(60) == 2, run.text
    finally:
        kill_tree_by_session(run.proc)
    assert "coordination.heartbeat_timeout" in run.text and "Traceback" not in run.text, run.text
    assert snapshot(run_dir) == before


def test_two_attempts_started_at_once_exactly_one_proceeds(tmp_path: Path) -> None:
    text = spec_text(tmp_path)
    run_dir, u = failed_attempt_1(tmp_path, text)
    a = launch_local(tmp_path, text, u, args=("--resume",))
    b = launch_local(tmp_path, text, u, args=("--resume",))
    try:
        codes = sorted([a.wait(150), b.wait(150)])
    finally:
        kill_tree_by_session(a.proc)
        kill_tree_by_session(b.proc)
    loser = a if a.proc.returncode != 0 else b
    # The loser's agents refused before starting anything (exit 2), and so does its launcher.
    assert codes == [0, 2], (codes, a.text[-2000:], b.text[-2000:])
    assert "did not join and wrote nothing" in loser.text or "has not ended" in loser.text, loser.text
    assert "Traceback" not in loser.text
    assert sorted(p.name for p in (run_dir / names.ATTEMPTS_DIR).iterdir()) == ["1", "2"]
    assert read(run_dir, names.COMPLETE)["attempt"] == 2
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)


def test_without_resume_a_failed_run_is_refused_untouched(tmp_path: Path) -> None:
    text = spec_text(tmp_path)
    run_dir, u = failed_attempt_1(tmp_path, text)
    before = snapshot(run_dir)
    run = launch_local(tmp_path, text, u)
    try:
        assert run.wait(60) == 2, run.text
    finally:
        kill_tree_by_session(run.proc)
    assert "--resume" in run.text and snapshot(run_dir) == before
    assert orjson.loads((run_dir / names.SPEC).read_bytes())["attempt"] == 1


def test_stale_address_and_heartbeat_are_no_live_peer(tmp_path: Path) -> None:
    """Attempt 2 started by hand (gym-agent --resume, one token): while only rank 0 runs, an
    address and a fresh heartbeat of attempt 1 for rank 1 are planted. Rank 0 must keep waiting
    for a real rank 1, and rank 1 must claim its rank despite the planted address record."""
    text = spec_text(tmp_path)
    run_dir, u = failed_attempt_1(tmp_path, text)
    stale_address = read(run_dir, names.address(1))
    stale_heartbeat = read(run_dir, names.heartbeat(1))
    env = {"GYM_RESUME": "1", "GYM_ATTEMPT_TOKEN": "by-hand-2"}
    spec = run_dir / names.SPEC
    first = start_agent(tmp_path, spec, u, 0, 2, "127.0.0.2", env=env)
    procs = [first]
    try:
        wait_for_file(run_dir / names.attempt_ready(2), 60)
        wait_phase(run_dir, 0, "rendezvous", 60)
        now = time.time()
        for rel, doc in ((names.address(1), stale_address), (names.heartbeat(1), stale_heartbeat)):
            (run_dir / rel).write_bytes(orjson.dumps({**doc, "written_at": now}))
        time.sleep(3)
        phases = [p["phase"] for p in read(run_dir, names.phases(0))["phases"]]
        assert phases[-1] == "rendezvous" and "plan_agreement" not in phases, phases
        procs.append(start_agent(tmp_path, spec, u, 1, 2, "127.0.0.3", env=env))
        codes = wait_all(procs, 120)
    finally:
        for p in procs:
            kill_tree_by_session(p)
    assert codes == [0, 0], codes
    assert read(run_dir, names.address(1))["attempt"] == 2
    assert [p.name.split(".")[0] for p in (run_dir / names.attempt_dir(2)).glob("stale-*")] == ["stale-address-1"]
    assert read(run_dir, names.COMPLETE)["attempt"] == 2
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    audit(run_dir, verdict="pass")
