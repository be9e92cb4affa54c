"""Seeing a run and keeping its evidence, part by part (issue 15): the console tee, progress lines,
timestamps and library logging, Ray session logs, the status reader, gym-audit's logs/ls, CLI
conventions and packaging. Real processes, pipes, terminals and files throughout; the real
multi-replica runs are in tests/test_observability_e2e.py."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from agent.ground.waits import Progress, poll_until
from agent.lifecycle._console_tee import MAX_CONSOLE_LINE, ConsoleLines, ConsoleTee
from agent.ray._logs import keep, session_log_files
from audit._logview import line_time, parse_since
from audit._model import Cause
from audit._ray_evidence import ray_evidence
from audit.api import audit_run
from launch._status import HeartbeatClock, read_status
from launch.spec.console import use_colour
from schemas import RunDir, names
from schemas.timefmt import iso_ms
from tests.harness import BIN
from tests.harness.rundirs import REPO, T0, driver_failure, judge_failure, success

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def run(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


# -- 1. the driver's output on the console ----------------------------------------------------------


def test_console_tee_keeps_the_bytes_and_prefixes_each_line(tmp_path: Path) -> None:
    log = tmp_path / "driver-0.log"
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    r, w = os.pipe()  # stands in for the agent's stdout
    tee = ConsoleTee(log_fd, "[rank 3 driver] ", console_fd=w)
    script = (
        "import sys; print('step 1 loss 2.3', flush=True); sys.stdout.write('no newline'); sys.stdout.flush(); "
        f"print(); print('x' * {MAX_CONSOLE_LINE + 50}); sys.stderr.write('Traceback: boom\\n')"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=tee.write_fd, stderr=subprocess.STDOUT)
    tee.close_child_end()
    assert proc.wait(30) == 0
    tee.join(10)
    os.close(w)
    console = os.read(r, 1 << 20).decode().splitlines()
    os.close(r)
    raw = log.read_text()
    assert raw.startswith("step 1 loss 2.3\nno newline\n") and "Traceback: boom\n" in raw
    assert "x" * (MAX_CONSOLE_LINE + 50) in raw  # the file keeps every byte
    assert console[0] == "[rank 3 driver] step 1 loss 2.3"
    assert console[1] == "[rank 3 driver] no newline"
    assert console[2].startswith("[rank 3 driver] xxx") and console[2].endswith("[cut; full line in the log]")
    assert console[3] == "[rank 3 driver] Traceback: boom"
    assert all(line.startswith("[rank 3 driver] ") for line in console)


def test_a_cut_line_shows_once_however_the_pipe_splits_the_bytes() -> None:
    """The pipe hands the tee chunks of any size (a loaded machine splits a long line anywhere):
    the console gets the same lines for every split, and the rest of a cut line is never shown
    as a line of its own (it once came out as an empty line, or as the line's last bytes)."""
    data = b"step 1\nno newline\n" + b"x" * (MAX_CONSOLE_LINE + 50) + b"\nTraceback: boom\nlast"
    expected = [b"step 1", b"no newline", b"x" * (MAX_CONSOLE_LINE + 50), b"Traceback: boom", b"last"]
    for a in range(len(data) + 1):
        for b in sorted({a, min(len(data), a + 1), min(len(data), a + MAX_CONSOLE_LINE)}):
            lines = ConsoleLines()
            got = lines.feed(data[:a]) + lines.feed(data[a:b]) + lines.feed(data[b:]) + [lines.rest()]
            # Split before the long line's end, it is shown cut (at least MAX_CONSOLE_LINE bytes).
            assert got[:2] == expected[:2] and got[3:] == expected[3:], (a, b, got[2:])
            assert expected[2].startswith(got[2]) and len(got[2]) > MAX_CONSOLE_LINE, (a, b, len(got[2]))


def test_console_tee_survives_a_closed_console(tmp_path: Path) -> None:
    log_fd = os.open(tmp_path / "d.log", os.O_WRONLY | os.O_CREAT, 0o640)
    r, w = os.pipe()
    os.close(r)  # nobody reads the console any more
    tee = ConsoleTee(log_fd, "[rank 0 driver] ", console_fd=w)
    proc = subprocess.Popen([sys.executable, "-c", "print('a'); print('b')"], stdout=tee.write_fd)
    tee.close_child_end()
    assert proc.wait(30) == 0
    tee.join(10)
    os.close(w)
    assert (tmp_path / "d.log").read_text() == "a\nb\n"


def test_a_console_that_falls_behind_never_stalls_the_driver(tmp_path: Path) -> None:
    """Nobody reads the console (a paused terminal): the driver still finishes at once, the log
    has every line, and the console is told how many lines it missed."""
    log_fd = os.open(tmp_path / "d.log", os.O_WRONLY | os.O_CREAT, 0o640)
    r, w = os.pipe()
    tee = ConsoleTee(log_fd, "[rank 0 driver] ", console_fd=w)
    n = 60_000
    proc = subprocess.Popen([sys.executable, "-c", f"for i in range({n}): print(f'line {{i}}')"], stdout=tee.write_fd)
    tee.close_child_end()
    assert proc.wait(30) == 0  # a blocked console would have blocked the driver's writes
    tee._thread.join(10)
    assert (tmp_path / "d.log").read_text().count("\n") == n
    assert tee.dropped > 0
    os.set_blocking(r, False)  # now read the console: the writer drains its backlog
    seen = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = tee._writer.is_alive()
        try:
            chunk = os.read(r, 1 << 20)
        except BlockingIOError:
            chunk = b""
        seen += chunk
        if not chunk:
            if not alive:
                break
            time.sleep(0.05)
    os.close(w)
    os.close(r)
    text = seen.decode()
    assert "line(s) not shown here" in text
    assert text.count("[rank 0 driver] line ") == n - tee.dropped


# -- 4. progress during long waits ----------------------------------------------------------------


def test_poll_until_reports_progress_at_a_calm_rate() -> None:
    lines: list[str] = []
    t0 = time.monotonic()
    ok = poll_until(
        lambda: time.monotonic() - t0 > 1.25,
        deadline=t0 + 10,
        interval=0.02,
        progress=Progress(lambda left: f"waiting, {left:.0f} s left", lines.append, 0.4),
    )
    assert ok
    assert 2 <= len(lines) <= 3, lines  # every 0.4 s, not every 0.02 s poll, and none at once
    assert lines[0] in ("waiting, 9 s left", "waiting, 10 s left")


def test_a_short_wait_prints_nothing() -> None:
    lines: list[str] = []
    assert poll_until(
        lambda: True, deadline=time.monotonic() + 5, interval=0.01, progress=Progress(str, lines.append, 1)
    )
    assert lines == []


def test_ray_probe_progress_is_parsed() -> None:
    from agent.ray._probe import PROGRESS_MARK
    from agent.ray.node import probe_progress

    err = f"some warning\n{PROGRESS_MARK}1/3\nother\n{PROGRESS_MARK}2/3\n".encode()
    assert probe_progress(err) == "2/3"
    assert probe_progress(b"nothing yet") is None


# -- 6. timestamps and library logging ------------------------------------------------------------


def test_iso_ms_and_the_log_line_times() -> None:
    stamp = iso_ms(T0 + 0.1234)
    assert ISO_MS.fullmatch(stamp) and stamp.endswith(".123Z")
    assert line_time(f"{stamp} [rank 0] RUNNING driver".encode()) == pytest.approx(T0 + 0.123, abs=1e-6)
    ray_line = b"[2023-11-14 22:13:20,500 I 123 123] raylet.cc:1: hello"
    local = time.mktime(time.strptime("2023-11-14 22:13:20", "%Y-%m-%d %H:%M:%S")) + 0.5
    assert line_time(ray_line) == pytest.approx(local)
    assert line_time(b"  File 'x.py', line 3") is None
    assert parse_since("10m", now=lambda: 1000.0) == 400.0
    assert parse_since("2023-11-14T22:13:20Z") == pytest.approx(T0)
    with pytest.raises(ValueError, match="duration"):
        parse_since("yesterday")


def test_library_warnings_are_routed_with_rank_and_time(tmp_path: Path) -> None:
    """A watchdog-style library warning and a helper thread's crash: prefixed on the console,
    ISO-stamped in the agent log, never Python's bare last-resort line."""
    log = tmp_path / "agent-0.log"
    script = f"""
import logging, os, threading
from agent.lifecycle._logsetup import configure
fd = os.open({str(log)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
configure("[rank 0]", fd)
logging.getLogger("watchdog.observers.inotify_buffer").warning("inotify watch limit reached")
logging.getLogger("watchdog").debug("debug only to the file? no: below INFO, dropped")
t = threading.Thread(target=lambda: 1 / 0, name="observer")
t.start(); t.join()
"""
    proc = run(sys.executable, "-c", script)
    assert proc.returncode == 0, proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert err[0] == "[rank 0] warning (watchdog.observers.inotify_buffer): inotify watch limit reached"
    assert any(ln.startswith("[rank 0] error (thread): thread observer died: division by zero") for ln in err)
    assert not any(ln.startswith(("WARNING", "Exception in thread")) for ln in err), err
    lines = log.read_text().splitlines()
    assert ISO_MS.match(lines[0]) and "inotify watch limit reached" in lines[0]
    assert "debug only" not in log.read_text()


def test_quiet_agent_keeps_library_warnings_in_the_log_only(tmp_path: Path) -> None:
    log = tmp_path / "agent-1.log"
    script = f"""
import logging, os
from agent.lifecycle._logsetup import configure
fd = os.open({str(log)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
configure("[rank 1]", fd, console_level=logging.ERROR)
logging.getLogger("watchdog").warning("only in the file")
"""
    proc = run(sys.executable, "-c", script)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "[rank 1] warning (watchdog): only in the file" in log.read_text()
    assert run(BIN / "gym-agent", "-q", "-v", "--uuid", "x").returncode == 2  # one or the other


# -- 2. Ray's session logs kept -------------------------------------------------------------------


def _fake_ray_session(temp: Path) -> Path:
    """The layout `ray start --temp-dir` leaves (session_DATE_PID/logs plus a session_latest link)."""
    logs = temp / "session_2026-11-30_17-00-00_123_456" / "logs"
    logs.mkdir(parents=True)
    (temp / "session_latest").symlink_to(logs.parent.name)
    body = b"".join(b"raylet line %d\n" % i for i in range(1000))
    (logs / "raylet.out").write_bytes(b"raylet start\n" + body + b"raylet: killed by the OOM killer\n")
    (logs / "gcs_server.out").write_text("gcs up\n")
    (logs / "worker-abc-01.err").write_text("worker traceback\n")
    (logs / "worker-abc-01.out").write_text("worker stdout\n")
    (logs / "empty.err").write_text("")
    (logs / "old").mkdir()
    (logs / "old" / "nested.log").write_text("not copied: only the logs dir itself")
    (logs / "link.out").symlink_to("/etc/hostname")
    return logs


def test_ray_session_logs_are_kept_size_capped_and_audited(tmp_path: Path) -> None:
    temp = tmp_path / "raytmp"
    _fake_ray_session(temp)
    assert [p.name for p in session_log_files(str(temp))] == [
        "gcs_server.out",
        "raylet.out",
        "worker-abc-01.err",
        "worker-abc-01.out",
    ]
    b = driver_failure(tmp_path / "out")
    kept = keep(str(temp), b.run, names.ray_session_dir(1), budget=3000)
    assert kept.files == ("gcs_server.out", "raylet.out")  # the budget ran out before the workers' logs
    raylet = (b.path / names.ray_session_log(1, "raylet.out")).read_bytes()
    assert raylet.endswith(b"raylet: killed by the OOM killer\n")  # the newest bytes are the ones kept
    assert raylet.startswith(b"...[earlier bytes not kept") and 2000 < len(raylet) < 3000
    assert kept.skipped == 2 and "2 more left out" in kept.describe()
    mode = stat.S_IMODE((b.path / names.ray_session_log(1, "raylet.out")).stat().st_mode)
    assert mode == 0o640
    assert not (b.path / names.ray_session_log(1, "link.out")).exists()

    result = audit_run(b.path)
    assert "file.unknown" not in {f.code for f in result.findings}  # ray-session-1/ is part of the contract
    proc = run(BIN / "gym-audit", "logs", b.path, "--grep", "OOM killer")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(names.ray_session_log(1, "raylet.out") + ":")
    assert keep(str(temp), b.run, names.ray_session_dir(0), budget=0).files == ()


def test_a_ray_child_exit_cites_the_kept_ray_logs(tmp_path: Path) -> None:
    logs = {
        names.ray_log(2): 10,
        names.ray_session_log(2, "worker-1.out"): 5,
        names.ray_session_log(2, "raylet.out"): 9,
    }
    logs[names.ray_session_log(1, "raylet.out")] = 9
    child = Cause(
        2, "child_exit", "driver", "ray-worker (pid 7) exited with code 1 during driver", T0, None, None, None
    )
    assert ray_evidence(child, names.ray_log(2), logs) == (
        names.ray_session_log(2, "raylet.out"),
        names.ray_session_log(2, "worker-1.out"),
    )
    driver = Cause(2, "driver_exit", "driver", "the driver exited with code 3", T0, None, None, None)
    assert ray_evidence(driver, names.driver_log(2), logs) == ()
    assert ray_evidence(Cause(2, "internal", None, "array index", T0, None, None, None), None, logs) == ()


def test_the_dashboard_key_is_declared_and_validated(tmp_path: Path) -> None:
    spec = REPO / "examples" / "demo.toml"
    assert run(BIN / "gym-launch", "validate", spec, "--set", "ray.dashboard=true").returncode == 0
    bad = run(BIN / "gym-launch", "validate", spec, "--set", 'ray.dashboard="yes"')
    assert bad.returncode == 2 and "ray.dashboard" in bad.stderr and "Traceback" not in bad.stderr


# -- 3. status and gym-audit logs ---------------------------------------------------------------------


def test_heartbeat_age_is_measured_on_the_observers_clock(tmp_path: Path) -> None:
    mono = [100.0]
    hb = HeartbeatClock(now=lambda: mono[0], wall=lambda: T0 + 5000)  # the writer's clock is far off
    doc = {"seq": 1, "incarnation": "a", "written_at": T0}
    age, measured = hb.age(0, doc)
    assert not measured and age == pytest.approx(5000)  # first look: only the wall-clock estimate
    mono[0] = 103.0
    assert hb.age(0, {**doc, "seq": 2}) == (0.0, True)  # the counter moved: measured from now on
    mono[0] = 104.5
    assert hb.age(0, {**doc, "seq": 2}) == (1.5, True)


def test_status_of_a_finished_failed_run(tmp_path: Path) -> None:
    b = judge_failure(tmp_path / "out")
    with RunDir.open(b.path) as rd:
        st = read_status(rd, HeartbeatClock(), replicas=3)
    assert st.outcome == "failed" and [r.rank for r in st.rows] == [0, 1, 2]
    culprit = next(r for r in st.rows if r.failure and r.failure.startswith("judge_health"))
    assert culprit.state == "FAILED" and culprit.phase == "driver"
    proc = run(BIN / "gym-launch", "status", "run-1", "--output-root", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"^\d\s+10\.0\.0\.\d+\s+FAILED\s+driver", proc.stdout, re.M), proc.stdout
    doc = json.loads(run(BIN / "gym-launch", "status", b.path, "--json").stdout)
    assert doc["outcome"] == "failed" and len(doc["ranks"]) == 3
    missing = run(BIN / "gym-launch", "status", "no-such-run", "--output-root", tmp_path / "out")
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr
    bare = run(BIN / "gym-launch", "status", "run-1", env={"GYM_OUTPUT_ROOT": ""})
    assert bare.returncode == 2 and "--output-root" in bare.stderr


def _timed_run(tmp_path: Path) -> Path:
    b = success(tmp_path / "out")
    b.log(
        names.agent_log(0),
        "".join(f"{iso_ms(T0 + 2 * i)} [rank 0] line {i}\n" for i in range(10)) + "  an untimed continuation\n",
    )
    b.log(names.agent_log(1), "".join(f"{iso_ms(T0 + 2 * i + 1)} [rank 1] line {i}\n" for i in range(10)))
    return b.path


def test_logs_context_since_and_merge(tmp_path: Path) -> None:
    path = _timed_run(tmp_path)
    ctx = run(BIN / "gym-audit", "logs", path, "--rank", "0", "--grep", "line 5$", "-B", "1", "-A", "2")
    assert ctx.returncode == 0, ctx.stderr
    assert [ln.split(" [rank 0] ")[-1] for ln in ctx.stdout.splitlines()] == ["line 4", "line 5", "line 6", "line 7"]
    assert ctx.stdout.splitlines()[1].startswith(names.agent_log(0) + ":6:")  # the match: FILE:LINE:
    assert ctx.stdout.splitlines()[0].startswith(names.agent_log(0) + "-5-")  # context: FILE-LINE-
    since = run(BIN / "gym-audit", "logs", path, "--rank", "0", "--since", iso_ms(T0 + 15))
    got = since.stdout.splitlines()
    assert got[0].endswith("line 8") and got[-1].endswith("an untimed continuation")  # it keeps its line's time
    merged = run(BIN / "gym-audit", "logs", path, "--merge", "--grep", r"\[rank [01]\] line")
    order = [re.search(r"rank (\d)\] line (\d)", ln).groups() for ln in merged.stdout.splitlines()]
    assert order[:4] == [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")] and len(order) == 20
    # The driver's own output has no times: the merged view places it where its driver phase began.
    b = success(tmp_path / "out2")
    d = b.driver_rank
    start = b.phase_start(d, "driver")
    b.log(names.agent_log(d), "".join(f"{iso_ms(start + k)} [rank {d}] agent {k}\n" for k in (-2, -1, 1, 2)))
    b.log(names.driver_log(d), "step 1 loss 2.3\nstep 2 loss 2.1\n")
    seq = run(BIN / "gym-audit", "logs", b.path, "--merge", "--rank", str(d), "--grep", "agent -?\\d|loss")
    texts = [ln.split(":", 2)[2].split("] ")[-1] for ln in seq.stdout.splitlines()]
    assert texts == ["agent -2", "agent -1", "step 1 loss 2.3", "step 2 loss 2.1", "agent 1", "agent 2"], texts
    bad = run(BIN / "gym-audit", "logs", path, "--since", "tuesday")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_logs_follow_prints_new_lines_until_the_run_ends(tmp_path: Path) -> None:
    b = success(tmp_path / "out")
    cleanup = b.path / names.cleanup(2)
    saved = cleanup.read_bytes()
    cleanup.unlink()  # the run has not ended yet
    b.log(names.agent_log(2), "old line\n")
    proc = subprocess.Popen(
        [BIN / "gym-audit", "logs", b.path, "--rank", "2", "--follow", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    with open(b.path / names.agent_log(2), "a") as fh:
        fh.write("new line 1\nnew line 2\n")
    time.sleep(1.0)
    assert proc.poll() is None  # still following
    b.run.write_bytes(names.cleanup(2), saved)  # rank 2 finished: the follower stops by itself
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0
    lines = [ln for ln in out.splitlines() if ln.startswith(names.agent_log(2))]
    assert lines == [
        f"{names.agent_log(2)}:{i}:{t}" for i, t in ((1, "old line"), (2, "new line 1"), (3, "new line 2"))
    ]


# -- 5. run history, bare UUIDs ------------------------------------------------------------------------


def test_ls_lists_runs_with_outcome_and_first_cause(tmp_path: Path) -> None:
    from tests.harness.rundirs import RunBuilder

    root = tmp_path / "out"
    success(root)
    d = RunBuilder(root, "run-2")
    d.startup()
    t = d.phase_start(d.driver_rank, "driver") + 9.0
    d.failure(
        d.driver_rank, "driver_exit", "driver exited with code 1", "driver", t, log=names.driver_log(d.driver_rank)
    )
    d.phases(d.driver_rank, "driver", state="FAILED", last="failed")
    d.cleanup(d.driver_rank, "failure")
    proc = run(BIN / "gym-audit", "ls", root)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert rows[0].split() == ["uuid", "start", "elapsed", "outcome", "first", "cause"]
    assert re.match(r"run-1\s+\S+Z\s+[\d.]+s\s+succeeded\s*$", rows[1]), rows
    assert re.match(r"run-2\s+\S+Z\s+[\d.]+s\s+failed\s+rank \d driver_exit in driver", rows[2]), rows
    js = [json.loads(x) for x in run(BIN / "gym-audit", "ls", root, "--json").stdout.splitlines()]
    assert [r["outcome"] for r in js] == ["succeeded", "failed"]
    env_root = run(BIN / "gym-audit", "ls", env={"GYM_OUTPUT_ROOT": str(root)})
    assert env_root.stdout == proc.stdout
    assert run(BIN / "gym-audit", "ls", tmp_path / "nope").returncode == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(BIN / "gym-audit", "ls", empty).returncode == 1


def test_gym_audit_takes_a_bare_uuid(tmp_path: Path) -> None:
    root = tmp_path / "out"
    success(root)
    by_flag = run(BIN / "gym-audit", "run-1", "--output-root", root)
    by_env = run(BIN / "gym-audit", "run-1", env={"GYM_OUTPUT_ROOT": str(root)})
    assert by_flag.returncode == 0 and by_flag.stdout == by_env.stdout and "PASS" in by_flag.stdout
    logs = run(BIN / "gym-audit", "logs", "run-1", "--output-root", root, "--rank", "0")
    assert logs.returncode in (0, 1) and "cannot" not in logs.stderr
    none = run(BIN / "gym-audit", "run-1", env={"GYM_OUTPUT_ROOT": ""})
    assert none.returncode == 2 and "--output-root" in none.stderr and "Traceback" not in none.stderr


# -- 7. CLI conventions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["gym-launch", "gym-agent", "gym-audit"])
def test_version_and_exit_codes_in_help(tool: str) -> None:
    from importlib.metadata import version

    v = run(BIN / tool, "--version")
    assert v.returncode == 0 and v.stdout.strip() == f"{tool} {version('gym-agent')}"
    h = run(BIN / tool, "--help")
    assert h.returncode == 0 and "exit codes:" in h.stdout and re.search(r"^\s+2\s+\S", h.stdout, re.M)


def test_gym_audit_usage_shows_its_subcommands() -> None:
    h = run(BIN / "gym-audit", "--help").stdout
    assert "gym-audit logs RUN" in h and "gym-audit ls OUTPUT" in h
    assert "exit codes:" in run(BIN / "gym-audit", "logs", "--help").stdout
    assert run(BIN / "gym-audit").stderr.startswith("usage: gym-audit")


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    master, slave = os.openpty()
    try:
        tty = os.fdopen(slave, "w")
        monkeypatch.delenv("NO_COLOR", raising=False)
        assert use_colour(tty)
        monkeypatch.setenv("NO_COLOR", "1")
        assert not use_colour(tty)
        monkeypatch.delenv("NO_COLOR")
        with open(tmp_path / "f", "w") as fh:
            assert not use_colour(fh)
    finally:
        tty.close()
        os.close(master)
    # End to end: gym-audit on a pipe has no escape codes; on a real terminal it has them unless NO_COLOR.
    b = driver_failure(tmp_path / "out")
    assert "\x1b[" not in run(BIN / "gym-audit", b.path).stdout
    for no_color, expect in (("", True), ("1", False)):
        m, s = os.openpty()
        env = (
            {**os.environ, "NO_COLOR": no_color}
            if no_color
            else {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        )
        p = subprocess.Popen([BIN / "gym-audit", b.path], stdout=s, stderr=s, env=env)
        os.close(s)
        out = b""
        while True:
            try:
                chunk = os.read(m, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        p.wait(30)
        os.close(m)
        assert (b"\x1b[31m" in out) is expect, out[:300]


def test_quiet_and_verbose(tmp_path: Path) -> None:
    b = judge_failure(tmp_path / "out")
    quiet = run(BIN / "gym-audit", "-q", b.path)
    assert quiet.returncode == 1 and len(quiet.stdout.splitlines()) == 2
    assert quiet.stdout.splitlines()[1].startswith("rank ") and "judge_health" in quiet.stdout
    verbose = run(BIN / "gym-audit", "-v", b.path).stdout
    assert "Ranks:" in verbose and len(verbose) > len(run(BIN / "gym-audit", b.path).stdout)
    spec = REPO / "examples" / "demo.toml"
    out = tmp_path / "job.sbatch"
    loud = run(BIN / "gym-launch", "render", spec, "--backend", "slurm", "--uuid", "u1", "-o", out)
    hush = run(BIN / "gym-launch", "-q", "render", spec, "--backend", "slurm", "--uuid", "u1", "-o", out)
    if loud.returncode == 0:  # the Slurm renderer exists on this branch
        assert "wrote" in loud.stderr and hush.stderr == "" and hush.returncode == 0


@pytest.mark.parametrize("tool", ["gym-launch", "gym-audit"])
def test_bash_completion_is_generated_from_the_parsers(tool: str, tmp_path: Path) -> None:
    script = run(BIN / tool, "completion", "bash")
    assert script.returncode == 0
    path = tmp_path / "c.bash"
    path.write_text(script.stdout)
    word = {
        "gym-launch": ("sta", "status", "status --w", "--watch"),
        "gym-audit": ("l", "logs", "logs --fo", "--follow"),
    }
    first, want1, partial, want2 = word[tool]
    probe = f"""
source {path}
COMP_WORDS=({tool} {first}); COMP_CWORD=1; _{tool.replace("-", "_")}; echo "1:${{COMPREPLY[*]}}"
COMP_WORDS=({tool} {partial}); COMP_CWORD=2; _{tool.replace("-", "_")}; echo "2:${{COMPREPLY[*]}}"
complete -p {tool}
"""
    out = run("bash", "--norc", "-c", probe)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert want1 in lines[0].split(":", 1)[1].split()
    assert lines[1].split(":", 1)[1].split() == [want2]
    assert lines[2].endswith(tool)


# -- 8. the HTML file itself ---------------------------------------------------------------------------------


def test_html_report_is_0640_and_a_directory_is_refused_up_front(tmp_path: Path) -> None:
    b = judge_failure(tmp_path / "out")
    page = tmp_path / "report.html"
    ok = run(BIN / "gym-audit", b.path, "--html", page)
    assert ok.returncode == 1 and stat.S_IMODE(page.stat().st_mode) == 0o640
    target = tmp_path / "reports"
    target.mkdir()
    for arg in (f"{target}/", str(target)):
        refused = run(BIN / "gym-audit", b.path, "--html", arg)
        assert refused.returncode == 2 and refused.stdout == ""  # nothing printed before the refusal
        assert "is a directory" in refused.stderr and "audit.html" in refused.stderr
    assert run(BIN / "gym-audit", b.path, "--html", tmp_path / "no" / "r.html").returncode == 2


# -- 9. packaging -------------------------------------------------------------------------------------------


def test_the_wheel_builds_without_warnings_and_carries_its_metadata(tmp_path: Path) -> None:
    # The build runs as a user's would: pip's isolated build environment with setuptools>=77; from
    # a copy, so that setuptools' build/ never lands in the working tree.
    import shutil

    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "output", "*.egg-info", "__pycache__", "tests"),
    )
    proc = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "dist", src, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not re.search(r"SetuptoolsDeprecationWarning|_Warning|Package .* is absent", proc.stdout + proc.stderr)
    wheel = next((tmp_path / "dist").glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
        meta = z.read(next(n for n in files if n.endswith("METADATA"))).decode()
    for pkg in ("launch", "agent", "audit", "schemas"):
        assert f"{pkg}/py.typed" in files
    assert "launch/spec/data/sglang-0.5.23-flags.txt" in files
    assert "License-Expression: Apache-2.0" in meta and "Classifier: Typing :: Typed" in meta
    license_file = next(n for n in files if n.endswith("licenses/LICENSE"))
    with zipfile.ZipFile(wheel) as z:
        assert "Apache License" in z.read(license_file).decode()
    ray = next(ln for ln in meta.splitlines() if ln.startswith("Requires-Dist: ray"))
    assert "==" not in ray and ">=2.58" in ray and "<2.61" in ray
    readme = (REPO / "README.md").read_text()
    assert "ray>=2.58,<2.61" in readme and "source .venv/bin/activate" in readme
