"""`gym-audit --json`'s first_cause carries every structured field of the failure record it comes
from (issue 35, item 8), so a script reading the audit's JSON need not open the records again. Run
directories are written by the real writers (tests/harness/rundirs.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main
from schemas import names
from tests.harness.rundirs import RunBuilder

REPO = Path(__file__).resolve().parents[1]
HEADER = ("writer", "incarnation", "attempt")  # the common header's fields that describe the failure


def _failure_fields() -> list[str]:
    doc = json.loads((REPO / "schemas" / "failure.schema.json").read_text())
    return [k for k in doc["properties"] if k != "schema"]


@pytest.mark.parametrize(
    ("kind", "facts"),
    [
        ("signal", {"signal": "SIGTERM", "sender": {"pid": 4242, "uid": 0, "name": "slurmstepd"}}),
        ("run_dir", {"fs_condition": "full"}),
        ("child_exit", {"exit_code": -9, "child": "ray-head"}),
        ("judge", {"judge": "general", "exit_code": 1, "child": "judge-general"}),
    ],
)
def test_first_cause_carries_every_field_of_its_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, facts: dict[str, Any]
) -> None:
    b = RunBuilder(tmp_path)
    b.startup()
    t = b.phase_start(1, "driver") + 3.0
    b.failure(1, kind, f"{kind} on rank 1", "driver", t, peers=[0, 2], **facts)
    b.phases(1, "driver", state="FAILED", last="failed", detail=kind)
    b.cleanup(1, "failure")
    b.react(0, 1, t + 0.5, to_kind=kind)
    record = json.loads((b.path / names.failure(1)).read_text())
    assert main([str(b.path), "--json"]) == 1
    first = json.loads(capsys.readouterr().out)["first_cause"]
    for field in _failure_fields() + list(HEADER):
        assert field in first, field
        # reacting_to is the rank it names; log, the record's or the audit's pick when it names none.
        if field not in ("reacting_to", "log") and field in record:
            assert first[field] == record[field], field
    for field in ("exit_code", "child", "signal", "sender", "fs_condition"):
        assert first[field] == facts.get(field), field
    assert first["peers"] == [0, 2] and first["reacting_to"] is None
    assert first["rank"] == 1
    assert main([str(b.path), "--json"]) == 1
    (reaction,) = json.loads(capsys.readouterr().out)["cascade"]  # same shape: what it reacts to, by name
    assert (reaction["reacting_to"], reaction["reacting_to_kind"]) == (1, kind)
    assert reaction["reacting_to_incarnation"] == b.incarnation[1]
