"""Attempts without agents: the spec comparison a resume refuses by, the launch token, the
exclusive claim of an attempt number on a real directory, and restart mode's decisions on real files
(agent/coord/attempts/)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from agent.coord.attempts import AttemptRefused, Caps, Timing, attempt_token, resume_mode
from agent.coord.attempts._decide import (
    Decision,
    Look,
    Verb,
    no_progress,
    over_retries,
    restart_entry,
    restart_look,
    resume_entry,
)
from agent.coord.attempts._enter import join, join_restart
from launch.spec.errors import UsageError
from launch.spec.load import spec_differences
from schemas import RunDir, Writer, names
from schemas.records import AttemptRecord
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
    # Beaker: the workload (one for every replica and every retry), never the per-replica job id.
    replica_1 = {"BEAKER_JOB_ID": "01J1", "BEAKER_WORKLOAD_ID": "01W", "BEAKER_EXPERIMENT_ID": "01W"}
    assert attempt_token(replica_1) == attempt_token({**replica_1, "BEAKER_JOB_ID": "01J2"}) == "beaker-01W"
    assert attempt_token({"BEAKER_JOB_ID": "01J", "BEAKER_EXPERIMENT_ID": "01E"}) == "beaker-01E"
    assert attempt_token({"BEAKER_JOB_ID": "01J"}) == "manual"
    assert attempt_token({}) == "manual"


def test_resume_modes_from_the_flag_and_the_environment() -> None:
    assert resume_mode(False, {}) == resume_mode(False, {"GYM_RESUME": "0"})
    assert not resume_mode(False, {}).joins
    assert resume_mode(False, {"GYM_RESUME": "1"}).resume and not resume_mode(True, {}).restart
    both = resume_mode(True, {"GYM_RESUME": "restart"})
    assert both.restart and both.resume
    assert (
        resume_mode(False, {"GYM_RESUME": "restart"}).restart
        and not resume_mode(False, {"GYM_RESUME": "restart"}).resume
    )
    with pytest.raises(UsageError, match="GYM_RESUME is 'again': use 1"):
        resume_mode(False, {"GYM_RESUME": "again"})


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
    kw = {"timing": Timing(heartbeat_timeout=6.0, startup_timeout=60.0, deadline=time.monotonic() + 5, poll=0.05)}
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


def _restart(run: RunDir, rank: int, token: str = "beaker-W", *, adopt: bool = False, wait: float = 5, **kw) -> int:
    w = Writer(FP, rank, f"r{rank}-{time.monotonic_ns()}")
    timing = Timing(heartbeat_timeout=6.0, startup_timeout=60.0, deadline=time.monotonic() + wait, poll=0.05)
    return join_restart(run, w, token, rank, adopt=adopt, timing=timing, **kw)


def _hold(run_dir: Path, rank: int) -> None:
    """Rank `rank` runs in the current attempt: its address record, as rendezvous.claim writes it."""
    run = RunDir.open(run_dir)
    run.create_artifact(
        names.address(rank), Writer(FP, rank, f"held{rank}"), {"address": f"127.0.0.{2 + rank}"} | _addr()
    )


def _fail(run_dir: Path, rank: int) -> None:
    run = RunDir.open(run_dir)
    run.write_artifact(
        names.failure(rank),
        Writer(FP, rank, f"f{rank}"),
        {
            "kind": "driver_exit",
            "cause": "the driver exited with code 3",
            "phase": "driver",
            "wall_time": time.time(),
            "monotonic_time": 1.0,
            "log": None,
            "reacting_to": None,
            "peers": [],
            "exit_code": 3,
        },
    )


def _tree(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))


def test_restart_mode_claims_attempt_1_then_the_replicas_of_the_start_join_it(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r1", mode=0o750).path
    assert _restart(RunDir.open(run_dir), 0) == 1
    claim = read_claim(run_dir, 1)
    assert claim["mode"] == "restart" and claim["token"] == "beaker-W" and claim["previous"] is None
    _hold(run_dir, 0)
    assert _restart(RunDir.open(run_dir), 1) == 1  # a peer of the same start: rank 1 is free in attempt 1
    assert RunDir.open(run_dir).claimed_attempts() == [1]


def read_claim(run_dir: Path, n: int) -> dict:
    doc = RunDir.open(run_dir).read_json(names.attempt_claim(n))
    assert doc is not None and violations("attempt", doc) == [], doc
    return doc


def test_a_restart_after_the_attempt_ended_claims_the_next_and_its_peers_join(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r2", mode=0o750).path
    assert _restart(RunDir.open(run_dir), 0) == 1
    _hold(run_dir, 0)
    _hold(run_dir, 1)
    _fail(run_dir, 0)
    # Beaker's retry: the same token; rank 1 comes first this time.
    run = RunDir.open(run_dir)
    assert _restart(run, 1) == 2 and run.attempt == 2
    assert (run_dir / names.attempt_dir(1) / names.failure(0)).exists() and not (run_dir / names.failure(0)).exists()
    claim = read_claim(run_dir, 2)
    assert claim["previous"] == 1 and claim["previous_cause"] == "driver_exit on rank 0 (exit code 3)", claim
    assert _restart(RunDir.open(run_dir), 0) == 2  # attempt 2 is young and rank 0 is free in it: join


def test_a_restarted_rank_waits_for_its_old_attempt_to_end(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r3", mode=0o750).path
    assert _restart(RunDir.open(run_dir), 0) == 1
    _hold(run_dir, 0)
    # Rank 0 already runs in attempt 1, which has not ended: never a second rank 0 in it.
    before = _tree(run_dir)
    with pytest.raises(AttemptRefused, match="rank 0 already ran in attempt 1, which has not ended"):
        _restart(RunDir.open(run_dir), 0, wait=0.3)
    assert _tree(run_dir) == before
    # The old attempt's end is seen while the restart waits: it claims attempt 2.
    timer = threading.Timer(0.4, _fail, (run_dir, 0))
    timer.start()
    started = time.monotonic()
    try:
        assert _restart(RunDir.open(run_dir), 0) == 2
    finally:
        timer.join()
    assert time.monotonic() - started >= 0.4


def test_restart_mode_refuses_another_launchs_run_unless_resumed(tmp_path: Path) -> None:
    run = _failed_attempt_1(tmp_path)  # started without a claim (gym-launch local): another launch's
    before = _tree(run.path)
    with pytest.raises(AttemptRefused, match="another launch's run .*Submit with --resume"):
        _restart(RunDir.open(run.path), 0)
    assert _tree(run.path) == before
    assert _restart(RunDir.open(run.path), 0, "beaker-A", adopt=True) == 2  # --resume too: continue it
    _hold(run.path, 0)
    _fail(run.path, 0)
    with pytest.raises(AttemptRefused, match="attempt 2 was started by launch 'beaker-A'"):
        _restart(RunDir.open(run.path), 0, "beaker-B")
    assert _restart(RunDir.open(run.path), 0, "beaker-B", adopt=True) == 3
    assert read_claim(run.path, 3)["token"] == "beaker-B"


def test_a_restart_past_max_retries_is_refused_with_a_record(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r4", mode=0o750).path
    caps = Caps(max_retries=0, max_no_progress=None)
    assert _restart(RunDir.open(run_dir), 0, caps=caps) == 1
    _hold(run_dir, 0)
    _fail(run_dir, 0)
    with pytest.raises(AttemptRefused, match="attempt 2 refused: max_retries"):
        _restart(RunDir.open(run_dir), 0, caps=caps)
    refused = RunDir.open(run_dir).read_json(names.attempt_refused(2))
    assert refused is not None and violations("attempt", refused) == [] and refused["state"] == "refused"
    assert RunDir.open(run_dir).claimed_attempts() == [1]


def test_a_restart_of_a_completed_attempt_is_refused(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r5", mode=0o750).path
    assert _restart(RunDir.open(run_dir), 0) == 1
    _hold(run_dir, 0)
    RunDir.open(run_dir).write_artifact(names.COMPLETE, Writer(FP, 0, "c"), {"driver_rank": 0, "driver_exit_code": 0})
    before = _tree(run_dir)
    with pytest.raises(AttemptRefused, match="attempt 1 of this launch completed .*submit it with --resume"):
        _restart(RunDir.open(run_dir), 1)
    assert _tree(run_dir) == before


def test_the_attempt_decisions_need_no_files() -> None:
    """_decide.py: what to do, from what was read (resume, restart mode's two looks, the caps)."""
    assert resume_entry(None, None, "A", used=False) == Decision(Verb.CLAIM, None)  # a fresh run directory
    assert resume_entry(None, None, "A", used=True) == Decision(Verb.CLAIM, 1)  # started without a claim
    assert resume_entry(2, "A", "A", used=True) == Decision(Verb.JOIN, 2)
    assert resume_entry(2, "B", "A", used=True) == Decision(Verb.CLAIM, 2)
    assert restart_entry(True, None, None, "W", adopt=False) == Decision(Verb.CLAIM, None)
    assert restart_entry(False, 1, "X", "W", adopt=True).verb is Verb.ADOPT
    assert "started by launch 'X'" in restart_entry(False, 1, "X", "W", adopt=False).reason
    assert restart_entry(False, 1, "W", "W", adopt=False) == Decision(Verb.LOOK, 1)
    assert restart_look(Look(1, ready=False), 0).verb is Verb.WAIT
    assert restart_look(Look(1, ready=True, complete=True), 0).verb is Verb.REFUSE
    assert restart_look(Look(1, ready=True, not_ended="x", moved=True), 0).verb is Verb.AGAIN
    assert restart_look(Look(1, ready=True), 0) == Decision(Verb.CLAIM, 1)
    assert restart_look(Look(1, ready=True, not_ended="x"), 0) == Decision(Verb.JOIN, 1)
    wait = restart_look(Look(1, ready=True, not_ended="x", held=True), 3)
    assert wait.verb is Verb.WAIT and wait.reason.startswith("rank 3 already ran in attempt 1, which has not ended")
    caps = Caps(max_retries=1, max_no_progress=2)
    assert over_retries(caps, 2) is None and "max_retries" in str(over_retries(caps, 3))
    same = AttemptRecord(checkpoints={"files": 0}, previous_cause="hang on rank 0")
    none = AttemptRecord()
    assert no_progress(caps, 2, [none], {"files": 0}, "hang on rank 0") is None  # one attempt: too few to judge
    assert "failed the same way" in str(no_progress(caps, 3, [none, same], {"files": 0}, "hang on rank 0"))
    assert no_progress(caps, 3, [none, same], {"files": 1}, "hang on rank 0") is None  # a checkpoint: progress


def test_damaged_claims_heartbeats_and_failures_are_read_as_nothing_not_a_traceback(tmp_path: Path) -> None:
    """A restart reads the previous attempt's files; a value of the wrong type in one (a torn or
    hand-edited file) says nothing, as the audit reads it, instead of ending the agent."""
    from agent.coord.attempts import _files as files

    run = RunDir.create(tmp_path, "d1", mode=0o750)
    for rel, doc in (
        (names.attempt_claim(1), {"state": "claimed", "token": "t", "written_at": "soon", "checkpoints": 3}),
        (names.heartbeat(0), {"seq": 1, "phase": "driver", "written_at": [1]}),
    ):
        (run.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (run.path / rel).write_text(json.dumps(doc))
    timing = Timing(heartbeat_timeout=6.0, startup_timeout=60.0, deadline=time.monotonic() + 1, poll=0.05)
    assert files.ended(run, 1, timing) is None  # nothing readable says it still runs
    assert files.claim_token(run, 1) == "t"
    assert files.claims(run, 1) == [AttemptRecord("claimed", "t")]
    failure = {"kind": "hang", "cause": "x", "wall_time": "late", "reacting_to": None, "exit_code": "1"}
    (run.path / names.failure(0)).parent.mkdir(parents=True, exist_ok=True)
    (run.path / names.failure(0)).write_text(json.dumps(failure))
    assert files.cause_signature(run, 1) == "hang on rank 0"
