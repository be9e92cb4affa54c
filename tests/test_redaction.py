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
    ${runtime:HF_TOKEN} " ' /v1/chat?api_key= --secret NAME ( ) (-- (--token "sk- 'hf_ ), ". [ ] ` ,
    https:// http://u: pw@h/ ? & ; /v1?x= &token= ?model=m @
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


def _by_the_rule(value: object) -> object:
    """redact's contract read literally, every string by the rule each time it occurs: what the
    one-pass walk (each distinct string read once) must return, type for type."""
    import dataclasses
    from collections.abc import Mapping

    if isinstance(value, str):
        return credentials.redact_text(value)
    if isinstance(value, Mapping):
        return {k: _by_the_rule(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            return [credentials.redact_text(v) for v in credentials.redact_argv(value)]
        return [_by_the_rule(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _by_the_rule(old)
            new = tuple(new) if isinstance(old, tuple) else new  # type: ignore[arg-type]
            if new != old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


def test_redact_reads_each_distinct_string_once_and_returns_what_the_rule_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An audit's result repeats its phase names, states and hosts across a thousand ranks: each
    distinct string goes through the rule once a call (issue 51 item 9), and the result is what
    reading every copy gives: rows kept as they are, copies where a string changed, tuples
    inside lists turned into lists, a NaN field a copy, a str subclass redacted as itself."""
    from dataclasses import dataclass

    class Word(str):
        pass

    @dataclass(frozen=True)
    class Span:
        phase: str
        at: float
        detail: str = ""

    @dataclass(frozen=True)
    class Rank:
        rank: int
        host: str
        spans: tuple[Span, ...]
        extra: object = None

    corpus = _texts(400, seed=51)
    clean = [t for t in corpus if credentials.redact_text(t) == t][:60]
    dirty = [t for t in corpus if credentials.redact_text(t) != t][:20]
    assert len(clean) == 60 and len(dirty) == 20

    def pick(i: int) -> str:  # every 7th a text the rule changes
        return dirty[i % 20] if i % 7 == 0 else clean[i % 60]

    texts = [pick(i) for i in range(200)]
    ranks = tuple(
        Rank(
            i,
            clean[i % 40],
            tuple(Span(texts[(i + j) % 60], float(j), clean[j % 7]) for j in range(6)),
            extra=[{"argv": texts[i % 9].split(" ")}, (1, texts[i % 11]), float("nan"), Word(texts[i % 13])]
            if i % 5 == 0
            else None,
        )
        for i in range(300)
    )
    doc = {"ranks": ranks, "notes": [texts[i % 25] for i in range(100)], "nan": Span("x", float("nan"))}
    expected = _by_the_rule(doc)
    read: list[str] = []
    rule = credentials.redact_text

    def counting(text: str) -> str:
        read.append(text)
        return rule(text)

    monkeypatch.setattr(credentials, "redact_text", counting)
    got = credentials.redact(doc)
    assert got == expected and repr(got) == repr(expected)
    assert sum(a is b for a, b in zip(got["ranks"], ranks, strict=True)) > 0  # unchanged rows kept as they are
    assert any(a is not b for a, b in zip(got["ranks"], ranks, strict=True))  # the corpus changes some
    plain = [t for t in read if type(t) is str]
    assert len(plain) == len(set(plain)), "a string was read by the rule more than once in one call"


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


# -- each writer, alone ------------------------------------------------------------------------------


def _clean(text: str) -> None:
    assert not any(v in text for v in LEAKS), text
    assert "<redacted>" in text, text


def test_a_grade_record_redacts_the_request_the_reply_and_the_error(tmp_path: Path) -> None:
    from agent.judges._grade_log import GradeLog
    from agent.judges._recorder import GradeRecorder
    from agent.judges.rubrics import resolve_rubric
    from schemas import violations
    from schemas.vocab import GradeOutcome
    from tests.harness.grades import diagnostics as grade_diagnostics

    rubric = resolve_rubric("quality", {"profile": "general-quality", "max_output_tokens": 8, "temperature": 0.0})
    recorder = GradeRecorder(GradeLog(tmp_path, 0), rank=0, attempt=1, fingerprint="f" * 64)
    diagnostics = grade_diagnostics(
        request={"messages": [{"role": "user", "content": f"grade this: {TOKEN}"}]},
        raw_reply=f"Score: 1 (--api-key {FLAG_VALUE})",
    )
    recorder.record(
        binding="b", judge="j", rubric=rubric, outcome=GradeOutcome.INVALID, score=None,
        error=f"HF_TOKEN={FLAG_VALUE}", diagnostics=diagnostics,
    )  # fmt: skip
    recorder.log.close()  # type: ignore[union-attr]
    text = (tmp_path / names.grades(0)).read_text()
    _clean(text)
    line = json.loads(text)
    assert not violations("grade", line), violations("grade", line)
    assert line["error"] == "HF_TOKEN=<redacted>"
    assert line["diagnostics"]["raw_reply"] == "Score: 1 (--api-key <redacted>)"


def test_a_gateway_line_redacts_its_path_and_error(tmp_path: Path) -> None:
    from agent.judges._gateway_log import GatewayLog, RequestLine
    from schemas import violations

    log = GatewayLog(str(tmp_path), "general", rank=0, attempt=1, fingerprint="f" * 64, max_bytes=1 << 20, keep=1)
    line = RequestLine(
        1.0, "127.0.0.1:5", "POST", f"/v1/chat/completions?api_key={FLAG_VALUE}", True, False, "0" * 64, 10
    )
    line.error = f"upstream said: bad --api-key {FLAG_VALUE}"
    log.add(line)
    log.close()
    text = (tmp_path / names.gateway_log("general")).read_text()
    _clean(text)
    assert json.loads(text)["path"] == "/v1/chat/completions?api_key=<redacted>"
    assert not violations("judge-gateway", json.loads(text))


def test_the_driver_tee_redacts_lines_split_anywhere_and_keeps_other_bytes(tmp_path: Path) -> None:
    """The pipe may cut a line (and a token, or a flag from its value) anywhere: whole lines are
    redacted; bytes that are no UTF-8 and a last line without a newline reach the log as they were."""
    import os

    from agent.lifecycle._console_tee import ConsoleTee

    out = (f"step 1 --api-key {FLAG_VALUE} ok\nvalue {TOKEN}\r progress 50%\r".encode() + b"\xff\xfe raw\n"
           + f"last words HF_TOKEN={FLAG_VALUE}".encode())  # fmt: skip
    log = os.open(tmp_path / "driver.log", os.O_WRONLY | os.O_CREAT, 0o600)
    console = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT, 0o600)
    tee = ConsoleTee(log, "[rank 0 driver] ", console_fd=console)
    for i in range(0, len(out), 7):  # every token and the flag cut from its value at some write
        os.write(tee.write_fd, out[i : i + 7])
    tee.close_child_end()
    tee.join(10)
    os.close(log)
    os.close(console)
    data = (tmp_path / "driver.log").read_bytes()
    assert data == (
        b"step 1 --api-key <redacted> ok\nvalue <redacted>\r progress 50%\r\xff\xfe raw\nlast words HF_TOKEN=<redacted>"
    )
    assert tee.bytes == len(out)
    _clean((tmp_path / "console").read_text(errors="replace"))


def test_the_driver_tee_writes_a_line_without_its_end_once_the_output_pauses(tmp_path: Path) -> None:
    """A hung driver's last words (or a prompt) have no newline: they reach the log, redacted, once
    the output pauses, while the pipe is still open (a grandchild may hold it for long)."""
    import os
    import time

    from agent.lifecycle._console_tee import IDLE_FLUSH_S, ConsoleTee

    log = os.open(tmp_path / "driver.log", os.O_WRONLY | os.O_CREAT, 0o600)
    console = os.open(os.devnull, os.O_WRONLY)
    tee = ConsoleTee(log, "[rank 0 driver] ", console_fd=console)
    os.write(tee.write_fd, f"stuck at --api-key {FLAG_VALUE} waiting".encode())  # the pipe stays open
    deadline = time.monotonic() + 20 * IDLE_FLUSH_S
    while time.monotonic() < deadline and b"waiting" not in (tmp_path / "driver.log").read_bytes():
        time.sleep(0.05)
    assert (tmp_path / "driver.log").read_bytes() == b"stuck at --api-key <redacted> waiting"
    tee.close_child_end()
    tee.join(10)
    os.close(log)
    os.close(console)


def test_the_agents_library_log_records_and_the_kept_ray_logs_are_redacted(tmp_path: Path) -> None:
    import logging
    import os

    from agent.lifecycle import _logsetup
    from agent.ray import _logs
    from schemas import RunDir

    fd = os.open(tmp_path / "agent.log", os.O_WRONLY | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_WRONLY)
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        _logsetup.configure("[rank 0]", fd, console_fd=null)
        # A library's logger of its own name: one a library imported earlier in this worker (httpx's,
        # say) may have been quietened, which would make the record vanish rather than be redacted.
        logging.getLogger("gym.test.some_library").warning("POST with --api-key %s and %s", FLAG_VALUE, TOKEN)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        os.close(fd)
        os.close(null)
    _clean((tmp_path / "agent.log").read_text())

    session = tmp_path / "tmp" / "session_2026-12-04_00-00-00_000000_1" / "logs"
    session.mkdir(parents=True)
    (session / "raylet.out").write_text(f"worker started: python train.py --api-key {FLAG_VALUE} {TOKEN}\n")
    run = RunDir.create(tmp_path / "out", "u", mode=0o750)
    kept = _logs.keep(str(tmp_path / "tmp"), run, names.ray_session_dir(0), 1 << 20)
    assert kept.files == ("raylet.out",), kept
    _clean((run.path / names.ray_session_log(0, "raylet.out")).read_text())
