"""The record types (schemas/records/) and the one lenient decoder they share (schemas/lenient.py).

Damaged documents read as the documented defaults and never raise; every builder's output passes
its JSON Schema and reads back through its record type unchanged."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from schemas import RunDir, RunOutcome, Writer, names, records
from schemas.lenient import ABSENT, Absent, Lenient, decode, doc_field, nonempty_dict


@dataclass(frozen=True)
class Inner(Lenient):
    name: str
    size: int | None = None


@dataclass(frozen=True)
class Sample(Lenient):
    where: str = doc_field(given=True)
    text: str | None = None
    count: int | None = None
    ratio: float | None = None
    flag: bool | None = None
    label: str = "none"
    tags: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()
    devices: tuple[int, ...] | None = None
    extra: dict[str, Any] | None = None
    table: Mapping[str, Any] = field(default_factory=dict)
    inner: Inner | None = None
    inners: tuple[Inner, ...] = ()
    by_name: Mapping[str, Inner] = field(default_factory=dict)
    nested: int | None = doc_field(path=("a", "b"), key="c", default=None)
    renamed: str | None = doc_field(key="other-name", default=None)
    facts: dict[str, Any] | None = doc_field(read=nonempty_dict, default=None)


EMPTY = Sample(where="here")
DAMAGED: dict[str, Any] = {
    "null": None,
    "bool": True,
    "zero": 0,
    "float": 1.5,
    "str": "x",
    "empty-list": [],
    "mixed-list": [1, "a"],
    "empty-object": {},
    "object": {"k": 1},
    "nan": float("nan"),
    "huge": 10**400,  # an integer beyond any float
}


def test_a_non_object_is_no_record() -> None:
    for doc in (None, [], "x", 3, True):
        assert Sample.from_json(doc, where="here") is None


def test_missing_keys_read_as_the_defaults() -> None:
    assert Sample.from_json({}, where="here") == EMPTY


@pytest.mark.parametrize("value", DAMAGED.values(), ids=DAMAGED.keys())
def test_every_field_of_a_damaged_document_reads_as_its_default_or_its_type(value: Any) -> None:
    keys = [f.name for f in dataclasses.fields(Sample) if f.name != "where"] + ["other-name", "a"]
    rec = Sample.from_json(dict.fromkeys(keys, value), where="here")
    assert rec is not None and rec.where == "here"
    assert rec.text in (None, "x") and rec.count in (None, 0, 10**400)
    assert rec.ratio in (None, 0.0, 1.5)  # NaN and an integer beyond any float read as None
    assert rec.flag in (None, True) and rec.label in ("none", "x")
    assert rec.tags in ((), ("a",)) and rec.ids in ((), (1,))
    assert rec.devices in (None, ())  # [1, "a"]: one bad item spoils the list
    assert rec.extra in (None, {}, {"k": 1}) and rec.facts in (None, {"k": 1})
    assert rec.table in ({}, {"k": 1}) and rec.inner is None and rec.inners == () and rec.by_name == {}
    assert rec.nested is None and rec.renamed in (None, "x")


def test_bool_is_no_number_and_the_empty_string_no_name() -> None:
    rec = Sample.from_json({"count": True, "ratio": False, "ids": [True, 2], "label": ""}, where="w")
    assert rec is not None and (rec.count, rec.ratio, rec.ids, rec.label) == (None, None, (2,), "none")


def test_tuples_keep_good_items_and_optional_tuples_need_them_all() -> None:
    rec = Sample.from_json({"tags": ["a", 1, "", None], "ids": [1, "2", 3], "devices": [0, 1]}, where="w")
    assert rec is not None and (rec.tags, rec.ids, rec.devices) == (("a", ""), (1, 3), (0, 1))
    bad = Sample.from_json({"devices": [0, "1"]}, where="w")
    assert bad is not None and bad.devices is None


def test_nested_records_without_a_required_field_are_dropped() -> None:
    doc = {
        "inner": {"size": 3},
        "inners": [{"name": "a", "size": "x"}, {"size": 1}, 7, {"name": ""}],
        "by_name": {"x": {"name": "x", "size": 2}, "y": {}, "z": "not an object"},
        "a": {"b": {"c": 4}},
        "other-name": "r",
        "facts": {},
    }
    rec = Sample.from_json(doc, where="w")
    assert rec is not None
    assert rec.inner is None
    assert rec.inners == (Inner("a", None),)  # "" is no name: a required str must say something
    assert rec.by_name == {"x": Inner("x", 2)}
    assert (rec.nested, rec.renamed, rec.facts) == (4, "r", None)


def test_a_missing_given_field_makes_no_record() -> None:
    assert decode(Sample, {}) is None


def test_a_type_without_a_reader_is_refused_when_first_read() -> None:
    @dataclass(frozen=True)
    class Odd(Lenient):
        value: set[int] = field(default_factory=set)

    with pytest.raises(TypeError, match="no lenient reader"):
        Odd.from_json({})


def test_the_failure_record_reads_what_the_audit_needs_from_a_damaged_file() -> None:
    doc = {
        "kind": 3,
        "reacting_to": {"rank": "1", "incarnation": "i1", "kind": "signal"},
        "peers": [1, True, "2", 3],
        "sender": "slurmstepd",
        "checks": ["gpus", 1],
        "hang": {},
        "wall_time": "soon",
    }
    rec = records.FailureRecord.from_json(doc, rank=2, relpath="failures/failure-2.json")
    assert rec is not None
    assert (rec.kind, rec.cause, rec.wall_time) == ("unknown", "(no cause recorded)", None)
    assert (rec.reacting_to, rec.reacting_to_incarnation, rec.reacting_to_kind) == (None, "i1", "signal")
    assert (rec.peers, rec.sender, rec.sender_pid, rec.checks, rec.hang) == ((1, 3), None, None, ("gpus",), None)


# -- every builder, validated by its schema, reads back through its record type (placement's:
# tests/test_contract.py, through the audit's view) ----------------------------------------------


def _written(tmp_path: Path, relpath: str, fields: Mapping[str, Any], rank: int = 3) -> dict[str, Any]:
    with RunDir.create(tmp_path, "records", mode=0o750) as run:
        if "/" in relpath:
            run.ensure_dir(relpath.rpartition("/")[0])
        run.write_artifact(relpath, Writer("f" * 64, rank, "inc-3"), fields)  # validates against the schema
        doc: dict[str, Any] = json.loads((run.path / relpath).read_bytes())
    return doc


def test_failure_round_trip(tmp_path: Path) -> None:
    fields = records.failure_fields(
        kind="signal",
        cause="SIGTERM from slurmstepd",
        phase="driver",
        wall_time=100.5,
        monotonic_time=7.0,
        log="agent-3.log",
        reacting_to={"rank": 1, "incarnation": "inc-1", "kind": "child_exit"},
        peers=(0, 1),
        sender={"pid": 12, "uid": 0, "name": "slurmstepd"},
        exit_code=-15,
        child="driver",
        signal="SIGTERM",
        since_start=3.5,
        checks=("gpus",),
        hang={
            "source": "progress",
            "timeout_key": "progress_timeout",
            "timeout": 60.0,
            "idle_seconds": 61.0,
            "last_progress_at": None,
            "last_step": None,
            "progress_count": 0,
        },
    )
    rel = names.failure(3)
    rec = records.FailureRecord.from_json(_written(tmp_path, rel, fields), rank=3, relpath=rel)
    assert rec == records.FailureRecord(
        rank=3,
        relpath=rel,
        kind="signal",
        cause="SIGTERM from slurmstepd",
        phase="driver",
        wall_time=100.5,
        since_start=3.5,
        log="agent-3.log",
        reacting_to=1,
        reacting_to_incarnation="inc-1",
        peers=(0, 1),
        writer="agent",
        incarnation="inc-3",
        fingerprint="f" * 64,
        exit_code=-15,
        child="driver",
        signal="SIGTERM",
        sender="slurmstepd",
        reacting_to_kind="child_exit",
        sender_pid=12,
        sender_uid=0,
        monotonic_time=7.0,
        attempt=1,
        checks=("gpus",),
        hang=fields["hang"],
    )


def test_address_round_trip(tmp_path: Path) -> None:
    fields = records.address_fields(
        address="10.0.0.3",
        address_explicit=False,
        hostname="node3",
        visible_devices=("0", "1"),
        pid=42,
        started_at=1.0,
        replicas=4,
        scheduler_job={"scheduler": "slurm", "job": "77", "node": "n3", "restart": 1},
        pool="gpu",
        doorbell_port=40000,
    )
    rel = names.address(3)
    rec = records.AddressRecord.from_json(_written(tmp_path, rel, fields), rank=3, relpath=rel)
    job = records.SchedulerJobRef("slurm", "77", "n3", 1)
    assert rec == records.AddressRecord(3, rel, "10.0.0.3", "node3", ("0", "1"), "inc-3", job, "gpu")
    bare = records.address_fields(
        address="10.0.0.3", address_explicit=True, hostname="h", visible_devices=(), pid=1, started_at=1, replicas=1
    )
    assert not {"scheduler_job", "pool", "doorbell_port"} & set(bare)


def test_phases_round_trip(tmp_path: Path) -> None:
    running = records.phase_entry(phase="rendezvous", started_at=1.0, outcome="running", detail="")
    done = {**records.phase_entry(phase="plan_agreement", started_at=2.0, outcome="ok", detail="n"), "ended_at": 2.5}
    fields = records.phases_fields(state="STARTING", node_index=None, address="10.0.0.3", entries=[done, running])
    rel = names.phases(3)
    rec = records.PhasesRecord.from_json(_written(tmp_path, rel, fields), rank=3, relpath=rel)
    spans = (
        records.PhaseSpan("plan_agreement", 2.0, 2.5, "ok", "n"),
        records.PhaseSpan("rendezvous", 1.0, None, "running"),
    )
    assert rec == records.PhasesRecord(3, rel, "STARTING", spans)


def test_heartbeat_complete_ack_and_driver_stop_round_trip(tmp_path: Path) -> None:
    progress = {"progress": {"idle_seconds": 1.0, "stuck": False, "source": "progress"}}
    beat = records.heartbeat_fields(seq=5, phase="driver", fs_ops={"read": 1, "write": 2, "list": 3}, extra=progress)
    read = records.HeartbeatRecord.from_json(_written(tmp_path / "h", names.heartbeat(3), beat))
    assert read is not None and read.written_at is not None
    assert read == records.HeartbeatRecord(5, "driver", read.written_at)
    done = records.complete_fields(driver_rank=3, driver_seconds=12.34567)
    assert records.CompleteRecord.from_json(_written(tmp_path / "c", names.COMPLETE, done)) == (
        records.CompleteRecord(3, 0, 12.346)
    )
    ack = _written(tmp_path / "a", names.ack(3), records.ack_fields())
    assert records.AckRecord.from_json(ack) == records.AckRecord("success")
    stop = records.driver_stop_fields(reason="x" * 3000, grace_s=30.0, outcome="exited", exit_code=0, after_s=1.23456)
    assert records.DriverStopRecord.from_json(_written(tmp_path / "s", names.DRIVER_STOP, stop)) == (
        records.DriverStopRecord("exited", 30.0, 1.235, "x" * records._driver_stop.REASON_MAX, 0)
    )


def test_ray_head_and_layout_round_trip(tmp_path: Path) -> None:
    head = records.ray_head_fields(
        gcs_address="10.0.0.1:6379", ray_nodes=2, large_cluster=True, settings={"RAY_health_check_period_ms": "5000"}
    )
    assert records.RayHeadRecord.from_json(_written(tmp_path / "h", names.RAY_HEAD, head)) == (
        records.RayHeadRecord("10.0.0.1:6379", 2, True, {"RAY_health_check_period_ms": "5000"})
    )
    layout = records.ray_layout_fields(
        head_address="10.0.0.1",
        ray_address="10.0.0.1:6379",
        expected={"10.0.0.1": 2.0, "10.0.0.2": 2.0},
        actual={"10.0.0.1": 2.0},
        live_nodes=[{"address": "10.0.0.1", "gpus": 2.0, "node_id": "n1"}],
        passed=False,
        problems=["10.0.0.2 missing"],
        waited_s=1.23456,
    )
    assert records.RayLayoutRecord.from_json(_written(tmp_path / "l", names.RAY_LAYOUT, layout)) == (
        records.RayLayoutRecord(
            "10.0.0.1",
            "10.0.0.1:6379",
            {"10.0.0.1": 2.0, "10.0.0.2": 2.0},
            {"10.0.0.1": 2.0},
            False,
            ("10.0.0.2 missing",),
        )
    )


def test_cleanup_round_trip_and_damaged_items_keep_their_index(tmp_path: Path) -> None:
    group = {"name": "driver", "pid": 10, "session": 10, "how": "sigkill", "exit_code": -9, "swept": 0, "seconds": 0.5}
    fields = records.cleanup_fields(
        outcome=RunOutcome.FAILURE,
        groups=[group],
        leftover_pids=[11],
        extra={"corrupt_heartbeats": {"2": 1}},
    )
    rel = names.cleanup(3)
    rec = records.CleanupRecord.from_json(_written(tmp_path, rel, fields), rank=3, relpath=rel)
    assert rec == records.CleanupRecord(3, rel, "agent", "failure", (group,), (11,), {}, {"2": 1}, ())
    damaged = records.CleanupRecord.from_json(
        {"groups": [3, {"how": "sigkill"}], "leftover_pids": [1, "2"]}, rank=0, relpath="c"
    )
    assert damaged is not None and damaged.groups == ({}, {"how": "sigkill"}) and damaged.leftover_pids == (1,)


def test_preflight_round_trip(tmp_path: Path) -> None:
    check = {"check": "shm", "mode": "fail", "status": "failed", "seconds": 0.1, "summary": "s", "problems": ["small"]}
    fields = records.preflight_fields(
        node_index=1,
        address="10.0.0.2",
        hostname="h" * 300,
        scheduler_node="n2",
        passed=False,
        seconds=0.1234567,
        checks=[check],
    )
    assert "gpus" not in fields  # only when NVML told
    rel = names.preflight(3)
    rec = records.PreflightRecord.from_json(_written(tmp_path, rel, fields), rank=3, relpath=rel)
    assert rec == records.PreflightRecord(3, rel, 1, "10.0.0.2", "h" * 255, "n2", False, (check,))


@dataclass(frozen=True)
class Keyed(Lenient):
    upstream: str | None | Absent = ABSENT


def test_an_absent_key_is_told_from_an_explicit_null() -> None:
    assert Keyed.from_json({}) == Keyed(ABSENT)
    assert Keyed.from_json({"upstream": None}) == Keyed(None)
    assert Keyed.from_json({"upstream": 3}) == Keyed(None)  # present, unreadable
    assert Keyed.from_json({"upstream": "http://j"}) == Keyed("http://j")


def test_registry_round_trip(tmp_path: Path) -> None:
    common: dict[str, Any] = {
        "backend": None,
        "model": "m",
        "timeout": 30,
        "max_context_length": None,
        "context_check": "none",
        "max_concurrent_calls": 4,
    }
    managed = records.registry_judge(
        mode="managed", endpoint="http://g:1", upstream="http://j:2", rank=1, devices=(0,), **common
    )
    external = records.registry_judge(
        mode="external", endpoint="http://g:3", upstream="http://x", rank=None, devices=(), **common
    )
    judging = {"grades_max_bytes": 1, "grades_keep": 0, "degraded_window": 1, "degraded_max_share": 0.5}
    fields = records.registry_fields(
        judges={"a": managed, "b": external}, rubrics={}, bindings={"v": ("a", "r")}, judging=judging
    )
    rec = records.RegistryRecord.from_json(_written(tmp_path, names.REGISTRY, fields))
    assert rec == records.RegistryRecord(
        judges={
            "a": records.RegistryJudge("managed", "http://g:1", "http://j:2", 1),
            "b": records.RegistryJudge("external", "http://g:3", "http://x", None),
        },
        rubrics={},
        bindings={"v": records.RegistryBinding("a", "r")},
    )
    before_gateways = records.RegistryRecord.from_json({"judges": {"a": {"endpoint": "http://j"}}})
    assert before_gateways is not None and before_gateways.judges["a"].upstream is ABSENT


def test_judge_endpoint_and_gateway_round_trip(tmp_path: Path) -> None:
    ep = records.judge_endpoint_fields(
        name="a",
        backend="reference",
        model="m",
        endpoint="http://h:2",
        host="h",
        port=2,
        pid=9,
        devices=(0, 1),
        argv=("x",),
        ready_after_s=1.23456,
        log="judge-a-3.log",
    )
    rel = names.judge_endpoint("a", 3)
    rec = records.JudgeEndpointRecord.from_json(_written(tmp_path / "e", rel, ep), judge="a", rank=3, relpath=rel)
    assert rec == records.JudgeEndpointRecord("a", 3, rel, "http://h:2", (0, 1), True)
    gw = records.gateway_fields(
        judge="a",
        mode="managed",
        endpoint="http://h:5",
        host="h",
        port=5,
        pid=10,
        upstream=None,
        max_concurrent_calls=4,
        requests_log=names.gateway_log("a"),
        log="gateway-a-3.log",
    )
    rel = names.gateway_record("a")
    got = records.GatewayRecord.from_json(_written(tmp_path / "g", rel, gw), judge="a", relpath=rel)
    assert got == records.GatewayRecord("a", rel, "http://h:5", None)


def test_canaries_round_trip_and_quoted_values_as_written(tmp_path: Path) -> None:
    sample = {"repetition": 0, "answer": "known-good", "score": 1.0, "reply_excerpt": "SCORE: 1", "latency_s": 0.1}
    binding = records.canary_binding(
        verifier="v",
        judge="a",
        rubric="r",
        model="m",
        model_listed=True,
        listed_models=("m",),
        passed=True,
        reason="ok",
        samples=[sample],
    )
    rnd = records.canary_round(judge="a", at="2026-01-01T00:00:00.000Z", passed=True, bindings=[binding])
    fields = records.canaries_fields(passed=True, repetitions=1, bindings=[binding], rounds=[rnd])
    rec = records.CanariesRecord.from_json(_written(tmp_path, names.CANARIES, fields))
    item = records.CanaryBinding("v", "a", "r", True, True, "ok", (sample,), "a", "r")
    assert rec == records.CanariesRecord(True, (item,), (records.CanaryRound("a", True, (item,)),))
    assert set(records.canaries_fields(passed=True, bindings=[])) == {"passed", "bindings"}
    damaged = records.CanariesRecord.from_json({"bindings": [3, {"verifier": "v", "judge": 4}]})
    assert damaged is not None and len(damaged.bindings) == 2  # a damaged item keeps its index
    assert (damaged.bindings[1].judge, damaged.bindings[1].judge_as_written) == (None, 4)


def test_driver_result_round_trip_keeps_the_quoted_counts_as_written(tmp_path: Path) -> None:
    given = {"optimizer_steps": 2, "final_loss": 0.5, "policy_version": 2, "policy_refreshes": 1, "judge_replies": 0}
    fields = records.driver_result_fields({**given, "losses": [0.7, 0.5]})
    rec = records.DriverResultRecord.from_json(_written(tmp_path, names.DRIVER_RESULT, fields))
    assert rec == records.DriverResultRecord(2, 1, 0, (0.7, 0.5), 0.5, "agent", 2, 1, 0)
    with pytest.raises(ValueError, match="finite"):
        records.driver_result_fields({**given, "losses": [float("nan")]})
    damaged = records.DriverResultRecord.from_json({"optimizer_steps": "x", "losses": [1, "a"], "final_loss": None})
    assert damaged is not None and (damaged.optimizer_steps, damaged.optimizer_steps_as_written) == (None, "x")
    assert (damaged.losses, damaged.final_loss) == ((1, "a"), None)
    assert records.DriverResultRecord.from_json({}) == records.DriverResultRecord(final_loss=ABSENT)


def test_submission_round_trip(tmp_path: Path) -> None:
    fields = records.submission_fields(
        backend="slurm", job_id="77", job_file="job.sbatch", command=("sbatch", "job.sbatch"), submitted_at=1.5
    )
    rec = records.SubmissionRecord.from_json(_written(tmp_path, names.SUBMISSION, fields))
    assert rec == records.SubmissionRecord("slurm", "77", "slurm")
    damaged = records.SubmissionRecord.from_json({"backend": 3, "job_id": ""})
    assert damaged == records.SubmissionRecord(None, "", 3)


def test_regrade_round_trip(tmp_path: Path) -> None:
    profile = {
        "kind": "cpu",
        "partition": None,
        "partition_source": "default",
        "qos": None,
        "qos_source": "default",
        "walltime": "01:00:00",
        "walltime_bounds": ["default"],
        "walltime_source": "default",
    }
    fields = records.regrade_fields(
        source_run_dir="/out/cluster/u-0",
        source_uuid="u-0",
        source_name="n",
        source_fingerprint="f" * 64,
        command="grade",
        profile=profile,
    )
    rec = records.RegradeRecord.from_json(fields)  # the schema's profile has more required fields
    assert rec == records.RegradeRecord("/out/cluster/u-0", "cpu", (), "f" * 64)
    damaged = records.RegradeRecord.from_json({"profile": {"services": ["a", 3]}, "source_fingerprint": 7})
    assert damaged == records.RegradeRecord(None, None, ("a", 3), 7)


def test_attempt_records_round_trip(tmp_path: Path) -> None:
    checkpoints = {"files": 1, "bytes": 2, "newest": None}
    claim = records.claim_fields(token="t1", previous=1, mode="resume", checkpoints=checkpoints, previous_cause=None)
    got = records.AttemptRecord.from_json(_written(tmp_path / "c", names.attempt_claim(2), claim))
    assert got is not None and got.written_at is not None
    assert got == records.AttemptRecord("claimed", "t1", "resume", None, got.written_at, checkpoints, None)
    ready = records.attempt_fields(state="ready", token="t1", previous=1, archived=("a",))
    got = records.AttemptRecord.from_json(_written(tmp_path / "r", names.attempt_ready(2), ready))
    assert got is not None and got == records.AttemptRecord("ready", "t1", written_at=got.written_at)
    refused = records.refused_fields(token="t2", previous=1, reason="over the caps")
    got = records.AttemptRecord.from_json(_written(tmp_path / "x", names.attempt_refused(2), refused))
    assert got is not None and got == records.AttemptRecord("refused", "t2", None, "over the caps", got.written_at)
    # A damaged claim reads as nothing where it is damaged (the agent's restart reads it so: no traceback).
    bad = records.AttemptRecord.from_json({"written_at": "soon", "checkpoints": [], "previous_cause": 3})
    assert bad == records.AttemptRecord()


@dataclass(frozen=True)
class _Checked(Lenient):
    """A record whose __init__ does more than store its fields: decoded through it."""

    name: str = doc_field()
    seen: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name == "refused":
            raise ValueError("refused")


def test_a_decoded_record_is_the_record_its_constructor_builds() -> None:
    # The decoder fills a plain record's fields at once (schemas/lenient.py, _plain): the record is
    # still equal, hashable and frozen, and a record with a __post_init__ still goes through it.
    span = records.PhaseSpan.from_json({"phase": "ray", "started_at": 1.5, "outcome": "ok"})
    built = records.PhaseSpan(phase="ray", started_at=1.5, outcome="ok")
    assert span == built and hash(span) == hash(built) and repr(span) == repr(built)
    assert vars(span) == vars(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        span.phase = "other"  # type: ignore[misc]
    assert _Checked.from_json({"name": "a", "seen": ["x"]}) == _Checked(name="a", seen=("x",))
    with pytest.raises(ValueError, match="refused"):
        _Checked.from_json({"name": "refused"})
