"""Processes by pid and by UTS namespace (each node's own), never by name.

A namespace's number is not an identity: the kernel hands a freed number to the next namespace
made (measured: three `unshare --uts` in a row get the same one). So a member counts only when it
also sees its cluster's own hosts file bound on /etc/hosts (see cluster._in_namespace); a number
recorded for a daemon that has since died then never reaches another cluster's processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from .errors import ClusterError

STOP_GRACE = 10.0


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/PID/stat, or None when the pid does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running (a zombie is not). Never reaps: `pid` may be someone else's child (a Popen)."""
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def reap(pid: int) -> None:
    """Collect a daemon this process started itself, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def uts_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/uts")
    except OSError:
        return None


def sees_hosts_of(pid: int, home: Path) -> bool:
    """`pid` has the hosts file of the cluster in `home` bound on /etc/hosts (its node's mark)."""
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            for line in f:
                fields = line.split()
                # fields[3] is the mount's root inside its filesystem: the full path, or the path
                # below the mount point of the filesystem that holds `home` (a tmpfs /tmp); the
                # kernel appends //deleted once `home` is removed.
                root = fields[3].removesuffix("//deleted") if len(fields) > 4 else ""
                if fields[4:5] == ["/etc/hosts"] and root.endswith(f"/{home.name}/hosts"):
                    return True
    except OSError:
        pass
    return False


def namespace_members(ns: str, home: Path) -> list[int]:
    """Live pids in UTS namespace `ns` that belong to the cluster in `home` (the host's own
    namespace is refused)."""
    if ns == uts_namespace(os.getpid()) or ns == uts_namespace(1):
        raise ClusterError(f"refusing to treat the host's namespace {ns} as a node's")
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        pid = int(entry) if entry.isdigit() else me
        if pid != me and uts_namespace(pid) == ns and alive(pid) and sees_hosts_of(pid, home):
            out.append(pid)
    return out


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop_pid(pid: int, grace: float = STOP_GRACE) -> str:
    """SIGTERM, wait up to `grace`, then SIGKILL. Returns how it ended. Only for pids this
    cluster started (they are reaped when they are our children)."""
    if not alive(pid):
        reap(pid)
        return "already gone"
    _signal(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        reap(pid)
        if not alive(pid):
            return "sigterm"
        time.sleep(0.1)
    _signal(pid, signal.SIGKILL)
    end = time.monotonic() + 5
    while alive(pid) and time.monotonic() < end:
        reap(pid)
        time.sleep(0.05)
    return "sigkill"


def sweep_namespace(ns: str, home: Path, timeout: float = 10.0) -> int:
    """SIGKILL everything of the cluster in `home` left in a node's namespace; returns how many
    processes were killed."""
    killed: set[int] = set()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        members = namespace_members(ns, home)
        if not members:
            return len(killed)
        for pid in members:
            _signal(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.1)
    left = namespace_members(ns, home)
    if left:
        raise ClusterError(f"processes survived SIGKILL in namespace {ns}: {left}")
    return len(killed)


def ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out
