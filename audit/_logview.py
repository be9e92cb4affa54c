"""`gym-audit logs` beyond a plain grep: context lines (-A/-B), `--since`, a time-merged view
across ranks (`--merge`), and `--follow` while the run goes.

Lines are read one at a time (each capped), never a whole log. A line's time is its leading
timestamp: ours (ISO-8601 with milliseconds), Ray's (`2026-11-30 17:09:02,748`, local time) or
a bracketed one; a line without one (a traceback, a driver's print) takes the time of the line
before it, so it stays beside its context in a merged view.
"""

from __future__ import annotations

import datetime
import heapq
import json
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from audit._logs import MAX_LINE, TRUNCATED, LogFile, Matcher
from audit.safedir import SafeDir, UnsafeFile
from schemas import Phase, names

__all__ = [
    "DURATION",
    "Follower",
    "Line",
    "STAMP",
    "UNITS",
    "driver_starts",
    "file_view",
    "follow_wakes",
    "line_time",
    "merged_view",
    "parse_since",
    "read_lines",
    "render",
    "selector",
    "timed",
    "with_context",
]

STAMP = re.compile(rb"^\[?(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def line_time(line: bytes) -> float | None:
    m = STAMP.match(line)
    if not m:
        return None
    date, clock_, frac, zone = (g.decode() if g else "" for g in m.groups())
    text = f"{date}T{clock_}.{(frac or '0')[:6]}"
    try:
        stamp = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if zone:
        z = zone.replace("Z", "+00:00")
        if ":" not in z:
            z = z[:3] + ":" + z[3:]
        stamp = stamp.replace(tzinfo=datetime.datetime.fromisoformat("2000-01-01T00:00:00" + z).tzinfo)
        return stamp.timestamp()
    return stamp.timestamp()  # no zone (Ray): the host's local time, as Ray wrote it


def parse_since(text: str, now: Callable[[], float] = time.time) -> float:
    """`--since`: a duration back from now (`90s`, `10m`, `2h`) or an ISO-8601 time. ValueError otherwise."""
    m = DURATION.match(text.strip())
    if m:
        return now() - float(m.group(1)) * UNITS[m.group(2)]
    t = line_time(text.strip().encode())
    if t is None:
        raise ValueError(f"--since {text!r}: use a duration (90s, 10m, 2h) or an ISO-8601 time (2026-11-30T17:08:00Z)")
    return t


@dataclass(frozen=True)
class Line:
    time: float | None
    relpath: str
    number: int
    text: bytes


def read_lines(safe: SafeDir, relpath: str, start: int = 0, first_number: int = 1) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line, offset after it) of complete lines from byte `start` on; lines capped."""
    fd = safe.open_file(relpath)
    try:
        os.lseek(fd, start, os.SEEK_SET)
        pending = b""
        offset = start
        number = first_number
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                offset += len(ln) + 1
                yield number, ln if len(ln) <= MAX_LINE else ln[:MAX_LINE] + TRUNCATED, offset
                number += 1
            if len(pending) > 4 * MAX_LINE:  # a giant line: keep its start only
                pending = pending[: 2 * MAX_LINE]
    finally:
        os.close(fd)


def timed(relpath: str, lines: Iterable[tuple[int, bytes, int]], base: float | None = None) -> Iterator[Line]:
    """Lines with their times; `base` is the time of lines before the first stamp (a driver's
    output has none: it is placed at the start of its driver phase)."""
    last: float | None = base
    for number, text, _ in lines:
        t = line_time(text)
        last = t if t is not None else last
        yield Line(last, relpath, number, text)


def with_context(lines: Iterable[Line], keep: Callable[[Line], bool], before: int, after: int) -> Iterator[Line | None]:
    """Matching lines with `before`/`after` lines around them; None marks a gap (grep's `--`)."""
    window: deque[Line] = deque(maxlen=before)
    tail = 0
    last_number = None
    for ln in lines:
        if keep(ln):
            for b in window:
                if last_number is not None and b.number > last_number + 1:
                    yield None
                last_number = b.number
                yield b
            window.clear()
            if last_number is not None and ln.number > last_number + 1:
                yield None
            last_number = ln.number
            yield ln
            tail = after
        elif tail > 0:
            tail -= 1
            last_number = ln.number
            yield ln
        elif before:
            window.append(ln)


def selector(matcher: Matcher, since: float | None) -> Callable[[Line], bool]:
    def keep(ln: Line) -> bool:
        if since is not None and (ln.time is None or ln.time < since):
            return False
        return matcher.line_matches(ln.text)

    return keep


def file_view(
    safe: SafeDir, log: LogFile, matcher: Matcher, since: float | None, before: int, after: int
) -> Iterator[Line | None]:
    return with_context(timed(log.relpath, read_lines(safe, log.relpath)), selector(matcher, since), before, after)


def driver_starts(safe: SafeDir) -> dict[int, float]:
    """rank -> when its driver phase began (phases-RANK.json), for placing untimed driver output."""
    out: dict[int, float] = {}
    entries, _ = safe.scan()
    for rel, kind in entries:
        parsed = names.parse(rel)
        if kind != "file" or parsed is None or parsed.schema != "phases" or parsed.rank is None:
            continue
        try:
            doc = json.loads(safe.read_capped(rel))
            start = next(p["started_at"] for p in doc["phases"] if p.get("phase") == Phase.DRIVER)
        except (UnsafeFile, OSError, ValueError, KeyError, TypeError, StopIteration):
            continue
        if isinstance(start, int | float):
            out[parsed.rank] = float(start)
    return out


def merged_view(safe: SafeDir, logs: list[LogFile], matcher: Matcher, since: float | None) -> Iterator[Line]:
    """Every selected line of every log, in time order (lines without any time first)."""
    keep = selector(matcher, since)
    starts = driver_starts(safe)
    streams = [
        _keyed(
            i,
            (
                ln
                for ln in timed(
                    log.relpath, _safe_lines(safe, log.relpath), starts.get(log.rank) if log.kind == "driver" else None
                )
                if keep(ln)
            ),
        )
        for i, log in enumerate(logs)
    ]
    for *_, ln in heapq.merge(*streams):
        yield ln


def _keyed(order: int, lines: Iterator[Line]) -> Iterator[tuple[float, int, int, Line]]:
    for ln in lines:
        yield (ln.time if ln.time is not None else float("-inf"), order, ln.number, ln)


def _safe_lines(safe: SafeDir, relpath: str) -> Iterator[tuple[int, bytes, int]]:
    try:
        yield from read_lines(safe, relpath)
    except (UnsafeFile, OSError):
        return


def render(ln: Line | None, match: bool = True) -> bytes:
    if ln is None:
        return b"--\n"
    sep = b":" if match else b"-"
    return ln.relpath.encode() + sep + str(ln.number).encode() + sep + ln.text + b"\n"


def follow_wakes(relpath: str) -> bool:
    """What wakes `--follow`: a log written or created (a new log directory too), or a record
    that can end the run (its phases and cleanup records)."""
    if names.is_known_log(relpath) or names.is_log_dir(relpath):
        return True
    parsed = names.parse(relpath)
    return parsed is not None and parsed.schema in ("phases", "cleanup")


@dataclass
class Follower:
    """Where each followed log was read up to: only complete new lines are printed."""

    offsets: dict[str, tuple[int, int]]  # relpath -> (byte offset, next line number)

    def new_lines(self, safe: SafeDir, relpath: str) -> Iterator[tuple[int, bytes]]:
        start, number = self.offsets.get(relpath, (0, 1))
        size = safe.size(relpath)
        if size is None or size <= start:
            return
        for number_, text, offset in _safe_lines_from(safe, relpath, start, number):
            self.offsets[relpath] = (offset, number_ + 1)
            yield number_, text


def _safe_lines_from(safe: SafeDir, relpath: str, start: int, number: int) -> Iterator[tuple[int, bytes, int]]:
    try:
        yield from read_lines(safe, relpath, start, number)
    except (UnsafeFile, OSError):
        return
