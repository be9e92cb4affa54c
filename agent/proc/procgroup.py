"""Child processes in their own sessions, and stopping them without leaving anything behind.

Each child is started with `start_new_session=True`; its session id is its pid. Ray task workers
and SGLang schedulers leave the child's process group or tree but keep the session
(docs/runtime-notes.md, "Processes"), so the session is what a final sweep matches. Nothing is ever killed by name.
If the agent itself is SIGKILLed, its reaper sidecar (agent/reaper/_sidecar.py) sweeps the same sessions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from agent.proc import signals

__all__ = [
    "ESCAPED",
    "LINGER_S",
    "PR_SET_CHILD_SUBREAPER",
    "ProcessGroup",
    "StopRecord",
    "become_subreaper",
    "descendants",
    "escaped_descendants",
    "kill_escaped",
    "open_pidfd",
    "session_members",
    "sweep_session",
]

LINGER_S = 1.0  # after a clean leader exit, how long its session's leftovers may take to follow
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
ESCAPED = "escaped-descendants"  # the cleanup record's name for processes that left every session


def become_subreaper() -> bool:
    """Make orphaned descendants (a driver's `setsid` grandchild whose parent exited) our children
    instead of init's, so the final sweep still finds them. Linux only; False elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def open_pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when `pid` exits (Linux >= 5.3): a child's exit
    is waited for as an event instead of by polling. None where unsupported."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _children_of(pid: int) -> list[int] | None:
    """pid's children from the kernel's own per-thread lists (/proc/PID/task/TID/children); None
    when this kernel has no such file. Orphans adopted by a subreaper appear under the thread that
    adopted them, so every thread's list is read."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # that thread just ended
            return None  # no CONFIG_PROC_CHILDREN: the caller scans every process instead
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int] | None:
    """Every descendant of `pid`, walking the kernel's children lists: O(descendants), where
    psutil's children(recursive=True) reads every process on the machine (hundreds of agents on
    one host made that the largest idle cost). None when the kernel has no children lists."""
    found: list[int] = []
    todo = [pid]
    seen = {pid}
    while todo:
        kids = _children_of(todo.pop())
        if kids is None:
            return None
        for kid in kids:
            if kid not in seen:
                seen.add(kid)
                found.append(kid)
                todo.append(kid)
    return found


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True  # gone: nothing to kill either


def _descendant_pids(pid: int) -> list[int]:
    found = descendants(pid)
    if found is not None:
        return found
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def escaped_descendants(sessions: set[int], spare: set[int]) -> list[psutil.Process]:
    """Our live descendants outside every supervised session (a `setsid` child escapes the
    session sweep), except `spare` (the reaper) and its own descendants."""
    spared = set(spare)
    for pid in spare:
        spared.update(_descendant_pids(pid))
    out = []
    for pid in _descendant_pids(os.getpid()):
        try:
            if pid in spared or os.getsid(pid) in sessions or _is_zombie(pid):
                continue
            out.append(psutil.Process(pid))
        except (psutil.Error, OSError):
            continue
    return out


def kill_escaped(sessions: set[int], spare: set[int]) -> StopRecord | None:
    """SIGKILL what escaped the sessions; None when nothing did."""
    t0 = time.monotonic()
    killed = 0
    first: psutil.Process | None = None
    for _ in range(5):
        strays = escaped_descendants(sessions, spare)
        if not strays:
            break
        first = first or strays[0]
        killed += _kill_and_reap(strays)
    if first is None:
        return None
    try:
        sid = os.getsid(first.pid)
    except OSError:
        sid = first.pid
    return StopRecord(ESCAPED, first.pid, sid, "sigkill", None, killed, time.monotonic() - t0)


@dataclass(frozen=True)
class StopRecord:
    """How one process group was stopped; goes into cleanup-RANK.json."""

    name: str
    pid: int
    session: int
    how: str  # exited | sigterm | sigkill | already_gone
    exit_code: int | None
    swept: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "session": self.session,
            "how": self.how,
            "exit_code": self.exit_code,
            "swept": self.swept,
            "seconds": round(self.seconds, 3),
        }


def session_members(session: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of a session, excluding ourselves.

    getsid() on every pid in /proc is one cheap syscall each; only matches get a psutil handle,
    so a hundred agents tearing down at once do not starve the machine."""
    me = os.getpid()
    out = []
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        pids = psutil.pids()
    for pid in pids:
        if pid == me:
            continue
        try:
            if os.getsid(pid) != session:
                continue
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error, OSError):
            continue
    return out


def sweep_session(session: int, passes: int = 5) -> int:
    """SIGKILL every process left in `session`; returns how many were killed."""
    killed = 0
    for _ in range(passes):
        members = session_members(session)
        if not members:
            break
        killed += _kill_and_reap(members)
    return killed


def _kill_and_reap(procs: list[psutil.Process]) -> int:
    """SIGKILL each (one already gone is skipped), then wait up to 1 s for them; how many were sent it."""
    killed = 0
    for proc in procs:
        try:
            proc.kill()
            killed += 1
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=1.0)
    return killed


class ProcessGroup:
    """One supervised child (and everything it spawns) in its own session."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_fd: int | None,
        cwd: str | None = None,
        term_leader_only: bool = False,
        shell: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        # Ray's `ray start --block` stops cleanly on SIGTERM to itself; SIGTERM to its whole
        # group starts a 30 s drain and gcs_server ignores it (docs/runtime-notes.md, "Ray").
        self.term_leader_only = term_leader_only
        with signals.unblocked():  # the child must be stoppable with SIGTERM
            self.proc = self._spawn(shell, env, cwd, log_fd)
        self.pid = self.proc.pid
        self.session = self.proc.pid
        # Opened before anyone can reap the child, so it names this process and no reused pid.
        self.pidfd = open_pidfd(self.pid)
        self.started = time.monotonic()
        self._stopping = False

    def _spawn(
        self, shell: bool, env: Mapping[str, str], cwd: str | None, log_fd: int | None
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv[0] if shell else self.argv,
            shell=shell,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log_fd if log_fd is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )

    def poll(self) -> int | None:
        return self.proc.poll()

    def close_pidfd(self) -> None:
        fd, self.pidfd = self.pidfd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, grace: float) -> StopRecord:
        """SIGTERM, wait up to `grace`, SIGKILL the group, then sweep the session."""
        self._stopping = True
        t0 = time.monotonic()
        code = self.proc.poll()
        how = "exited" if code is not None else "sigterm"
        if code is None:
            try:
                if self.term_leader_only:
                    self.proc.send_signal(signal.SIGTERM)
                else:
                    os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                how = "already_gone"
            try:
                code = self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                how = "sigkill"
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    code = self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None
        # The leader is gone; its helpers (Ray daemons, workers, schedulers) may not be.
        lingering = session_members(self.session)
        if lingering and how != "sigkill":
            # The leader stopped cleanly; what remains (idle Ray workers, agents) only needs a moment
            # to follow it before the sweep (docs/runtime-notes.md, "Ray": stop the leader, then kill the rest).
            _, alive = psutil.wait_procs(lingering, timeout=min(LINGER_S, max(0.0, grace - (time.monotonic() - t0))))
            lingering = alive
        swept = sweep_session(self.session) if lingering else 0
        return StopRecord(self.name, self.pid, self.session, how, code, swept, time.monotonic() - t0)
