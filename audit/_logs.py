"""Reading run logs without loading them: tail excerpts for the first cause, and a streaming grep.

Logs on a shared filesystem reach many GB. Everything here reads in fixed-size chunks with
memory bounded by the chunk size (plus one capped line), so `gym-audit logs` runs at disk
speed. Matching is per line (`file:line:` output like grep -n): a chunk is searched as a whole
with the pattern compiled MULTILINE and every hit is re-checked against its own line, which
keeps the per-line semantics while letting the regex engine skip non-matching lines; a literal
is found by memchr on its rarest byte, and newlines are counted only up to each hit and at the
end of a chunk (with numpy in a big log). Lines longer than `max_line` are searched piecewise
and printed truncated.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from audit.safedir import SafeDir, UnsafeFile
from schemas import names
from schemas.tracebacks import last_traceback

__all__ = [
    "CHUNK",
    "Counter",
    "ERROR_LINE",
    "FOLD",
    "LogFile",
    "MAX_LINE",
    "Matcher",
    "REGEX_META",
    "TAIL_BYTES",
    "TRUNCATED",
    "VECTOR_FROM",
    "excerpt",
    "grep_fd",
    "grep_log",
    "list_logs",
    "log_excerpt",
    "parse_log_name",
    "read_tail",
]

CHUNK = 1024 * 1024
MAX_LINE = 64 * 1024
TAIL_BYTES = 256 * 1024
TRUNCATED = b" ...[line truncated]"
# ASCII case folding via translate: several times faster than bytes.lower() on big blocks.
REGEX_META = set(".^$*+?{}[]\\|()")  # without these a pattern means itself (re.escape also escapes spaces)
FOLD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")

ERROR_LINE = re.compile(
    r"(?i)(error|exception|fatal|critical|killed|failed|failure|panic|out of memory|oom|segmentation fault|"
    r"traceback|exit code|exited with|signal)"
)
_KIND_ORDER = {"driver": 0, "judge": 1, "gateway": 2, "agent": 3, "ray": 4, "ray-session": 5}


@dataclass(frozen=True)
class LogFile:
    relpath: str
    kind: str
    rank: int
    judge: str | None


def parse_log_name(relpath: str) -> LogFile | None:
    parsed = names.parse(relpath)
    if parsed is None or parsed.log is None or parsed.rank is None:
        return None
    return LogFile(relpath, parsed.log, parsed.rank, parsed.judge)


def list_logs(safe: SafeDir, rank: int | None = None, judge: str | None = None) -> list[LogFile]:
    entries, _ = safe.scan()
    out = []
    for relpath, kind in entries:
        log = parse_log_name(relpath) if kind == "file" else None
        if log is None:
            continue
        if rank is not None and log.rank != rank:
            continue
        if judge is not None and log.judge != judge:
            continue
        out.append(log)
    return sorted(out, key=lambda g: (_KIND_ORDER.get(g.kind, len(_KIND_ORDER)), g.rank, g.judge or "", g.relpath))


# -- excerpts -----------------------------------------------------------------------------------


def read_tail(safe: SafeDir, relpath: str, nbytes: int = TAIL_BYTES, end: int | None = None) -> list[str]:
    """The last lines within the last `nbytes` of a log (of its first `end` bytes: whole lines
    only), decoded leniently (logs are not always UTF-8)."""
    fd = safe.open_file(relpath)
    try:
        size = os.fstat(fd).st_size if end is None else min(end, os.fstat(fd).st_size)
        offset = max(0, size - nbytes)
        os.lseek(fd, offset, os.SEEK_SET)
        chunks, total = [], 0
        while total < size - offset:
            chunk = os.read(fd, min(1 << 20, size - offset - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if offset > 0:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""  # drop the partial first line
    if end is not None and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]  # a line cut at `end` was still being written
    return data.decode("utf-8", errors="replace").splitlines()


def excerpt(lines: list[str], max_lines: int = 30, max_chars: int = 400) -> tuple[str, ...]:
    """The last Python traceback if there is one, else the last error-looking lines, else the tail."""
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    picked: list[str]
    span = last_traceback(lines)
    if span is not None:
        start, end = span
        picked = lines[start : end + 1]
        if len(picked) > max_lines:
            picked = picked[:4] + ["    ..."] + picked[-(max_lines - 5) :]
    else:
        errors = [ln for ln in lines if ERROR_LINE.search(ln)]
        picked = errors[-min(10, max_lines) :] if errors else lines[-min(10, max_lines) :]
    return tuple(ln if len(ln) <= max_chars else ln[: max_chars - 3] + "..." for ln in picked)


def log_excerpt(safe: SafeDir, relpath: str, until: int | None = None) -> tuple[str, ...]:
    """The excerpt of a log; `until`: of its first bytes only, as its last lines (a hang's driver
    log up to the moment the hang was called: what it did then, not how it was stopped)."""
    try:
        if until is None:
            return excerpt(read_tail(safe, relpath))
        lines = _last_lines(read_tail(safe, relpath, end=until))
        return tuple(ln if len(ln) <= 400 else ln[:397] + "..." for ln in lines)
    except (UnsafeFile, OSError):
        return ()


def _last_lines(lines: list[str], count: int = 10) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines[-count:]


# -- streaming grep -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Matcher:
    """A compiled search. A literal uses bytes.find (an ASCII literal with --ignore-case searches a
    lowercased copy of each block, which stays at memchr speed where an IGNORECASE regex does not);
    anything else a MULTILINE regex whose hits are re-checked against their own line."""

    literal: bytes | None
    block_rx: re.Pattern[bytes] | None
    line_rx: re.Pattern[bytes] | None
    fold: bool = False  # literal is lowercase; compare against lowercased text

    @classmethod
    def compile(cls, pattern: str | None, ignore_case: bool = False) -> Matcher:
        """Raises re.error for a bad pattern."""
        if pattern is None:
            return cls(None, None, None)
        raw = pattern.encode("utf-8", errors="surrogateescape")
        if pattern and not REGEX_META & set(pattern) and (not ignore_case or pattern.isascii()):
            return cls(raw.lower() if ignore_case else raw, None, None, fold=ignore_case)
        flags = re.IGNORECASE if ignore_case else 0
        return cls(None, re.compile(raw, flags | re.MULTILINE), re.compile(raw, flags))

    @property
    def matches_all(self) -> bool:
        return self.literal is None and self.block_rx is None

    def line_matches(self, line: bytes) -> bool:
        if self.literal is not None:
            return self.literal in (line.translate(FOLD) if self.fold else line)
        if self.line_rx is not None:
            return self.line_rx.search(line) is not None
        return True

    def find(self, buf: bytes | bytearray, pos: int, end: int) -> int:
        """Offset of the first candidate hit in buf[pos:end], or -1 (buf already folded if `fold`)."""
        if self.literal is not None:
            return buf.find(self.literal, pos, end)
        if self.block_rx is not None:
            m = self.block_rx.search(buf, pos, end)
            return m.start() if m else -1
        return pos if pos < end else -1


def _cap(line: bytes, max_line: int) -> bytes:
    return line if len(line) <= max_line else line[:max_line] + TRUNCATED


Counter = Callable[[bytearray, int, int], int]  # newlines in buf[start:end]


def _count_plain(buf: bytearray, start: int, end: int) -> int:
    return buf.count(b"\n", start, end)


def _vector_counter(size: int) -> Counter:
    """Newlines counted by numpy: ~5 GB/s where bytearray.count, a byte-at-a-time loop in
    CPython, does ~1.2 GB/s. Only for big logs: numpy's import (~0.1 s) is not worth it below.
    `size`: the largest span counted; its comparison result is preallocated (a fresh 1 MiB array
    per chunk would be new pages from the kernel every time)."""
    # numpy's BLAS starts a thread per core at import (~0.1 s of CPU); nothing here multiplies matrices.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import numpy as np
    except ImportError:  # a trimmed install: the same answer, 4x slower on a big log
        return _count_plain
    scratch = np.empty(size, dtype=np.bool_)

    def count(buf: bytearray, start: int, end: int) -> int:
        if end - start < 4096:
            return buf.count(b"\n", start, end)
        out = scratch[: end - start]
        np.equal(np.frombuffer(buf, np.uint8, end - start, start), 10, out=out)
        return int(np.count_nonzero(out))

    return count


@dataclass
class _LiteralFinder:
    """A literal's hits at memchr speed. bytes.find runs ~2 GB/s on log text; memchr for the
    needle's rarest byte (the one least seen in a sample of the log itself) runs at memory speed,
    and each place it is seen is checked in place. Where that byte turns out common (more than
    one miss per 256 bytes searched), bytes.find takes over for the rest of the call."""

    needle: bytes
    byte: int = -1  # chosen from the first block searched
    offset: int = 0  # where `byte` sits in the needle

    def _choose(self, hay: bytes | bytearray, pos: int, end: int) -> None:
        sample = bytes(hay[pos : min(end, pos + 65536)])
        self.byte = min(set(self.needle), key=lambda b: sample.count(b))
        self.offset = self.needle.index(self.byte)

    def find(self, hay: bytes | bytearray, pos: int, end: int) -> int:
        if len(self.needle) < 2:
            return hay.find(self.needle, pos, end)
        if self.byte < 0:
            self._choose(hay, pos, end)
        needle, byte, offset = self.needle, self.byte, self.offset
        i = hay.find(byte, pos + offset, end)
        misses = 0
        while i >= 0:
            s = i - offset
            if hay.startswith(needle, s, end):
                return s
            misses += 1
            if misses > 32 and misses * 256 > i - pos:
                return hay.find(needle, s + 1, end)
            i = hay.find(byte, i + 1, end)
        return -1


def _search_block(
    buf: bytearray,
    start: int,
    end: int,
    first_line: int,
    matcher: Matcher,
    max_line: int,
    count: Counter,
    finder: _LiteralFinder | None,
) -> Generator[tuple[int, bytes], None, tuple[int, int]]:
    """Hits in buf[start:end], which holds whole lines ending in b'\\n'. Line numbers are 1-based.
    Returns (number of the line at offset `counted`, counted): newlines before `counted` are
    already counted, so the caller counts only the rest of the block."""
    if matcher.matches_all:
        line_no = first_line
        pos = start
        while pos < end:
            nl = buf.find(b"\n", pos, end)
            yield line_no, _cap(bytes(buf[pos:nl]), max_line)
            line_no += 1
            pos = nl + 1
        return line_no, end
    pos, counted_to, line_no = start, start, first_line
    # Fold the block once (not per hit), so frequent hits stay linear.
    hay = buf.translate(FOLD) if matcher.fold else buf
    while pos < end:
        i = finder.find(hay, pos, end) if finder is not None else matcher.find(hay, pos, end)
        if i < 0:
            break
        ls = max(start, buf.rfind(b"\n", start, i) + 1)
        le = buf.find(b"\n", i, end)
        if le < 0:
            le = end - 1
        line = bytes(buf[ls:le])
        if matcher.literal is not None or matcher.line_matches(line):
            line_no += count(buf, counted_to, ls)
            counted_to = ls
            yield line_no, _cap(line, max_line)
        pos = le + 1
    return line_no, counted_to


VECTOR_FROM = 32 * 1024 * 1024  # a log this big counts its newlines with numpy


def grep_fd(
    fd: int, matcher: Matcher, chunk: int = CHUNK, max_line: int = MAX_LINE, vector: bool | None = None
) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every matching line of an open file, reading `chunk` bytes at a time.

    One preallocated buffer: the kernel reads straight into it (readinto) and only the partial
    last line is moved to its front between reads, so no chunk is ever copied in Python. The
    chunk is small enough (1 MiB) to stay in the CPU's cache while it is searched and counted.
    `vector`: count newlines with numpy (None: when the file is at least VECTOR_FROM bytes).
    """
    if vector is None:
        vector = os.fstat(fd).st_size >= VECTOR_FROM
    buf = bytearray(chunk + max_line + 1)
    count = _vector_counter(len(buf)) if vector else _count_plain
    finder = _LiteralFinder(matcher.literal) if matcher.literal else None
    view = memoryview(buf)
    raw = io.FileIO(fd, "rb", closefd=False)
    filled = 0  # valid bytes in buf; buf[:filled] starts at the beginning of a line (or a long line's piece)
    line_no = 1  # number of the line at buf[0]
    in_long = False  # inside a line longer than max_line whose start was already searched
    long_hit = False
    try:
        while True:
            n = raw.readinto(view[filled : filled + chunk])
            if not n:
                break
            filled += n
            cut = buf.rfind(b"\n", 0, filled)
            if cut < 0:
                if filled <= max_line:
                    continue  # keep reading: the line is not complete yet
                # A giant line: search this piece, remember whether it matched, drop it.
                if not long_hit and matcher.line_matches(bytes(view[:filled])):
                    long_hit = True
                    yield line_no, bytes(view[:max_line]) + TRUNCATED
                in_long, filled = True, 0
                continue
            start = 0
            if in_long:
                first_nl = buf.find(b"\n", 0, filled)
                if not long_hit and matcher.line_matches(bytes(view[:first_nl])):
                    yield line_no, bytes(view[: min(first_nl, max_line)]) + TRUNCATED
                line_no += 1
                in_long, long_hit = False, False
                start = first_nl + 1
            if start <= cut:
                at, counted = yield from _search_block(buf, start, cut + 1, line_no, matcher, max_line, count, finder)
                line_no = at + count(buf, counted, cut + 1)
            rest = filled - (cut + 1)
            buf[:rest] = view[cut + 1 : filled]  # same length: a memmove, no resize
            filled = rest
        tail = bytes(view[:filled])
    finally:
        view.release()
    if in_long:
        if not long_hit and tail and matcher.line_matches(tail):
            yield line_no, tail[:max_line] + TRUNCATED
    elif tail and matcher.line_matches(tail):
        # The last line has no newline (a log still being written, or cut off).
        yield line_no, _cap(tail, max_line)


def grep_log(safe: SafeDir, relpath: str, matcher: Matcher, chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    fd = safe.open_file(relpath)
    try:
        yield from grep_fd(fd, matcher, chunk)
    finally:
        os.close(fd)
