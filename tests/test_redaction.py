"""Redaction as a second line (issue 47 item 3): the one rule of schemas/credentials.py, its fast
path, and every writer of the run directory, `gym-launch status` and the audit's reports going
through it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import credentials, names
from tests.harness import BIN, assert_artifacts_valid, kill_tree_by_session, launch_local, small_spec, uid

DRIVER = Path(__file__).resolve().parent / "data" / "leaky_driver.py"

# Words a fast path could get wrong: every kind the rule redacts, near misses, odd spacing, non-ASCII.
_WORDS = """
    --api-key --api_key -token --hub_token --password= --pass-rate HF_TOKEN= token= keyboard passage path
    author PAT key Key: auth = - -- -x a=b sk- sk_live hf_ ghp_ github_pat_ glpat- xoxb- AKIAABCDEFGHIJKLMNOP
    AIza ya29. eyJhbGc.eyJzdWIi -----BEGIN RSA PRIVATE KEY----- task-based risk-free value47 paß= ﬀ ſk- é …
    ${runtime:HF_TOKEN} " ' /v1/chat?api_key= --secret NAME
"""
PIECES = tuple(_WORDS.split())
SEPARATORS = (" ", "", "\n", "\t", "  ", "=", "\u00a0", "\x1c")


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) + rng.choice(SEPARATORS) for _ in range(rng.randint(1, 7))]
        out.append("".join(parts))
    return out


def test_the_fast_path_changes_nothing_the_rule_would_redact(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _texts(6000, seed=47)
    fast = [credentials.redact_text(t) for t in texts]
    fast_argv = [credentials.redact_argv(t.split("|")) for t in texts]
    monkeypatch.setattr(credentials, "_may_hold", lambda _text: True)  # the rule on every text
    assert [credentials.redact_text(t) for t in texts] == fast
    assert [credentials.redact_argv(t.split("|")) for t in texts] == fast_argv
    assert sum(f != t for f, t in zip(fast, texts, strict=True)) > 1000  # the corpus does hold credentials


def test_a_frozen_dataclass_is_redacted_field_by_field_and_keeps_its_shape() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Row:
        cause: str
        argv: tuple[str, ...]
        count: int

    row = credentials.redact(Row("exit 1: train --api-key hunter2xyz47", ("x", "--token", "abc47"), 3))
    assert row == Row("exit 1: train --api-key <redacted>", ("x", "--token", "<redacted>"), 3)


# Values that look like credentials by the rule: a token by its prefix, a value by its flag.
TOKEN = "sk-live-redact47abcdef0123456789"
FLAG_VALUE = "hunter2redact47"
LEAKS = (TOKEN, FLAG_VALUE)


def _holding(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and any(v.encode() in p.read_bytes() for v in LEAKS)]


def _reports(run_dir: Path, tmp_path: Path) -> dict[str, str]:
    """What a user reads of a run: gym-audit's text, --json and --html, gym-launch status and --json."""
    html = tmp_path / "report.html"
    out = {}
    for name, argv in {
        "audit": ["gym-audit", "-v", str(run_dir), "--html", str(html)],
        "audit --json": ["gym-audit", "--json", str(run_dir)],
        "status": ["gym-launch", "status", str(run_dir), "--no-scheduler"],
        "status --json": ["gym-launch", "status", str(run_dir), "--json", "--no-scheduler"],
    }.items():
        done = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode in (0, 1), (name, done.stderr[-2000:])
        out[name] = done.stdout + done.stderr
    out["audit --html"] = html.read_text()
    return out


@pytest.mark.slow
def test_a_run_whose_driver_leaks_credentials_writes_none_and_reports_none(tmp_path: Path) -> None:
    """A real local run (2 replicas, the reference judge): the driver prints credentials, grades
    with them in its query and answer, and fails quoting them. No file of the run directory holds
    one; each writer redacted what it got; the audit's reports and `status` print none, even after
    an older version's records (written without redaction) are planted in the directory."""
    command = f'command = ["{sys.executable}", "{DRIVER}"]'
    spec = small_spec(replicas=2, driver=command, ray=False, judges=True)
    run = launch_local(tmp_path, spec, uid("leaky"), env={"LEAK_TOKEN": TOKEN, "LEAK_FLAG_VALUE": FLAG_VALUE})
    try:
        assert run.wait(180) != 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    leaked = [ln for ln in run.text.splitlines() if any(v in ln for v in LEAKS)]
    assert not leaked, leaked  # the console (the job log on a scheduler)
    assert _holding(d) == []
    seen = assert_artifacts_valid(d)  # every JSON artifact and every grades/gateway line
    assert names.grades(0) in seen
    grades = (d / names.grades(0)).read_text()
    assert "<redacted>" in grades and "capital of France" in grades  # redacted, not dropped
    log = (d / names.driver_log(0)).read_text()
    assert "--api-key <redacted> --lr 3e-4" in log and "HF_TOKEN=<redacted>" in log and "graded" in log
    # An older version's records, or a hand's: the readers redact what they print.
    failure = json.loads((d / names.failure(0)).read_text())
    failure["cause"] += f" (train.py --api-key {FLAG_VALUE} {TOKEN})"
    (d / names.failure(0)).write_text(json.dumps(failure))
    with (d / names.driver_log(0)).open("a") as fh:
        fh.write(f"Traceback (most recent call last):\nValueError: bad --api-key {FLAG_VALUE} {TOKEN}\n")
    for name, text in _reports(d, tmp_path).items():
        assert not any(v in text for v in LEAKS), (name, text[-3000:])
    assert "<redacted>" in _reports(d, tmp_path)["status"]  # the planted cause was read, and redacted


def test_the_audit_and_status_redact_what_an_older_version_wrote(tmp_path: Path) -> None:
    """Records and logs written without redaction (an older version, a hand): the audit's text,
    JSON and HTML reports, `gym-audit logs` and `gym-launch status` (text and JSON) print no
    credential of them."""
    from audit import _report_html, _report_json, _report_text
    from audit.api import audit_run
    from launch._status import HeartbeatClock, format_status, read_status
    from schemas import RunDir
    from tests.harness import rundirs

    b = rundirs.driver_failure(tmp_path)
    rank = b.driver_rank
    failure = json.loads((b.path / names.failure(rank)).read_text())
    failure["cause"] += f" (train.py --api-key {FLAG_VALUE} {TOKEN})"
    (b.path / names.failure(rank)).write_text(json.dumps(failure))
    with (b.path / names.driver_log(rank)).open("a") as fh:
        fh.write(f"Traceback (most recent call last):\nValueError: bad --api-key {FLAG_VALUE} {TOKEN}\n")
    result = audit_run(b.path, ask_scheduler=False)
    run = RunDir.open(b.path)
    status = read_status(run, HeartbeatClock(), 3)
    reports = {
        "text": _report_text.render(result),
        "json": _report_json.render(result),
        "html": _report_html.render(result),
        "status": format_status(status),
        "status json": json.dumps(status.to_json()),
        "logs": subprocess.run(
            [str(BIN / "gym-audit"), "logs", str(b.path)], capture_output=True, text=True, timeout=60, check=True
        ).stdout,
    }
    for name, text in reports.items():
        assert not any(v in text for v in LEAKS), (name, text)
    for name in ("text", "status", "logs"):
        assert "--api-key <redacted>" in reports[name], (name, reports[name])
