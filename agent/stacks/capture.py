"""Take the stacks of a list of processes within one time bound, as the fields of stacks-RANK.json.

py-spy reads each Python process (a few in parallel, each bounded, all within `timeout`). Where it
cannot (ptrace not permitted, py-spy missing, it failed), a process that imported agent.driver_api
dumps its own stacks on a signal (agent/proc/driver_local.py). Non-Python processes (raylet, a
shell) are listed without stacks. Only node-local work: /proc, py-spy, node-local files; the
caller writes the record (the supervisor's thread, which runs this, never touches the shared
filesystem). The record is capped: threads per process, frames per thread, bytes in all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.ground import clock
from agent.proc import driver_local
from agent.stacks import _pyspy as pyspy
from agent.stacks._targets import Target
from schemas.vocab import StackMethod, StackReason

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["Capture", "StackReason", "capture", "trigger_of"]

PARALLEL = 4  # py-spy dumps at once: a node has tens of Python processes (Ray workers)
PER_PROCESS_S = 10.0  # one dump's bound (a process stuck in the kernel must not take them all)
FALLBACK_S = 2.0  # how long a process that armed the fallback gets to write its dump
MAX_THREADS = 64
MAX_FRAMES = 48
MAX_TEXT = 256
MAX_BYTES = 4 << 20  # the record's size cap; frames are cut (outermost first) until it fits
FALLBACK_NOTE = "dumped by the process itself (faulthandler, armed by importing agent.driver_api)"


@dataclass(frozen=True)
class Capture:
    """The record's fields and what they hold, for the caller's log line."""

    fields: dict[str, Any]
    processes: int
    with_stacks: int
    seconds: float


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _is_main(t: dict[str, Any], pid: int) -> bool:
    return bool(t.get("main")) or t.get("name") == "MainThread" or t.get("id") == pid


def _threads(threads: list[dict[str, Any]], frames: int, pid: int) -> list[dict[str, Any]]:
    """The main thread first, then the others; cut to the caps. Frames innermost first."""
    ordered = sorted(threads, key=lambda t: not _is_main(t, pid))
    out = []
    for i, t in enumerate(ordered[:MAX_THREADS]):
        fs = t.get("frames") or []
        out.append(
            {
                "id": int(t.get("id") or 0),
                "main": i == 0 and _is_main(t, pid),
                "name": _cut(t["name"]) if isinstance(t.get("name"), str) else None,
                "active": t.get("active") if isinstance(t.get("active"), bool) else None,
                "frames": [
                    {"function": _cut(str(f["function"])), "file": _cut(str(f["file"])), "line": int(f["line"])}
                    for f in fs[:frames]
                ],
                "frames_cut": max(0, len(fs) - frames),
            }
        )
    return out


def _entry(t: Target, method: StackMethod, threads: list[dict[str, Any]] | None, problem: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pid": t.pid,
        "role": t.role,
        "group": t.group,
        "name": _cut(t.name),
        "cmdline": list(t.cmdline),
        "method": str(method),
        "threads": threads or [],
        "threads_cut": 0,
    }
    if problem:
        entry["problem"] = _cut(problem)
    return entry


def capture(
    targets: list[Target],
    *,
    reason: StackReason,
    timeout: float,
    dump_dir: str | None,
    more: int = 0,
    request: str | None = None,
    trigger: dict[str, Any] | None = None,
    py_spy: str | None = None,
    nonblocking: bool = False,
) -> Capture:
    """Every target's stacks within `timeout` seconds in all. `py_spy`: its path (default: found on
    PATH or beside this interpreter); `nonblocking`: py-spy does not pause the process (a request
    while the run is healthy)."""
    t0 = clock.mono()
    started_at = clock.wall()
    deadline = t0 + timeout
    path = py_spy if py_spy is not None else pyspy.find()
    pythons = [t for t in targets if t.python]
    dumps = _dump_all(pythons, path, deadline, timeout, nonblocking) if path is not None and pythons else {}
    processes = [_process(t, dumps.get(t.pid), path, dump_dir, deadline) for t in targets]
    denied = _ptrace_refusal(targets, dumps)
    read_by_py_spy = sum(1 for p in processes if p["method"] == StackMethod.PY_SPY)
    fallbacks = sum(1 for p in processes if p["method"] == StackMethod.FAULTHANDLER)
    fields: dict[str, Any] = {
        "reason": str(reason),
        "request": request,
        "trigger": trigger,
        "started_at": started_at,
        "seconds": round(clock.mono() - t0, 3),
        "timeout": timeout,
        "py_spy": {
            "path": path,
            "version": pyspy.version(path, min(2.0, deadline - clock.mono())) if path is not None else None,
            "problem": None if path is not None else pyspy.MISSING,
        },
        "ptrace": {
            # Known only from py-spy's own answers: True once it read a process, False when refused.
            "permitted": True if read_by_py_spy else (False if denied is not None else None),
            "problem": denied,
            "grant": pyspy.PTRACE_GRANT if denied is not None else None,
        },
        "fallback_dumps": fallbacks,
        "processes": processes,
        "processes_not_shown": more,
        "truncated": False,
    }
    _fit(fields)
    with_stacks = sum(1 for p in processes if p["threads"])
    return Capture(fields, len(processes), with_stacks, clock.mono() - t0)


def _dump_all(
    pythons: list[Target], path: str, deadline: float, timeout: float, nonblocking: bool
) -> dict[int, pyspy.Dump]:
    """py-spy's dump of every Python process, a few at once, all within the deadline; the ones not
    taken by then say so."""
    # Imported here: an idle agent never takes stacks, and the pool's modules are memory it keeps (issue 51).
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    dumps: dict[int, pyspy.Dump] = {}
    runner = pyspy.Runner(path, nonblocking=nonblocking)
    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="py-spy")
    futures: dict[Future[pyspy.Dump], int] = {}

    def one(pid: int) -> pyspy.Dump:
        return runner.dump(pid, min(PER_PROCESS_S, deadline - clock.mono()))

    for t in pythons:
        futures[pool.submit(one, t.pid)] = t.pid
    pending = set(futures)
    while pending and clock.mono() < deadline:
        done, pending = wait(pending, timeout=max(0.0, deadline - clock.mono()), return_when=FIRST_COMPLETED)
        for f in done:
            dumps[futures[f]] = f.result()
    runner.close()  # past the bound: whatever still runs is killed
    pool.shutdown(wait=False, cancel_futures=True)
    for f in pending:
        dumps.setdefault(futures[f], pyspy.Dump(problem=f"not taken within stack_dump_timeout {timeout:g}s"))
    return dumps


def _process(
    t: Target, dump: pyspy.Dump | None, path: str | None, dump_dir: str | None, deadline: float
) -> dict[str, Any]:
    """One process's entry: py-spy's stacks, else the process's own dump, else why there are none."""
    if not t.python:
        return _entry(t, StackMethod.NONE, None, f"not a Python process ({t.name})")
    if dump is not None and dump.threads is not None:
        return _entry(t, StackMethod.PY_SPY, dump.threads, None)
    problem = pyspy.MISSING if path is None else (dump.problem if dump is not None else None) or "not taken"
    own = _fallback(t, dump_dir, deadline)
    if own is not None:
        return _entry(t, StackMethod.FAULTHANDLER, own, f"{problem}; {FALLBACK_NOTE}")
    if dump_dir is not None and driver_local.armed(dump_dir, t.pid) is None:
        problem += " (and it did not import agent.driver_api, whose fallback dump needs no ptrace)"
    return _entry(t, StackMethod.NONE, None, problem)


def _ptrace_refusal(targets: list[Target], dumps: dict[int, pyspy.Dump]) -> str | None:
    """The first refusal py-spy met (in the targets' order) on a process it could not read."""
    denied: str | None = None
    for t in targets:
        dump = dumps.get(t.pid)
        if t.python and dump is not None and dump.threads is None and dump.denied and denied is None:
            denied = dump.problem
    return denied


def _fallback(t: Target, dump_dir: str | None, deadline: float) -> list[dict[str, Any]] | None:
    """The process's own faulthandler dump, when it armed one (agent.driver_api imported)."""
    if dump_dir is None:
        return None
    marker = driver_local.armed(dump_dir, t.pid)
    if marker is None:
        return None
    left = min(FALLBACK_S, deadline - clock.mono())
    if left <= 0:
        return None
    text = driver_local.dump_via_signal(dump_dir, t.pid, left)
    if not text:
        return None
    main = marker.get("main_thread")
    threads = driver_local.parse_faulthandler(text, main if isinstance(main, int) else None)
    return threads or None


def _fit(fields: dict[str, Any]) -> None:
    """Cap threads and frames, then cut frames (outermost first) until the record fits MAX_BYTES."""
    for p in fields["processes"]:
        raw = p["threads"]
        p["threads"] = _threads(raw, MAX_FRAMES, p["pid"])
        p["threads_cut"] = max(0, len(raw) - MAX_THREADS)
    frames = MAX_FRAMES
    while len(json.dumps(fields)) > MAX_BYTES and frames > 1:
        frames //= 2
        fields["truncated"] = True
        for p in fields["processes"]:
            for t in p["threads"]:
                cut = t["frames"][frames:]
                t["frames"] = t["frames"][:frames]
                t["frames_cut"] += len(cut)
    while len(json.dumps(fields)) > MAX_BYTES and fields["processes"]:
        fields["processes"].pop()
        fields["processes_not_shown"] += 1
        fields["truncated"] = True


def trigger_of(kind: str, cause: str) -> dict[str, Any]:
    return {"kind": kind, "cause": cause[:1000]}
