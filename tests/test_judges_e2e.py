"""Judges under real agents: a managed reference judge on node 2 of a real 3-node Ray run (one
run, shared by the tests that only read it), or of a run without Ray where the judge's path is the
subject.

Faults are injected into the real judge server through GYM_REFERENCE_JUDGE_FAULTS (the agent
passes its environment to the judge), or by killing the judge process with a real signal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    LocalRun,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    read,
    slots,
    uid,
    wait_phase,
)
from tests.harness.agents import forget_agent_tmp_root

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRun]:
    """One real judged demo run on Ray, shared by the tests of this module that only read it (a
    Ray cluster costs ~25 CPU seconds): its `general-quality-ref` rubric in open-instruct's reply
    format and scale (json, 1-10), beside the default score-line rubric."""
    tmp = tmp_path_factory.mktemp("judged")
    spec = judge_spec(driver='command = ["python", "examples/demo_driver.py"]').replace(
        'profile = "general-quality-ref"\n',
        'profile = "general-quality-ref"\nreply_format = "json"\nscore_scale = [1, 10]\n',
    )
    with slots.holding(1):
        run = launch_local(tmp, spec, uid("json"), env={"DEMO_STEPS": "2"})
        try:
            run.wait(240)
        finally:
            kill_tree_by_session(run.proc)
    yield run
    root = forget_agent_tmp_root(tmp)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.ray
@pytest.mark.xdist_group("judged-run")  # one worker, one run (a module fixture is per worker)
def test_judge_is_placed_checked_and_graded_through(judged_run: LocalRun) -> None:
    run = judged_run
    assert run.proc.returncode == 0, run.text[-3000:]
    d = run.run_dir
    seen = assert_artifacts_valid(d)
    placement = read(d, names.placement(2))
    assert placement["judges"]["general"]["devices"] == [1]
    assert placement["ray"]["devices"] == [0] and placement["ray"]["num_gpus"] == 1
    assert "1" not in placement["ray"]["cuda_visible_devices"].split(",")
    assert names.judge_endpoint("general", 2) in seen
    registry = read(d, names.REGISTRY)
    assert set(registry["bindings"]) == {"general-quality", "general-quality_ref"}
    # Clients get the judge's gateway; the judge itself is behind it.
    assert registry["judges"]["general"]["upstream"] == read(d, names.judge_endpoint("general", 2))["endpoint"]
    assert registry["judges"]["general"]["endpoint"] == read(d, names.gateway_record("general"))["endpoint"]
    canaries = read(d, names.CANARIES)
    assert canaries["passed"] and len(canaries["bindings"]) == 2
    for b in canaries["bindings"]:
        good = [s for s in b["samples"] if s["answer"] == "known-good"]
        bad = [s for s in b["samples"] if s["answer"] == "known-bad"]
        assert len(good) == len(bad) == 3
        assert all(g["score"] > x["score"] for g, x in zip(good, bad, strict=True))
    assert read(d, names.DRIVER_RESULT)["judge_replies"] > 0
    assert "POST /v1/chat/completions" in (d / names.judge_log("general", 2)).read_text()
    # The demo's grades (through bindings_from_registry) are in grades-0.jsonl, validated above.
    grades = [json.loads(x) for x in (d / names.grades(0)).read_text().splitlines()]
    assert names.grades(0) in seen and len(grades) == read(d, names.DRIVER_RESULT)["judge_replies"]
    assert {g["outcome"] for g in grades} == {"graded"}
    assert_nothing_left(d)
    audit(d, verdict="pass")


@pytest.mark.ray(seconds=1)
@pytest.mark.xdist_group("judged-run")  # one worker, one run (a module fixture is per worker)
def test_a_json_rubric_run_passes_and_its_mutated_copies_fail(judged_run: LocalRun, tmp_path: Path) -> None:
    """A rubric in open-instruct's reply format and scale (json, 1-10): the registry records it,
    canaries and the driver grade through it, and the audit passes. Then mutated copies of that
    real run directory: each mutation is caught by the right check."""
    from audit.api import audit_run

    run = judged_run
    assert run.proc.returncode == 0, run.text[-3000:]
    d = run.run_dir
    assert_artifacts_valid(d)
    rubric = read(d, names.REGISTRY)["rubrics"]["general-quality-ref"]
    assert (rubric["reply_format"], rubric["score_scale"]) == ("json", [1, 10])
    assert read(d, names.CANARIES)["passed"]
    assert read(d, names.DRIVER_RESULT)["judge_replies"] > 0
    assert_nothing_left(d)
    audit(d, verdict="pass")

    def mutated(tag: str, change: object) -> set[str]:
        copy = tmp_path / tag / run.run_dir.name
        shutil.copytree(run.run_dir, copy, symlinks=True)
        change(copy)  # type: ignore[operator]
        result = audit_run(copy)
        assert result.verdict == "fail", tag
        return {f.code for f in result.findings if f.severity == "error"}

    def edit(rel: str, fn: object) -> object:
        def apply(d: Path) -> None:
            doc = read(d, rel)
            fn(doc)  # type: ignore[operator]
            (d / rel).write_text(json.dumps(doc))

        return apply

    assert "cleanup.missing" in mutated("nocleanup", lambda d: (d / names.cleanup(1)).unlink())
    assert "complete.missing_acks" in mutated("noack", lambda d: (d / names.ack(2)).unlink())
    assert "driver.no_judge_replies" in mutated(
        "noreplies", edit(names.DRIVER_RESULT, lambda doc: doc.update(judge_replies=0))
    )
    assert "devices.judge_in_ray_mask" in mutated(
        "mask", edit(names.placement(2), lambda doc: doc["ray"].update(cuda_visible_devices="0,1"))
    )
    assert "canary.failed" in mutated(
        "canary", edit(names.CANARIES, lambda doc: doc.update(passed=False))
    ) or "canary.inconsistent" in mutated("canary2", edit(names.CANARIES, lambda doc: doc.update(passed=False)))
    codes = mutated("layout", edit(names.RAY_LAYOUT, lambda doc: doc["actual"].update({"127.0.0.3": 3.0})))
    assert codes & {"ray_layout.actual_mismatch", "ray_layout.failed"}, codes
    assert "schema.violation" in mutated("schema", edit(names.heartbeat(0), lambda doc: doc.update(seq="x")))


@pytest.mark.ray(seconds=5)  # Ray is planned: that it never starts is the point
def test_missing_binding_in_data_fails_before_any_gpu_work(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    row = {"metadata": {"judge_query": "Hi?", "verifiers": [{"name": "general-helpfulness"}]}}
    data.write_text(json.dumps(row) + "\n")
    spec = judge_spec() + f'[data]\ntrain = "{data}"\n'
    run = launch_local(tmp_path, spec, uid("data"))
    try:
        assert run.wait(120) != 0
    finally:
        kill_tree_by_session(run.proc)
    fails = failures(run.run_dir)
    assert fails and all(f["kind"] in ("data", "peer_failure") for f in fails.values())
    data_fail = next(f for f in fails.values() if f["kind"] == "data")
    assert data_fail["phase"] == "data_check"  # the phase that runs the data check, named for it
    assert '[judging.bindings."general-helpfulness"]' in data_fail["cause"]
    assert not (run.run_dir / names.RAY_HEAD).exists()  # Ray never started
    assert not list(run.run_dir.glob("judge-general-*.json"))  # nor the judge
    assert_nothing_left(run.run_dir)


def test_judge_crash_mid_run_stops_every_replica(tmp_path: Path) -> None:
    run = launch_local(tmp_path, judge_spec(ray=False), uid("crash"))  # the judge's path: no Ray needed
    try:
        wait_phase(run.run_dir, 0, "driver", 150)
        judge_pid = read(run.run_dir, names.judge_endpoint("general", 2))["pid"]
        os.kill(judge_pid, signal.SIGKILL)
        assert run.wait(60) != 0
    finally:
        kill_tree_by_session(run.proc)
    fails = failures(run.run_dir)
    assert fails[2]["kind"] == "judge" and fails[2]["log"] == names.judge_log("general", 2)
    assert "judge-general" in fails[2]["cause"]
    assert fails[0]["reacting_to"]["rank"] == 2 and fails[1]["reacting_to"]["rank"] == 2
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=2, kind="judge")


def test_judge_hang_fails_after_three_health_probes(tmp_path: Path) -> None:
    """The judge's /health hangs 20 s after it started, while the driver runs. Without Ray: a slow
    Ray start on a loaded machine would move the startup past that moment."""
    spec = judge_spec(ray=False)
    run = launch_local(tmp_path, spec, uid("hang"), env={"GYM_REFERENCE_JUDGE_FAULTS": "hang-health-after=20"})
    try:
        assert run.wait(180) != 0
    finally:
        kill_tree_by_session(run.proc)
    fails = failures(run.run_dir)
    assert fails[2]["kind"] == "judge_health", fails
    assert "3 consecutive" in fails[2]["cause"]
    assert fails[0]["reacting_to"]["rank"] == 2
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=2, kind="judge_health")


def test_wrong_judge_fails_canary_and_driver_never_starts(tmp_path: Path) -> None:
    spec = judge_spec(ray=False)  # the canaries come before the driver: no Ray needed
    run = launch_local(tmp_path, spec, uid("wrong"), env={"GYM_REFERENCE_JUDGE_FAULTS": "wrong"})
    try:
        assert run.wait(180) != 0
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    fails = failures(d)
    assert fails[0]["kind"] == "canary" and fails[0]["phase"] == "canaries"
    assert 'binding "general-quality"' in fails[0]["cause"]
    canaries = read(d, names.CANARIES)
    assert canaries["passed"] is False and not any(b["passed"] for b in canaries["bindings"])
    assert not (d / names.driver_log(0)).exists()  # the driver never started
    assert all(p["phase"] != "driver" for p in read(d, names.phases(0))["phases"])
    assert_artifacts_valid(d)
    assert_nothing_left(d)
    audit(d, verdict="fail", rank=0, kind="canary")
