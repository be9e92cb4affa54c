"""A child the agent never named to its reaper (forked just before the agent was SIGKILLed) is still
stopped: the supervisor marks every child's environment with the agent's incarnation
(MARK_ENV), and a real reaper whose agent died stops what carries that mark, and only that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from agent.ground.failure import FailureSignal
from agent.ground.reaper_channel import MARK_ENV, ReaperChannel
from agent.proc.supervisor import ExitPolicy, Supervisor
from agent.reaper._sidecar import UNNAMED
from schemas import FailureKind, RunDir, names, violations

FP = "d" * 64
ROOT = Path(__file__).resolve().parents[1]


def sleeper(mark: str) -> subprocess.Popen[bytes]:
    """A process in a session of its own, as the supervisor starts a child, carrying `mark`."""
    env = {**os.environ, MARK_ENV: mark}
    return subprocess.Popen(["sleep", "120"], env=env, start_new_session=True)


def gone(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_the_reaper_of_a_dead_agent_stops_its_unnamed_children_and_spares_another_agents(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "marked", mode=0o750)
    mine, theirs = sleeper("inc-mine"), sleeper("inc-theirs")
    reaper = subprocess.Popen(
        [sys.executable, "-m", "agent.reaper", "--run-dir", str(run.path), "--rank", "0"]
        + ["--incarnation", "inc-mine", "--fingerprint", FP, "--agent-pid", str(os.getpid()), "--grace", "2"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        assert reaper.stdin is not None
        reaper.stdin.write('{"phase": "driver"}\n')
        reaper.stdin.close()  # the agent died without its "done" line, and never named `mine`
        assert reaper.wait(60) == 1
        assert gone(mine, 10), "the unnamed child of the dead agent still runs"
        assert theirs.poll() is None, "another agent's child was stopped"
        cleanup = run.read_json(names.cleanup(0))
        assert cleanup is not None and not violations("cleanup", cleanup)
        unnamed = [g for g in cleanup["groups"] if g["name"] == UNNAMED]
        assert unnamed and unnamed[0]["pid"] == mine.pid and unnamed[0]["swept"] == 1, cleanup
        assert cleanup["leftover_pids"] == []
        failure = run.read_json(names.failure(0))
        assert failure is not None and failure["kind"] == "agent_died" and failure["phase"] == "driver"
    finally:
        for proc in (mine, theirs, reaper):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_every_supervised_child_and_its_children_carry_the_agents_mark(tmp_path: Path) -> None:
    signal_ = FailureSignal()
    sup = Supervisor(signal_, 2.0, ReaperChannel(None), lambda: "driver", mark="inc-7")
    out = tmp_path / "pid"
    group = sup.start(
        "driver",
        ["sh", "-c", f"sleep 120 & echo $! > {out}; wait"],
        env={"PATH": os.environ["PATH"]},
        log_fd=None,
        policy=ExitPolicy(FailureKind.DRIVER_EXIT, None),
    )
    try:
        end = time.monotonic() + 10
        while not (out.exists() and out.read_text().strip()) and time.monotonic() < end:
            time.sleep(0.05)
        grandchild = psutil.Process(int(out.read_text()))
        # Read its environment once it runs `sleep`: between the shell's fork and the exec,
        # /proc/PID/environ can read empty (seen on a busy machine).
        while grandchild.cmdline()[:1] != ["sleep"] and time.monotonic() < end:
            time.sleep(0.05)
        assert psutil.Process(group.pid).environ()[MARK_ENV] == "inc-7"
        assert grandchild.environ()[MARK_ENV] == "inc-7"
    finally:
        sup.stop_all()
        try:
            os.killpg(group.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
