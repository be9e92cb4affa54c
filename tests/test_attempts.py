"""Attempts without agents: the spec comparison a resume refuses by, the launch token, and the
exclusive claim of an attempt number on a real directory (agent/coord/attempts.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.coord.attempts import AttemptRefused, attempt_token, join
from launch.spec.load import spec_differences
from schemas import RunDir, Writer, names
from schemas.validation import violations

FP = "0" * 64


def test_spec_differences_names_nested_and_missing_keys() -> None:
    old = {"launch": {"coordination": {"heartbeat_timeout": 6}}, "name": "a"}
    new = {"launch": {"coordination": {"heartbeat_timeout": 7}}, "name": "a", "driver": {"x": 1}}
    assert spec_differences(old, new) == ["driver", "launch.coordination.heartbeat_timeout"]
    assert spec_differences(old, old) == []


def test_attempt_token_prefers_the_explicit_one_then_the_scheduler() -> None:
    assert attempt_token({"GYM_ATTEMPT_TOKEN": "t", "SLURM_JOB_ID": "9"}) == "t"
    assert attempt_token({"SLURM_JOB_ID": "9", "SLURM_RESTART_COUNT": "2"}) == "slurm-9-2"
    assert attempt_token({"BEAKER_JOB_ID": "01J"}) == "beaker-01J"
    assert attempt_token({}) == "manual"


def _failed_attempt_1(tmp: Path) -> RunDir:
    run = RunDir.create(tmp, "u1", mode=0o750)
    w = Writer(FP, 0, "a1")
    run.write_artifact(names.SPEC, w, {"spec": {}})
    run.write_artifact(names.ack(0), w, {"outcome": "success"})
    run.create_artifact(names.address(0), w, {"address": "127.0.0.2"} | _addr())
    run.write_artifact(
        names.failure(0),
        w,
        {
            "kind": "signal",
            "cause": "x",
            "phase": "driver",
            "wall_time": 1.0,
            "monotonic_time": 1.0,
            "log": None,
            "reacting_to": None,
            "peers": [],
        },
    )
    return run


def _addr() -> dict:
    return {"address_explicit": True, "hostname": "h", "visible_devices": [], "pid": 1, "started_at": 1.0}


def test_one_token_wins_the_attempt_and_the_old_files_move(tmp_path: Path) -> None:
    run = _failed_attempt_1(tmp_path)
    w = Writer(FP, 0, "a2")
    kw = {"heartbeat_timeout": 6.0, "startup_timeout": 60.0, "deadline": time.monotonic() + 5, "poll": 0.05}
    assert join(run, w, "A", **kw) == 2
    assert run.attempt == 2
    assert (run.path / names.attempt_dir(1) / names.failure(0)).exists()
    assert not (run.path / names.failure(0)).exists() and (run.path / names.SPEC).exists()
    for rel in (names.attempt_claim(2), names.attempt_ready(2)):
        doc = run.read_json(rel)
        assert doc is not None and violations("attempt", doc) == [] and doc["attempt"] == 2
    # Another replica of launch A joins attempt 2; launch B is refused and writes nothing.
    other = RunDir.open(run.path)
    assert join(other, Writer(FP, 1, "b"), "A", **kw) == 2
    before = sorted(p.name for p in run.path.rglob("*"))
    with pytest.raises(AttemptRefused, match="has not ended"):
        join(RunDir.open(run.path), Writer(FP, 0, "c"), "B", **kw)
    assert sorted(p.name for p in run.path.rglob("*")) == before
    # A record stamped attempt 1 at the top is invisible to attempt 2.
    stale = RunDir.open(run.path)
    stale.attempt = 1
    stale.write_artifact(names.COMPLETE, Writer(FP, 0, "old"), {"driver_rank": 0, "driver_exit_code": 0})
    assert run.read_json(names.COMPLETE) is None
