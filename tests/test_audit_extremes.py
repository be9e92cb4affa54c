"""Extreme numbers: every number of every artifact of a real run directory, set in turn to each
extreme JSON can carry, and the audit still ends with a verdict and no traceback.

A corrupt or hostile artifact (a `started_at` of -2**63 or -1e308) once made gym-audit raise
OverflowError/OSError while formatting a time. The bulk runs the audit API and all three
renderers in-process; a sample runs the real `gym-audit` command (text, --json, --html).
JSON has no NaN or infinity (the agent writes strict JSON), so they are not among the extremes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from audit import _report_html as report_html
from audit import _report_json as report_json
from audit import _report_text as report_text
from audit import _runs as runs
from audit import _schema_check as schema_check
from audit.api import audit_run
from audit.safedir import UnusableRunDir
from schemas import names, validation
from tests.harness.rundirs import SCENARIOS

EXTREMES: tuple[int | float, ...] = (-(2**63), 2**63, -1e308, 1e308, 0, -1)
BIN = Path(sys.executable).parent
LONG_NUMBER = re.compile(r"\d{25}")  # longer than any integer an extreme is (2**63: 19 digits)

JsonPath = tuple[str | int, ...]


def number_paths(doc: Any, prefix: JsonPath = ()) -> Iterator[JsonPath]:
    """Where `doc` holds a number (booleans are not numbers here)."""
    if isinstance(doc, bool):
        return
    if isinstance(doc, int | float):
        yield prefix
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from number_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from number_paths(v, (*prefix, i))


def with_value(doc: Any, path: JsonPath, value: int | float) -> Any:
    out = json.loads(json.dumps(doc))
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return out


@pytest.fixture
def memo_schema_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each audit here changes one artifact; the schema check of the unchanged others is a pure
    function of their bytes, so it is computed once (the changed one is checked for real). It is
    90% of an audit's time, and the bulk would not fit in a minute without this."""

    @cache
    def by_text(schema: str, text: bytes) -> list[validation.Violation]:
        return validation.violations(schema, orjson.loads(text))

    def violations(schema: str, doc: Any) -> list[validation.Violation]:
        try:
            text = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # an integer beyond 64 bits: checked every time
            return validation.violations(schema, doc)
        return by_text(schema, text)

    monkeypatch.setattr(schema_check, "violations", violations)


def audit_everything(path: Path, what: str) -> None:
    """The API and every renderer: a verdict, no exception, no internal error."""
    try:
        result = audit_run(path)
    except UnusableRunDir as exc:  # a spec.json the audit cannot use is exit 2, by design
        assert "spec.json" in str(exc), what
        return
    assert result.verdict in ("pass", "fail"), what
    assert "audit.internal" not in result.codes(), (what, [f.to_json() for f in result.findings])
    text = report_text.render(result)
    assert result.verdict.upper() in text, what
    doc_text = report_json.render(result)
    assert json.loads(doc_text, parse_constant=_no_constant)["verdict"] == result.verdict, what
    html = report_html.render(result)
    assert html.startswith("<!DOCTYPE html>"), what
    row = runs.row_from("run-1", result)  # gym-audit ls
    listing = runs.render_table([row]) + runs.render_json([row])
    for line in runs.render_json([row]).splitlines():
        json.loads(line, parse_constant=_no_constant)
    for out in (text, doc_text, html, listing):
        # Bounded: no time or duration printed digit by digit (1e308 with "%.1f" is 310 digits).
        assert LONG_NUMBER.search(out) is None, (what, LONG_NUMBER.search(out))


def _no_constant(name: str) -> None:
    raise AssertionError(f"not JSON: {name}")


# Every artifact of a failed run, and the ones only a successful run has (acks, complete.json,
# the driver's result): every kind of artifact the agent writes.
BULK = [("driver_failure", None), ("success", {"ack", "complete", "driver-result"})]


@pytest.mark.parametrize(("scenario", "schemas"), BULK, ids=[s for s, _ in BULK])
def test_every_number_of_every_artifact_at_every_extreme(
    scenario: str, schemas: set[str] | None, tmp_path: Path, memo_schema_check: None
) -> None:
    path = SCENARIOS[scenario](tmp_path / "base").path
    artifacts = []
    for p in sorted(path.rglob("*.json")):
        parsed = names.parse(str(p.relative_to(path)))
        if parsed is not None and (schemas is None or parsed.schema in schemas):
            artifacts.append(p)
    assert len(artifacts) >= (20 if schemas is None else 5)  # a whole run, or the success-only kinds
    mutations = 0
    for target in artifacts:
        original = target.read_bytes()
        doc = json.loads(original)
        try:
            for where in number_paths(doc):
                for value in EXTREMES:
                    target.write_text(json.dumps(with_value(doc, where, value)))
                    audit_everything(path, f"{target.relative_to(path)} {where} = {value!r}")
                    mutations += 1
        finally:
            target.write_bytes(original)
    assert mutations >= (250 if schemas is None else 10) * len(EXTREMES)


# The sample for the real command: the times every report formats, at the extremes that crashed it
# (a start time in the far past, an end or a failure in the far future, and the other way round).
CLI_SAMPLE = [
    ("phases-{r}.json", ("started_at",), 0),
    ("phases-{r}.json", ("phases", 0, "started_at"), 0),
    ("phases-{r}.json", ("phases", 2, "ended_at"), 1),
    ("failures/failure-{r}.json", ("wall_time",), 1),
]


@pytest.mark.parametrize("extremes", [(-(2**63), 1e308), (-1e308, 2**63)], ids=["int", "float"])
def test_gym_audit_command_on_extreme_times(extremes: tuple[int | float, int | float], tmp_path: Path) -> None:
    b = SCENARIOS["driver_failure"](tmp_path / "base")
    for pattern, where, which in CLI_SAMPLE:
        target = b.path / pattern.format(r=b.driver_rank)
        target.write_text(json.dumps(with_value(json.loads(target.read_text()), where, extremes[which])))
    html = tmp_path / "report.html"
    for args in ([], ["--json"], ["--html", str(html)]):
        proc = subprocess.run(
            [str(BIN / "gym-audit"), str(b.path), *args], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 1, (args, proc.stdout[-2000:], proc.stderr[-2000:])  # the driver failed
        assert "Traceback" not in proc.stderr, proc.stderr
        if args == ["--json"]:
            assert json.loads(proc.stdout)["verdict"] == "fail"
        else:
            assert "FAIL" in proc.stdout
    assert html.read_text().startswith("<!DOCTYPE html>")
    for args in (["ls", str(b.path.parent.parent)], ["ls", str(b.path.parent.parent), "--json"]):
        proc = subprocess.run([str(BIN / "gym-audit"), *args], capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert b.path.name in proc.stdout and LONG_NUMBER.search(proc.stdout) is None, proc.stdout
        if "--json" in args:
            json.loads(proc.stdout, parse_constant=_no_constant)
    shutil.rmtree(b.path)
