"""What the agent and the driver it started share on the driver's node, outside the run directory.

The progress board: a small file in the agent's node-local temp dir (GYM_PROGRESS_FILE), mapped by
both. `agent.driver_api.progress(step)` stores into it (no system call, no shared-filesystem write:
well under the 2 µs a call may cost); the agent's progress watch reads it every poll interval and
sees progress when a counter changed, on its own clock. The judge client library records there
too: a grade recorded, and the deadline of the grade in flight (CLOCK_MONOTONIC is the node's, so
the agent can compare it with its own), so a judge that never answers ends as the judge's, not as
a hang of the driver.

    offset  0  8 bytes  MAGIC
    offset  8  u64      progress calls: pid << 32 | calls in that process (any change is progress)
    offset 16  i64      the last step given to progress(step), -1: none yet
    offset 24  u64      grades recorded: pid << 32 | grades in that process
    offset 32  f64      CLOCK_MONOTONIC by which the grades in flight return or raise; 0: none
                        (one process's grades: a driver grading from several processes at once
                        may see a hang called while another process's grade is still in flight)
    offset 40  u8       how the last grade ended: 0 answered (or none yet), else the index+1 of its
                        outcome in UNANSWERED (the judge left it unanswered)
    offset 48  64 bytes the judge of that unanswered grade, UTF-8, NUL-padded: when the driver then
                        exits, the agent names the judge (a judge that never answers ends as its own)

The stack-dump fallback: where py-spy cannot attach (no ptrace permission, py-spy missing), a
process that imported agent.driver_api can still dump every thread's traceback: it registered
faulthandler for STACK_SIGNAL, writing to PID.stacks in GYM_STACK_DUMP_DIR, and left PID.armed
there (its start time, so a reused pid is never signalled: that signal's default action would
kill a process that did not arm it).
"""

from __future__ import annotations

import faulthandler
import json
import mmap
import os
import re
import signal
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from schemas.vocab import DriverEnv

__all__ = [
    "ARMED_SUFFIX",
    "BOARD_SIZE",
    "BoardReader",
    "BoardReading",
    "BoardWriter",
    "F64",
    "I64",
    "JUDGE_BYTES",
    "MAGIC",
    "NO_BOARD",
    "NO_STEP",
    "PROGRESS_FILE_ENV",
    "STACKS_SUFFIX",
    "STACK_SIGNAL",
    "U64",
    "UNANSWERED",
    "arm_stack_dump",
    "armed",
    "board",
    "create_board",
    "dump_via_signal",
    "open_writer",
    "parse_faulthandler",
    "start_time",
]

PROGRESS_FILE_ENV = DriverEnv.PROGRESS_FILE
MAGIC = b"GYMPRG1\x00"
BOARD_SIZE = 128
CALLS_AT, STEP_AT, GRADES_AT, DEADLINE_AT, ENDED_AT, JUDGE_AT = 8, 16, 24, 32, 40, 48
JUDGE_BYTES = 64
UNANSWERED = ("unavailable", "refused")  # schemas.vocab.GradeOutcome values a judge left unanswered
NO_STEP = -1
U64 = struct.Struct("<Q")
I64 = struct.Struct("<q")
F64 = struct.Struct("<d")
# A real-time signal nothing else of ours uses; faulthandler writes every thread's traceback on it.
STACK_SIGNAL = signal.SIGRTMIN + 5
STACKS_SUFFIX = ".stacks"
ARMED_SUFFIX = ".armed"


# -- the progress board ------------------------------------------------------------------------


def create_board(path: str) -> None:
    """The agent: a fresh board (owner-only), before the driver starts."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        data = bytearray(BOARD_SIZE)
        data[: len(MAGIC)] = MAGIC
        I64.pack_into(data, STEP_AT, NO_STEP)
        os.write(fd, bytes(data))
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BoardReading:
    calls: int  # changes whenever the driver calls progress()
    step: int | None
    grades: int  # changes whenever a grade is recorded
    grading_until: float  # CLOCK_MONOTONIC; 0: no grade in flight
    unanswered: tuple[str, str] | None = None  # (outcome, judge) of the last grade, when unanswered


class BoardReader:
    """The agent's read-only view of the board."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self._map = mmap.mmap(fd, BOARD_SIZE, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def read(self) -> BoardReading:
        m = self._map
        step = I64.unpack_from(m, STEP_AT)[0]
        return BoardReading(
            U64.unpack_from(m, CALLS_AT)[0],
            None if step == NO_STEP else step,
            U64.unpack_from(m, GRADES_AT)[0],
            F64.unpack_from(m, DEADLINE_AT)[0],
            _unanswered(m),
        )

    def close(self) -> None:
        self._map.close()


def _unanswered(m: mmap.mmap) -> tuple[str, str] | None:
    code = m[ENDED_AT]
    if not 1 <= code <= len(UNANSWERED):
        return None
    judge = bytes(m[JUDGE_AT : JUDGE_AT + JUDGE_BYTES]).rstrip(b"\0").decode("utf-8", errors="replace")
    return UNANSWERED[code - 1], judge


class BoardWriter:
    """A driver process's writable view (agent.driver_api, the judge client library)."""

    __slots__ = ("_map", "_base", "_calls", "_grades", "_lock", "_inflight", "_tokens")

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self._map = mmap.mmap(fd, BOARD_SIZE)
        finally:
            os.close(fd)
        if self._map[: len(MAGIC)] != MAGIC:
            self._map.close()
            raise OSError(f"{path} is not a progress board")
        # Two processes of one driver never store the same value: each counts under its own pid.
        self._base = (os.getpid() & 0xFFFFFFFF) << 32
        self._calls = 0
        self._grades = 0
        self._lock = threading.Lock()  # grades run in threads of the driver
        self._inflight: dict[int, float] = {}
        self._tokens = 0

    def progress(self, step: int | None) -> None:
        self._calls += 1
        if step is not None:
            I64.pack_into(self._map, STEP_AT, step)
        U64.pack_into(self._map, CALLS_AT, self._base | (self._calls & 0xFFFFFFFF))

    def grade_recorded(self, outcome: str = "", judge: str | None = None) -> None:
        """A grade was recorded (progress); `outcome` unanswered by `judge` is kept for the agent."""
        if outcome in UNANSWERED:
            name = (judge or "").encode("utf-8")[:JUDGE_BYTES]
            self._map[JUDGE_AT : JUDGE_AT + JUDGE_BYTES] = name.ljust(JUDGE_BYTES, b"\0")
            self._map[ENDED_AT] = UNANSWERED.index(outcome) + 1
        else:
            self._map[ENDED_AT] = 0
        self._grades += 1
        U64.pack_into(self._map, GRADES_AT, self._base | (self._grades & 0xFFFFFFFF))

    def grading(self, deadline: float) -> int:
        """A grade starts that returns or raises by `deadline` (CLOCK_MONOTONIC); a token for graded()."""
        with self._lock:
            self._tokens += 1
            self._inflight[self._tokens] = deadline
            self._store_deadline()
            return self._tokens

    def graded(self, token: int) -> None:
        with self._lock:
            self._inflight.pop(token, None)
            self._store_deadline()

    def _store_deadline(self) -> None:
        """The latest deadline of this process's grades in flight; 0 when none is."""
        F64.pack_into(self._map, DEADLINE_AT, max(self._inflight.values(), default=0.0))


class _NoBoard:
    """Outside a run the agent started: progress() does nothing."""

    __slots__ = ()

    def progress(self, step: int | None) -> None:
        pass

    def grade_recorded(self, outcome: str = "", judge: str | None = None) -> None:
        pass

    def grading(self, deadline: float) -> int:
        return 0

    def graded(self, token: int) -> None:
        pass


NO_BOARD = _NoBoard()


def open_writer(path: str | None) -> BoardWriter | _NoBoard:
    if not path:
        return NO_BOARD
    try:
        return BoardWriter(path)
    except (OSError, ValueError):
        return NO_BOARD  # never the driver's failure: it only loses hang detection by progress()


_board: BoardWriter | _NoBoard | None = None


def board() -> BoardWriter | _NoBoard:
    """This process's board (GYM_PROGRESS_FILE, opened at the first use; nothing outside a run)."""
    global _board
    if _board is None:
        _board = open_writer(os.environ.get(PROGRESS_FILE_ENV))
    return _board


def _forget_board() -> None:
    global _board
    _board = None  # a forked child counts under its own pid


os.register_at_fork(after_in_child=_forget_board)


# -- the stack-dump fallback -------------------------------------------------------------------


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid,
    it names one process for the machine's uptime."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


_armed: list[IO[bytes]] = []  # faulthandler writes to these until the process ends


def arm_stack_dump(folder: str) -> bool:
    """Make this process dump every thread's traceback to FOLDER/PID.stacks on STACK_SIGNAL, and
    say so in FOLDER/PID.armed. Returns whether it is armed; never raises for a missing folder."""
    pid = os.getpid()
    base = os.path.join(folder, str(pid))
    try:
        fd = os.open(base + STACKS_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    out = os.fdopen(fd, "ab", buffering=0)
    faulthandler.register(STACK_SIGNAL, file=out, all_threads=True, chain=False)
    _armed.append(out)
    main = threading.main_thread().ident
    marker = {"pid": pid, "start_time": start_time(pid), "main_thread": main}
    tmp = f"{base}.{os.urandom(4).hex()}.tmp"
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            json.dump(marker, fh)
        os.replace(tmp, base + ARMED_SUFFIX)
    except OSError:
        faulthandler.unregister(STACK_SIGNAL)
        return False
    return True


def armed(folder: str, pid: int) -> dict[str, Any] | None:
    """The marker of `pid` when that very process armed the fallback (same start time), else None."""
    try:
        with open(os.path.join(folder, f"{pid}{ARMED_SUFFIX}"), encoding="utf-8") as fh:
            marker = json.loads(fh.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("start_time") is None:
        return None
    return marker if marker.get("start_time") == start_time(pid) else None


def dump_via_signal(folder: str, pid: int, timeout: float, settle: float = 0.05) -> str | None:
    """Signal an armed process and return what it wrote (None: it wrote nothing within `timeout`)."""
    path = Path(folder) / f"{pid}{STACKS_SUFFIX}"
    try:
        before = path.stat().st_size
        os.kill(pid, STACK_SIGNAL)
    except OSError:
        return None
    end = time.monotonic() + timeout
    size, stable_since = before, time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.01)
        try:
            now_size = path.stat().st_size
        except OSError:
            return None
        if now_size != size:
            size, stable_since = now_size, time.monotonic()
        elif size > before and time.monotonic() - stable_since >= settle:
            break
    if size <= before:
        return None
    with open(path, "rb") as fh:
        fh.seek(before)
        return fh.read(min(size - before, 1 << 20)).decode("utf-8", errors="replace")


_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*?)\])? \(most recent call first\):")
_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler(text: str, main_thread: int | None = None) -> list[dict[str, Any]]:
    """faulthandler's dump as threads (innermost frame first, as it prints them)."""
    threads: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _THREAD_RE.match(line)
        if m:
            ident = int(m.group(2), 16)
            name = m.group(3) or ("MainThread" if main_thread is not None and ident == main_thread else None)
            main = main_thread is not None and ident == main_thread
            threads.append({"id": ident, "name": name, "active": None, "main": main, "frames": []})
            continue
        f = _FRAME_RE.match(line)
        if f and threads:
            threads[-1]["frames"].append({"function": f.group(3), "file": f.group(1), "line": int(f.group(2))})
    return threads
