"""py-spy (a registry package that ships its binary): one `py-spy dump --json` per process, bounded
in time; its answer as threads of frames (function, file, line: never local variables, which can
hold credentials), or why there is none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Dump", "MISSING", "PTRACE_GRANT", "Runner", "find", "parse", "version"]

PTRACE_GRANT = (
    "grant the capability CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE; Kubernetes "
    'securityContext.capabilities.add: ["SYS_PTRACE"]) or allow ptrace between processes of one user '
    "(sysctl kernel.yama.ptrace_scope=0)"
)
MISSING = "py-spy was not found on PATH nor beside this interpreter: pip install py-spy where gym-agent runs"
_DENIED = ("Permission denied", "Operation not permitted", "EPERM", "ptrace")
_GONE = ("No such process", "Check that the process is running")
_NOT_PYTHON = "Failed to find python version"


def find() -> str | None:
    """py-spy on PATH, else beside this interpreter (where pip put it with gym-agent)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


_versions: dict[str, str | None] = {}


def version(path: str, timeout: float = 2.0) -> str | None:
    """`py-spy --version` (asked once per path, bounded: it must not stretch the capture's bound)."""
    if path not in _versions:
        try:
            done = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=max(0.1, timeout), check=False
            )
            _versions[path] = done.stdout.strip()[:100] or None
        except (OSError, subprocess.SubprocessError):
            return None
    return _versions[path]


@dataclass
class Dump:
    threads: list[dict[str, Any]] | None = None
    problem: str | None = None
    denied: bool = False  # ptrace was refused: the fallback may still answer


@dataclass
class Runner:
    """Runs dumps and can end every one still running (the overall deadline passed)."""

    path: str
    nonblocking: bool = False
    _running: set[subprocess.Popen[bytes]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def dump(self, pid: int, timeout: float) -> Dump:
        argv = [self.path, "dump", "--pid", str(pid), "--json"] + (["--nonblocking"] if self.nonblocking else [])
        with self._lock:
            if self._closed:
                return Dump(problem="not taken: the stack_dump_timeout ran out first")
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True
                )
            except OSError as exc:
                return Dump(problem=f"py-spy could not be started: {exc}")
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=max(0.05, timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return Dump(problem=f"py-spy did not answer within {timeout:.1f}s (the process may be in the kernel)")
        finally:
            with self._lock:
                self._running.discard(proc)
        if proc.returncode != 0:
            return _failed(err.decode("utf-8", errors="replace"))
        return parse(out)

    def close(self) -> None:
        """The deadline passed: kill every dump still running."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:
            try:
                proc.kill()
            except OSError:
                pass


def _failed(stderr: str) -> Dump:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    first = next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "py-spy failed")
    text = " ".join(lines[:3])
    if any(w in text for w in _DENIED):
        return Dump(problem=f"ptrace not permitted: {first[:300]}", denied=True)
    if any(w in text for w in _GONE):
        return Dump(problem=f"the process is gone: {first[:300]}")
    if _NOT_PYTHON in text:
        return Dump(problem="not a Python process py-spy can read")
    return Dump(problem=first[:300])


def parse(out: bytes) -> Dump:
    try:
        doc = json.loads(out)
    except ValueError:
        return Dump(problem="py-spy's answer is not JSON")
    if not isinstance(doc, list):
        return Dump(problem="py-spy's answer is not a list of threads")
    threads = []
    for t in doc:
        if not isinstance(t, dict):
            continue
        frames = [
            {"function": str(f.get("name", "?")), "file": str(f.get("filename", "?")), "line": _int(f.get("line"))}
            for f in t.get("frames") or []
            if isinstance(f, dict)
        ]
        threads.append(
            {
                "id": _int(t.get("os_thread_id")) or _int(t.get("thread_id")),
                "name": t.get("thread_name") if isinstance(t.get("thread_name"), str) else None,
                "active": bool(t.get("active")),
                "frames": frames,
            }
        )
    return Dump(threads=threads)


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0
