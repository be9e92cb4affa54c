"""schemas.names classifies a name by the few patterns of its head ("heartbeats", "judge", ...);
the answer must be the one a scan of the whole tables in order gives, for any name."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import names
from tests.test_names_parse import previous_parse as linear_parse

PIECES = [
    "spec", "addresses/", "address-", "heartbeats/", "heartbeat-", "failures/", "failure-", "acks/", "ack-",
    "phases-", "placement-", "cleanup-", "judge", "-", "_degraded", "canaries", "ray", "session", "layout", "head",
    "driver", "result", "stop", "agent", "grades", "attempts/", "claim", "run", "file", "job", "slurm", "walltime",
    "warning", "registry", "complete", "submission", "regrade", "0", "1", "12", "x", ".", "/", ".json", ".jsonl",
    ".log", ".out", ".toml", ".tmp", "A",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=6).map("".join))
def test_lookup_by_head_equals_a_scan_of_the_tables(relpath: str) -> None:
    assert names.parse(relpath) == linear_parse(relpath)
    assert names.schema_for(relpath) == next((s for p, s in names.ARTIFACT_PATTERNS if p.match(relpath)), None)
    assert names.is_known_log(relpath) == any(p.match(relpath) for p in names.LOG_PATTERNS)
    assert names.is_other_file(relpath) == any(p.match(relpath) for p in names.OTHER_FILES)
    jsonl = next((a.schema for a in names.JSONL_ARTIFACTS if a.pattern.match(relpath)), None)
    assert names.jsonl_schema_for(relpath) == jsonl


def test_every_name_the_writers_make_is_found() -> None:
    made = [
        names.address(3), names.heartbeat(3), names.failure(3), names.ack(3), names.phases(3), names.placement(3),
        names.cleanup(3), names.judge_endpoint("general", 3), names.judge_degraded(3), names.grades(3),
        names.grades(3, 2), names.driver_log(3), names.judge_log("general", 3), names.agent_log(3), names.ray_log(3),
        names.ray_session_log(3, "raylet.out"), names.SPEC, names.attempt_claim(2),
    ]  # fmt: skip
    for relpath in made:
        assert names.parse(relpath) is not None, relpath
        assert names.parse(relpath) == linear_parse(relpath), relpath
