"""Facts cross from agent to audit as fields: a failure record carries its exit code, signal,
sender, judge and filesystem condition as fields the schema declares, the writers set them where
the failure is built (real children, a real full filesystem error), and the audit decides on
them, never on the cause's wording."""

from __future__ import annotations

import ast
import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.coord import durable
from agent.coord.failure_record import write_failure_record
from agent.ground.failure import Failure, FailureSignal
from agent.ground.reaper_channel import ReaperChannel
from agent.proc import tempdirs
from agent.proc.supervisor import ExitPolicy, Supervisor
from audit.api import audit_run
from schemas import FailureKind, RunDir, Writer, names, records, violations
from schemas.vocab import FsCondition
from tests.harness import small_spec
from tests.harness.agents import agent_tmp_root
from tests.harness.rundirs import T0, RunBuilder

REPO = Path(__file__).resolve().parent.parent
FP = "c" * 64


def _fields(**facts: object) -> dict[str, object]:
    return records.failure_fields(
        kind=FailureKind.CHILD_EXIT,
        cause="x",
        phase="driver",
        wall_time=T0,
        monotonic_time=1.0,
        log=None,
        reacting_to=None,
        **facts,  # type: ignore[arg-type]
    )


def test_the_builder_writes_only_the_facts_that_apply_and_the_schema_takes_them(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "facts", mode=0o750)
    plain = _fields()
    assert not {"exit_code", "child", "judge", "signal", "sender", "fs_condition"} & set(plain)
    full = _fields(
        exit_code=-15,
        child="ray-head",
        judge="general",
        signal="SIGTERM",
        sender={"pid": 0, "uid": 0, "name": None},
        fs_condition=FsCondition.FULL,
    )
    # write_artifact validates: a record of an older agent (no facts) and one with every fact.
    run.write_artifact(names.failure(0), Writer(FP, 0, "me"), plain)
    run.write_artifact(names.failure(1), Writer(FP, 1, "me"), full)
    doc = run.read_json(names.failure(1))
    assert doc is not None and (doc["fs_condition"], doc["exit_code"], doc["signal"]) == ("full", -15, "SIGTERM")
    for bad in ({"exit_code": "-15"}, {"signal": "TERM"}, {"fs_condition": "gone"}, {"exit_code": True}):
        assert violations("failure", {**doc, **bad}), bad


def test_a_record_whose_fact_breaks_the_schema_keeps_its_cause_but_not_the_fact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = RunDir.create(tmp_path, "badfact", mode=0o750)
    bad = Failure(kind=FailureKind.SIGNAL, cause="received SIGTERM", phase="driver", signal="TERM")
    assert write_failure_record(run, Writer(FP, 0, "me"), 0, bad, "driver")
    doc = run.read_json(names.failure(0))
    assert doc is not None and not violations("failure", doc)
    assert doc["kind"] == "internal" and "received SIGTERM" in doc["cause"] and "signal" not in doc
    assert "rejected by its schema" in capsys.readouterr().err


def test_the_filesystem_condition_is_named_from_the_errno() -> None:
    for code, condition in ((errno.ENOSPC, "full"), (errno.EDQUOT, "full"), (errno.EROFS, "unwritable")):
        exc = OSError(code, os.strerror(code))
        assert durable.fs_condition(exc) == condition
        assert durable.describe(exc) == f"shared filesystem {condition}: {exc}"  # the words people read


def test_durable_and_failure_do_not_import_each_other() -> None:
    """failure_record.py writes through durable.py's keeper; durable.py must not need it back."""

    def imported(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    assert "agent.coord.failure_record" not in imported(REPO / "agent" / "coord" / "durable.py")


def _supervised_exit(argv: list[str], kill: int | None) -> Failure:
    tripped = FailureSignal()
    sup = Supervisor(tripped, 2.0, ReaperChannel(None), lambda: "driver")
    try:
        group = sup.start(
            "judge-general",
            argv,
            env=dict(os.environ),
            log_fd=None,
            policy=ExitPolicy(FailureKind.JUDGE, "judge-general-0.log", judge="general"),
        )
        if kill is not None:
            os.kill(group.pid, kill)
        assert tripped.wait(20), "the child's exit was not noticed"
    finally:
        sup.stop_all()
        sup.halt()
    assert tripped.failure is not None
    return tripped.failure


def test_a_supervised_childs_exit_carries_its_code_name_and_judge() -> None:
    crashed = _supervised_exit([sys.executable, "-c", "raise SystemExit(3)"], None)
    assert (crashed.exit_code, crashed.child, crashed.judge, crashed.kind) == (3, "judge-general", "general", "judge")
    assert "exited with code 3 during driver" in crashed.cause  # the text is unchanged
    killed = _supervised_exit([sys.executable, "-c", "import time; time.sleep(60)"], signal.SIGTERM)
    assert killed.exit_code == -signal.SIGTERM


def _audit_codes(b: RunBuilder) -> dict[str, str]:
    result = audit_run(b.path)
    return {f.code: f.message for f in result.findings}


def test_the_audit_names_a_full_filesystem_from_the_field_not_the_words(tmp_path: Path) -> None:
    def run(name: str, fs_condition: str | None = None) -> dict[str, str]:
        b = RunBuilder(tmp_path / name)
        b.startup()
        t = b.phase_start(0, "driver") + 5.0
        cause = "shared filesystem full: [Errno 28] No space left on device (this agent's heartbeat writes failed)"
        b.failure(0, "run_dir", cause, "driver", t, fs_condition=fs_condition)
        b.phases(0, "driver", state="FAILED", last="failed")
        b.cleanup(0, "failure")
        for r in (1, 2):
            b.react(r, 0, t + 0.5, to_kind="run_dir")
        return _audit_codes(b)

    named = run("field", fs_condition="full")
    assert named["run_dir.unwritable"].startswith("shared filesystem full: ranks [0] could not write")
    assert "run_dir.unwritable" not in run("words")  # the same cause, no field: not a filesystem fact
    unwritable = run("rofs", fs_condition="unwritable")
    assert unwritable["run_dir.unwritable"].startswith("shared filesystem unwritable: ranks [0]")


# A real agent whose driver start raises what no step expects (as an agent bug would).
PLANTED = """
import sys
from agent.proc import supervisor
real_start = supervisor.Supervisor.start
def start(self, name, *args, **kw):
    if name == "driver":
        raise ValueError("planted by the test")
    return real_start(self, name, *args, **kw)
supervisor.Supervisor.start = start
from agent.cli import main
sys.exit(main())
"""


def test_an_unexpected_error_is_recorded_as_internal_and_its_traceback_kept_in_the_agent_log(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "run.toml"
    spec.write_text(small_spec(replicas=1, ray=False, placement=None))
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", PLANTED, "--uuid", "planted", "--config", str(spec), "--output-root", str(out)]
    cmd += ["--rank", "0", "--replicas", "1", "--address", "127.0.0.1"]
    env = {**os.environ, tempdirs.ROOT_ENV: str(agent_tmp_root(tmp_path)), "CUDA_VISIBLE_DEVICES": "0,1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = RunDir.open(out / "cluster" / "planted")
    doc = run.read_json(names.failure(0))
    assert doc is not None and not violations("failure", doc)
    assert (doc["kind"], doc["phase"], doc["cause"]) == ("internal", "driver", "ValueError: planted by the test")
    log = (run.path / names.agent_log(0)).read_text()
    assert "internal error in phase driver" in log
    trace = log[log.index("Traceback (most recent call last)") :]
    assert f'{os.sep}_driver.py", line' in trace and "in start" in trace  # down to the call that raised
    assert run.read_json(names.cleanup(0)) is not None  # and it still cleaned up
