"""The one orphan finder of tests and bench: which processes of a run are still alive.

A process belongs to a run when it is in one of the run's sessions (those its starter created,
and every group a cleanup record names), or when the run's directory or uuid (or another string
only this run has, such as its agents' temp root, which Ray's daemons name) appears in its command
line or environment. Processes are found by PID and session from /proc, never by name; the
caller's own process and zombies (already dead, waiting for their parent) never count.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import orjson
import psutil

from schemas import DriverEnv

RANK_ENV = DriverEnv.RANK

# Sessions a harness started for a run (start_new_session=True: the session id is the pid).
_STARTED: dict[Path, set[int]] = {}


def started_session(run_dir: Path, pid: int) -> None:
    """Remember that `pid` leads a session of the run at `run_dir`."""
    _STARTED.setdefault(Path(run_dir), set()).add(pid)


def recorded_sessions(run_dir: Path) -> set[int]:
    """The sessions of every process group the run's cleanup records name."""
    out: set[int] = set()
    for f in Path(run_dir).glob("cleanup-*.json"):  # names.cleanup(rank) for every rank
        try:
            out.update(int(g["session"]) for g in orjson.loads(f.read_bytes())["groups"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a torn or foreign file names no session; the other evidence still holds
    return out


def run_processes(run_dir: Path, *, sessions: Iterable[int] = (), marks: Iterable[str] = ()) -> list[psutil.Process]:
    """Live processes of the run at `run_dir` (its last component is the run's uuid)."""
    run_dir = Path(run_dir)
    sids = {*sessions, *_STARTED.get(run_dir, ()), *recorded_sessions(run_dir)}
    needles = tuple(n for n in (str(run_dir), run_dir.name, *marks) if n)
    me = os.getpid()
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.pid == me or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if (
                os.getsid(p.pid) in sids
                or _names(" ".join(p.info["cmdline"] or []), needles)
                or any(_names(v, needles) for v in p.environ().values())
            ):
                found.append(p)
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or not ours to read
    return found


def _names(text: str, needles: tuple[str, ...]) -> bool:
    return any(n in text for n in needles)


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline()[:6])}")
        except psutil.Error:
            continue
    return out


def kill_all(procs: Iterable[psutil.Process]) -> None:
    """SIGKILL each process by its PID (a harness's cleanup, so nothing leaks into what follows)."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def rank_of(p: psutil.Process) -> int | None:
    """The rank a process of a run serves: an agent's --rank, or the GYM_RANK its agent gave its
    children (the reaper, the driver); None for a process of no rank or one gone meanwhile."""
    try:
        cmd = p.cmdline()
        if "--rank" in cmd:
            return int(cmd[cmd.index("--rank") + 1])
        env = p.environ()
        return int(env[RANK_ENV]) if RANK_ENV in env else None
    except (psutil.Error, ValueError, IndexError):
        return None


def kill_node(run_dir: Path, rank: int, *, sessions: Iterable[int] = (), marks: Iterable[str] = ()) -> int:
    """A lost host: every process of `rank` SIGKILLed at once (agent, reaper, driver and their
    children), by PID; how many there were."""
    mine = [p for p in run_processes(run_dir, sessions=sessions, marks=marks) if rank_of(p) == rank]
    kill_all(mine)
    return len(mine)


def wait_gone(
    run_dir: Path, timeout: float, *, sessions: Iterable[int] = (), marks: Iterable[str] = (), every: float = 0.1
) -> list[psutil.Process]:
    """Until no process of the run is alive or `timeout` passed: what is still alive then."""
    sessions, marks = tuple(sessions), tuple(marks)
    end = time.monotonic() + timeout
    left = run_processes(run_dir, sessions=sessions, marks=marks)
    while left and time.monotonic() < end:
        time.sleep(every)
        left = run_processes(run_dir, sessions=sessions, marks=marks)
    return left


def assert_nothing_left(
    run_dir: Path, *, sessions: Iterable[int] = (), marks: Iterable[str] = (), timeout: float = 15
) -> None:
    """Nothing of the run survives `timeout` seconds; survivors are killed, then reported."""
    left = wait_gone(run_dir, timeout, sessions=sessions, marks=marks, every=0.3)
    if left:
        desc = describe(left)
        kill_all(left)  # do not leak into later tests; the assertion below still fails this one
        raise AssertionError(f"processes of the run survived: {desc}")


def kill_tree_by_session(proc: subprocess.Popen) -> None:
    """Cleanup for a process we started in its own session: its whole session, by its pid."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
