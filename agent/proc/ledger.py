"""The sample ledger's writer in the driver's process: agent.driver_api.ledger() and checkpoint().

Cheap like progress(): a call encodes one JSON line and queues it in memory (no system call, no
shared-filesystem write). A thread of the process appends what is queued to ``ledger-RANK.jsonl``
in the run directory at most once every FLUSH_SECONDS, in one write(2) on an O_APPEND descriptor
(lines of several processes of one driver never interleave), and once more at exit.

checkpoint(step) appends at once, in the caller: once it returns, the ids of every step up to that
checkpoint are in the run directory, so a node killed right after a checkpoint leaves the part of
the stream the next attempt resumes from complete. What a kill loses is at most the last
FLUSH_SECONDS of steps after the last checkpoint: work the next attempt redoes anyway (the audit
counts those ids as replayed when they are there, and can tell nothing from them when they are not).

A line the run directory refuses (full, a planted symlink, not a regular file) does not fail the
driver: it is said once on stderr and dropped; the audit then names the ids it misses.
"""

from __future__ import annotations

import atexit
import errno
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from schemas import DriverEnv, RunDir, RunDirError, names
from schemas.timefmt import iso_ms

__all__ = ["FLUSH_SECONDS", "LedgerWriter", "NO_LEDGER", "NoLedger", "SampleIds", "ledger_ids", "writer"]

FLUSH_SECONDS = 1.0  # the most often the run directory sees a write from one process
SampleIds = Iterable[str | int]


def ledger_ids(ids: Any) -> list[str | int]:
    """The ids as a list of str and int, or TypeError naming what is wrong (a numpy or torch
    array of integers is taken through its tolist())."""
    if hasattr(ids, "tolist") and not isinstance(ids, list | tuple):
        ids = ids.tolist()
    if isinstance(ids, str | bytes) or not isinstance(ids, list | tuple | range):
        raise TypeError(f"ledger(): ids must be a list of str or int sample ids, not {type(ids).__name__}")
    out = ids if isinstance(ids, list) else list(ids)
    kinds = set(map(type, out))  # one pass at C speed: 10^4 ids cost ~0.1 ms
    if not kinds <= {str, int}:
        bad = next(i for i, x in enumerate(out) if type(x) not in (str, int))
        raise TypeError(f"ledger(): ids[{bad}] is a {type(out[bad]).__name__}; a sample id is a str or an int")
    return out


class LedgerWriter:
    """One process's queue of ledger lines and the thread that appends them."""

    def __init__(self, run_dir: Path, rank: int, attempt: int | None) -> None:
        self.run_dir, self.rank, self.attempt = run_dir, rank, attempt
        self.relpath = names.ledger(rank)
        self._pid = os.getpid()
        self._queue: deque[bytes] = deque()  # append and popleft are atomic: no lock per call
        self._write_lock = threading.Lock()
        self._fd = -1
        self._warned = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        atexit.register(self.flush)

    def step(self, step: int, ids: list[str | int], epoch: int) -> None:
        self._queue.append(self._line("step", step, {"epoch": epoch, "ids": ids}))
        if self._thread is None:
            self._start()

    def checkpoint(self, step: int) -> None:
        self._queue.append(self._line("checkpoint", step, {}))
        self.flush()  # the resume point and every step before it reach the run directory now

    def flush(self) -> None:
        """Append everything queued, in one write."""
        if os.getpid() != self._pid:
            return  # a forked child's copy of its parent's queue (and maybe of a held lock): not its lines
        with self._write_lock:
            batch = bytearray()
            while True:
                try:
                    batch += self._queue.popleft()
                except IndexError:
                    break
            if batch:
                self._append(batch)

    def _line(self, kind: str, step: int, extra: dict[str, Any]) -> bytes:
        doc = {
            "schema": "ledger",
            "schema_version": 1,
            "kind": kind,
            "step": step,
            **extra,
            "rank": self.rank,
            "attempt": self.attempt,
            "pid": self._pid,
            "at": iso_ms(time.time()),
        }
        return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gym-ledger", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_SECONDS)
            self.flush()

    def _append(self, data: bytearray) -> None:
        try:
            if self._fd < 0:
                self._fd = _open_append(self.run_dir, self.relpath)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except (OSError, RunDirError) as exc:  # full, unwritable, a planted symlink
            if not self._warned:
                self._warned = True
                print(
                    f"gym-agent: {self.relpath}: lines not written ({exc}); the audit will miss them", file=sys.stderr
                )


def _open_append(run_dir: Path, relpath: str) -> int:
    """An O_APPEND descriptor on the ledger: a planted symlink or a non-regular file is refused."""
    with RunDir.open(run_dir) as run:
        fd = run.open_log(relpath)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{relpath} is not a regular file")
    return fd


class NoLedger:
    """Outside a run the agent started: the calls are checked, nothing is written."""

    __slots__ = ()

    def step(self, step: int, ids: list[str | int], epoch: int) -> None:
        pass

    def checkpoint(self, step: int) -> None:
        pass

    def flush(self) -> None:
        pass


NO_LEDGER = NoLedger()

_writer: LedgerWriter | NoLedger | None = None


def writer() -> LedgerWriter | NoLedger:
    """This process's ledger (GYM_RUN_DIR and GYM_RANK, opened at the first call)."""
    global _writer
    if _writer is None:
        run_dir, rank = os.environ.get(DriverEnv.RUN_DIR), os.environ.get(DriverEnv.RANK)
        if not run_dir or not rank or not rank.isdigit():
            _writer = NO_LEDGER
        else:
            attempt = os.environ.get(DriverEnv.ATTEMPT, "")
            _writer = LedgerWriter(Path(run_dir), int(rank), int(attempt) if attempt.isdigit() else None)
    return _writer


def _forget_writer() -> None:
    global _writer
    _writer = None  # a forked child writes its own lines (its pid), through its own descriptor


os.register_at_fork(after_in_child=_forget_writer)
