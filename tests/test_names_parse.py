"""schemas.names.parse fills each Parsed from a table of rules per name head: its answers must be
the ones of the previous implementation (a scan of the tables in order, reading the rank and the
judge from whatever groups matched), field for field, for every kind of name and for names that
only look like one."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import names

PIECES = [
    "spec", "addresses/", "address-", "heartbeats/", "heartbeat-", "failures/", "failure-", "acks/", "ack-",
    "phases-", "placement-", "cleanup-", "preflight-", "judge", "-", "_degraded", "canaries", "gateway", "ray",
    "session", "layout", "head", "driver", "result", "stop", "agent", "policy", "grades", "ledger", "stacks",
    "collectives", "stack-requests/", "request-", "0123abcd", "attempts/", "claim", "regrade", "registry",
    "complete", "submission", "run", "file", "job", "0", "1", "12", "\u0663", "x", ".", "/", ".json", ".jsonl",
    ".log", ".out", ".tmp", "A",
]  # fmt: skip


def _rank_judge(m: re.Match[str]) -> tuple[int | None, str | None]:
    groups = m.groups()
    if len(groups) == 2:
        return int(groups[1]), groups[0]
    if groups and not groups[0].isdigit():
        return None, groups[0]
    return (int(groups[0]), None) if groups else (None, None)


def previous_parse(relpath: str) -> names.Parsed | None:
    """The implementation before the rules: every table scanned in order, groups read at match time."""
    if m := names.GRADES_RE.match(relpath):
        return names.Parsed("grade", int(m.group(1)), None, lines=True)
    if m := names.GATEWAY_LOG_RE.match(relpath):
        return names.Parsed("judge-gateway", None, m.group(1), lines=True)
    if m := names.LEDGER_RE.match(relpath):
        return names.Parsed("ledger", int(m.group(1)), None, lines=True, streamed=True)
    for pattern, schema in names.ARTIFACT_PATTERNS:
        if m := pattern.match(relpath):
            return names.Parsed(schema, *_rank_judge(m))
    for pattern, kind in names.LOG_KINDS:
        if m := pattern.match(relpath):
            return names.Parsed("log", *_rank_judge(m), log=kind)
    return None


def assert_same(relpath: str) -> None:
    got, want = names.parse(relpath), previous_parse(relpath)
    assert got == want, relpath
    if want is None:
        return
    assert got is not None
    # The same record in every respect, not only by ==: fields in order, their types, a frozen instance.
    assert list(vars(got).items()) == list(vars(want).items())
    assert [type(v) for v in vars(got).values()] == [type(v) for v in vars(want).values()]
    assert repr(got) == repr(want) and hash(got) == hash(want)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.rank = 0  # type: ignore[misc]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=6).map("".join))
def test_parse_answers_as_the_previous_implementation(relpath: str) -> None:
    assert_same(relpath)


def test_every_kind_of_name_parses_as_before() -> None:
    made = [
        names.SPEC, names.RAY_LAYOUT, names.RAY_HEAD, names.REGISTRY, names.CANARIES, names.COMPLETE,
        names.DRIVER_RESULT, names.DRIVER_STOP, names.SUBMISSION, names.REGRADE, names.attempt_claim(2),
        names.attempt_ready(2), names.attempt_refused(12), names.address(3), names.heartbeat(3),
        names.failure(3), names.ack(3), names.phases(3), names.placement(1023), names.cleanup(3),
        names.preflight(3), names.judge_endpoint("general", 3), names.judge_endpoint("my-judge_2", 0),
        names.judge_degraded(3), names.stacks(3), names.live_stacks(3, "0123abcd"), names.collectives(3),
        names.stacks_request("0123abcd"), names.gateway_record("general"), names.grades(3), names.grades(3, 2),
        names.gateway_log("general"), names.gateway_log("general", 4), names.ledger(3), names.driver_log(3),
        names.judge_log("general", 3), names.agent_log(3), names.ray_log(3), names.policy_log(3),
        names.gateway_process_log("general", 3), names.ray_session_log(3, "raylet.out"),
        "phases-\u0663.json", "judge-gateway-x.jsonl", "gateway-12.json", "run-file.toml", "job.sbatch",
    ]  # fmt: skip
    for relpath in made:
        assert_same(relpath)
    # Only the run file, the job and a gateway record without a judge name are no artifact or log.
    assert [r for r in made if previous_parse(r) is None] == ["gateway-12.json", "run-file.toml", "job.sbatch"]
