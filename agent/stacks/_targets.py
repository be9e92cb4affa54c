"""Which processes an agent takes stacks of: every live process of every group it supervises (the
driver's tree, Ray's daemons and workers, managed judges), found by session as the teardown finds
them, each with its role and a scrubbed command line."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.proc.procgroup import session_members
from schemas.credentials import REDACTED, redact_argv

__all__ = [
    "MAX_ARGS",
    "MAX_ARG_CHARS",
    "RAY_NODE_AGENTS",
    "RAY_WORKER_TITLE",
    "REDACTED",
    "Target",
    "describe",
    "is_python",
    "role_of",
    "scrub",
    "supervised",
]

MAX_ARGS = 64
MAX_ARG_CHARS = 512
RAY_WORKER_TITLE = "ray::"  # Ray names a worker's process after the task or actor it runs
RAY_NODE_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")  # Ray's own per-node agents, not workers


@dataclass(frozen=True)
class Target:
    pid: int
    role: str  # driver, ray, ray_worker, judge
    group: str  # the supervised group it belongs to (driver, ray-head, ray-worker, judge-NAME)
    name: str  # /proc/PID/comm
    cmdline: tuple[str, ...]  # scrubbed and cut
    python: bool  # its executable is a Python interpreter (py-spy can read it)


def role_of(group: str, cmdline: Sequence[str]) -> str:
    family = group.split("-", 1)[0]  # the supervisor's group names: driver, ray-head, ray-worker, judge-NAME
    if family == "ray":
        title = cmdline[0] if cmdline else ""
        return "ray_worker" if title.startswith(RAY_WORKER_TITLE) and title not in RAY_NODE_AGENTS else "ray"
    return family


def scrub(argv: Iterable[str]) -> tuple[str, ...]:
    """A command line as an artifact may keep it: every credential redacted (the one rule,
    schemas.credentials), every argument cut, and so is the count."""
    out: list[str] = []
    for arg in redact_argv(argv):
        if len(out) >= MAX_ARGS:
            out.append(f"...[{MAX_ARGS}+ arguments]")
            break
        out.append(arg if len(arg) <= MAX_ARG_CHARS else arg[: MAX_ARG_CHARS - 1] + "…")
    return tuple(out)


def _read(path: str, limit: int = 65536) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return b""


def is_python(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.startswith(("python", "pypy"))


def describe(pid: int, group: str) -> Target:
    raw = _read(f"/proc/{pid}/cmdline")
    argv = [a.decode("utf-8", errors="replace") for a in raw.split(b"\0") if a]
    if len(argv) == 1 and " " in argv[0] and argv[0].startswith(RAY_WORKER_TITLE):
        argv = [argv[0]]  # a process title set with spaces: one argument, as shown
    comm = _read(f"/proc/{pid}/comm", 64).decode("utf-8", errors="replace").strip()
    return Target(pid, role_of(group, argv), group, comm, scrub(argv), is_python(pid))


def supervised(groups: Sequence[tuple[str, int]], limit: int) -> tuple[list[Target], int]:
    """The live processes of `groups` ((name, session) of each supervised group), at most `limit`;
    and how many more there were."""
    out: list[Target] = []
    more = 0
    for name, session in groups:
        for proc in sorted(session_members(session), key=lambda p: p.pid):
            if len(out) >= limit:
                more += 1
                continue
            out.append(describe(proc.pid, name))
    return out, more
