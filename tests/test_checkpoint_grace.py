"""[driver] checkpoint_grace on real agents (gym-launch local): on the scheduler's walltime warning
or a peer's failure the driver is asked to checkpoint (GYM_STOP_FILE appears) and given the grace
to exit before anything is stopped; a driver that ignores it is stopped when the grace ends. The
Slurm side (the rendered --signal and trap, a requeue that resumes) is in tests/test_slurm_endings.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from schemas import FailureKind, names
from tests.harness import assert_artifacts_valid, assert_nothing_left, audit, failures, launch_local, read, uid
from tests.harness.agents import agent_pid, wait_for_file
from tests.harness.specs import small_spec

pytestmark = pytest.mark.slow

# Trains until told to stop; then "checkpoints" (a marker in GYM_CHECKPOINT_DIR, which takes a
# moment) and exits 0. IGNORE=1: never looks at the stop file.
DRIVER = r"""
import json, os, sys, time
stop = os.environ.get("GYM_STOP_FILE")
print("stop file:", stop, flush=True)
while True:
    if stop and os.environ.get("IGNORE") != "1" and os.path.exists(stop):
        time.sleep(0.5)
        path = os.path.join(os.environ["GYM_CHECKPOINT_DIR"], "ckpt.json")
        with open(path, "w") as f:
            json.dump({"attempt": os.environ["GYM_ATTEMPT"], "reason": json.load(open(stop))["reason"]}, f)
        print("checkpointed", flush=True)
        sys.exit(0)
    time.sleep(0.1)
"""


def _spec(tmp: Path, grace: float) -> str:
    script = tmp / "_driver.py"
    script.write_text(DRIVER)
    return small_spec(replicas=2, ray=False, driver=f'command = ["python", "{script}"]\ncheckpoint_grace = {grace}')


def _driver_rank(run_dir: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in (0, 1):
            log = run_dir / names.driver_log(r)
            if log.exists() and "stop file:" in log.read_text(errors="replace"):
                return r
        time.sleep(0.1)
    raise AssertionError("the driver never started")


def test_the_walltime_warning_lets_the_driver_checkpoint(tmp_path: Path) -> None:
    run = launch_local(tmp_path, _spec(tmp_path, 20), uid("warn"))
    d = _driver_rank(run.run_dir)
    (run.run_dir / names.WALLTIME_WARNING).write_text("SIGUSR1 at 2026-12-01T12:00:00Z\n")
    assert run.wait(60) == 1, run.output
    assert_artifacts_valid(run.run_dir)
    ckpt = json.loads((run.run_dir / names.CHECKPOINTS_DIR / "ckpt.json").read_text())
    assert ckpt["attempt"] == "1" and "time_limit" in ckpt["reason"], ckpt
    stop = read(run.run_dir, names.DRIVER_STOP)
    assert (stop["outcome"], stop["exit_code"]) == ("exited", 0), stop
    assert 0.4 < stop["after_s"] < 20, stop
    recs = failures(run.run_dir)
    assert {v["kind"] for v in recs.values()} <= {FailureKind.TIME_LIMIT, FailureKind.PEER_FAILURE}, recs
    # The driver's node stops for the warning itself, or for a peer's record of it that reached it
    # first (which one is the machine's load): the warning either way.
    own = recs[d]
    assert own["kind"] == FailureKind.TIME_LIMIT or own["reacting_to"]["kind"] == FailureKind.TIME_LIMIT, recs
    result = audit(run.run_dir, verdict="fail", rank=(0, 1), kind=FailureKind.TIME_LIMIT)
    grace = [f for f in result.findings if f.code == "driver.checkpoint_grace"]
    assert grace and "exited after" in grace[0].message, result.findings
    assert_nothing_left(run.run_dir)


def test_a_peer_failure_asks_the_driver_too_and_peers_wait_for_it(tmp_path: Path) -> None:
    run = launch_local(tmp_path, _spec(tmp_path, 20), uid("peer"))
    d = _driver_rank(run.run_dir)
    other = 1 - d
    os.kill(agent_pid(run.run_dir, other), signal.SIGKILL)
    assert run.wait(90) == 1, run.output
    assert_artifacts_valid(run.run_dir)
    stop = read(run.run_dir, names.DRIVER_STOP)
    assert stop["outcome"] == "exited" and "peer_failure" in stop["reason"], stop
    assert (run.run_dir / names.CHECKPOINTS_DIR / "ckpt.json").exists()
    audit(run.run_dir, verdict="fail", rank=other, kind=FailureKind.AGENT_DIED)
    assert_nothing_left(run.run_dir)


def test_a_driver_that_ignores_the_request_is_stopped_when_the_grace_ends(tmp_path: Path) -> None:
    grace = 2.0
    run = launch_local(tmp_path, _spec(tmp_path, grace), uid("ignore"), env={"IGNORE": "1"})
    _driver_rank(run.run_dir)
    t0 = time.monotonic()
    (run.run_dir / names.WALLTIME_WARNING).write_text("SIGUSR1\n")
    wait_for_file(run.run_dir / names.DRIVER_STOP, 30)
    assert run.wait(60) == 1, run.output
    took = time.monotonic() - t0
    stop = read(run.run_dir, names.DRIVER_STOP)
    assert (stop["outcome"], stop["exit_code"]) == ("grace_expired", None), stop
    assert stop["after_s"] >= grace and took >= grace, (stop, took)
    assert not (run.run_dir / names.CHECKPOINTS_DIR / "ckpt.json").exists()
    result = audit(run.run_dir, verdict="fail", rank=(0, 1), kind=FailureKind.TIME_LIMIT)
    grace_findings = [f for f in result.findings if f.code == "driver.checkpoint_grace"]
    assert grace_findings and grace_findings[0].severity == "warning", result.findings
    assert_nothing_left(run.run_dir)


def test_a_driver_that_fails_by_itself_is_not_asked(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text("import time, sys\ntime.sleep(1)\nprint('stop file: x', flush=True)\nsys.exit(4)\n")
    spec = small_spec(replicas=2, ray=False, driver=f'command = ["python", "{script}"]\ncheckpoint_grace = 30')
    t0 = time.monotonic()
    run = launch_local(tmp_path, spec, uid("crash"))
    assert run.wait(60) == 1, run.output
    # Nobody waited for a checkpoint: the run ends well within the grace.
    assert time.monotonic() - t0 < 25, run.output
    stop = read(run.run_dir, names.DRIVER_STOP)
    assert (stop["outcome"], stop["exit_code"]) == ("already_exited", 4), stop
    result = audit(run.run_dir, verdict="fail", rank=(0, 1), kind=FailureKind.DRIVER_EXIT)
    assert not [f for f in result.findings if f.code == "driver.checkpoint_grace"]
    assert_nothing_left(run.run_dir)
