"""The sample ledger across attempts (ledger-RANK.jsonl, agent.driver_api.ledger / checkpoint),
checked against the declared dataset order ([driver.ledger] order: one id a line).

The committed stream: each attempt's steps up to the checkpoint the next attempt resumed from, then
the last attempt's steps. A resumed attempt continues the step numbering of the checkpoint it
loaded, so the checkpoint attempt N+1 resumed from is the last one recorded before its first step
(its first step minus one, when the driver checkpointed there). Attempt N's steps after it are the
replay: work the next attempt redoes, counted apart and never a repeat.

Epoch E of the committed stream is expected to be the order file's ids, in its order (a prefix of it
for the run's last epoch). Every id is placed at its position in the file: a jump forward leaves a
gap (skipped: data.skipped, with the attempt and step where it opened; a gap later filled is no
skip), an id placed where the epoch already went is a repeat (data.repeated). An epoch that a later
one followed must cover the whole file.

Cost (bench/ledger_bench.py): the order is one bytes blob and a numpy array of line starts; a step
whose ids are the next lines of the file (every step of a correct loader) is one comparison of
joined bytes; only a step that is not is placed id by id, each run of consecutive lines found once.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from audit._model import Finding
from audit.safedir import SafeDir, UnsafeFile
from schemas import names, violations
from schemas.ledger_order import epoch_order
from schemas.timefmt import parse_iso

__all__ = ["LedgerFile", "LedgerSummary", "MAX_LISTED", "check_ledger", "ledger_files"]

MAX_LISTED = 100  # ids, gaps and segments kept per list in the result (the counts are exact)
MAX_SEGMENTS = 400  # per attempt, for the HTML stream
MAX_ORDER_BYTES = 4 << 30
MAX_LINE_BYTES = 64 << 20  # 10^6 ids of 60 characters
_FINDS_BEFORE_INDEX = 256  # ids found by scanning the order; beyond, an index of every id is built once


@dataclass(frozen=True)
class LedgerFile:
    attempt: int
    relpath: str  # inside the run directory (attempts/N/ledger-RANK.jsonl for an earlier attempt)
    rank: int


@dataclass
class _Attempt:
    number: int
    files: list[str] = field(default_factory=list)
    steps: int = 0
    ids: int = 0
    first_step: int | None = None
    last_step: int | None = None
    checkpoints: list[int] = field(default_factory=list)
    resumed_from: int | None = None  # the checkpoint this attempt continued from
    committed_until: int | None = None  # steps up to this one are committed (None: all)
    committed_ids: int = 0
    replayed_ids: int = 0
    segments: list[list[Any]] = field(default_factory=list)  # [epoch, start, end, kind]
    segments_cut: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.number,
            "files": self.files,
            "steps": self.steps,
            "ids": self.ids,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "checkpoints": self.checkpoints[-MAX_LISTED:],
            "checkpoint_count": len(self.checkpoints),
            "resumed_from": self.resumed_from,
            "committed_until_step": self.committed_until,
            "committed_ids": self.committed_ids,
            "replayed_ids": self.replayed_ids,
            "segments": self.segments,
            "segments_cut": self.segments_cut,
        }


@dataclass(frozen=True)
class LedgerSummary:
    """The ledger's check, for the reports (`--json`: `ledger`; HTML: the stream per attempt)."""

    order: str | None
    order_ids: int | None
    shuffle_seed: int | None
    attempts: tuple[dict[str, Any], ...]
    skipped: dict[str, Any]
    repeated: dict[str, Any]
    replayed: int
    unknown: dict[str, Any]
    checked: bool
    first_cause: tuple[str, str, str, int, float | None] | None  # (code, message, file, attempt, wall time)

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "order_ids": self.order_ids,
            "shuffle_seed": self.shuffle_seed,
            "checked": self.checked,
            "attempts": list(self.attempts),
            "skipped": self.skipped,
            "repeated": self.repeated,
            "replayed": self.replayed,
            "unknown": self.unknown,
        }


class _Lines:
    """An epoch's order of lines: the file's own (_Order) or a shuffle of it (_Shuffled)."""

    count: int

    def line(self, pos: int) -> bytes | bytearray:
        raise NotImplementedError

    def span(self, pos: int, n: int) -> bytes | bytearray:
        """Lines pos..pos+n-1 joined by newlines."""
        raise NotImplementedError

    def joined(self, pos: int, n: int) -> int:
        """The length of span(pos, n), without building it."""
        raise NotImplementedError

    def find(self, key: bytes) -> int | None:
        raise NotImplementedError

    def encoded(self, pos: int, n: int, quoted: bool) -> bytes | bytearray:
        """Lines pos..pos+n-1 as the writer encodes a list of those ids (the inside of its JSON array)."""
        if quoted:
            return b'"' + self.span(pos, n).replace(b"\n", b'","') + b'"'
        return self.span(pos, n).replace(b"\n", b",")

    def fit(self, pos: int, length: int, quoted: bool) -> int | None:
        """How many lines from pos the writer's encoding of `length` bytes would hold, if any: lines
        pos..pos+n-1 encode to their joined length plus two quotes each (strings), so the one n
        that fits is found by bisection, not by counting the ids' text."""
        extra = 2 if quoted else 0
        lo, hi = 1, self.count - pos
        while lo <= hi:
            mid = (lo + hi) // 2
            size = self.joined(pos, mid) + extra * mid
            if size == length:
                return mid
            if size < length:
                lo = mid + 1
            else:
                hi = mid - 1
        return None


class _Order(_Lines):
    """The declared order: one buffer of its lines, framed by newlines, and where each newline is
    (line i is blob[marks[i] + 1 : marks[i + 1]])."""

    def __init__(self, blob: bytearray) -> None:
        self.blob = blob
        view = np.frombuffer(blob, dtype=np.uint8)
        chunk = 1 << 24  # the newline test in slices: a boolean copy of 10^8 bytes is not needed at once
        kind = np.uint32 if len(blob) < (1 << 32) else np.int64  # 4 bytes a line where it fits
        parts = [(np.flatnonzero(view[i : i + chunk] == 10) + i).astype(kind) for i in range(0, len(view), chunk)]
        marks = np.concatenate(parts)
        end = len(marks)
        while end > 1 and marks[end - 1] - marks[end - 2] == 1:
            end -= 1  # the file's own trailing newlines: no lines
        self.marks = marks[:end]
        del view
        self.count = len(self.marks) - 1
        self._finds = 0
        self._index: dict[bytes, int] | None = None

    def line(self, pos: int) -> bytearray:
        return self.blob[self.marks[pos] + 1 : self.marks[pos + 1]]

    def span(self, pos: int, n: int) -> bytearray:
        return self.blob[self.marks[pos] + 1 : self.marks[pos + n]]

    def joined(self, pos: int, n: int) -> int:
        return int(self.marks[pos + n]) - int(self.marks[pos]) - 1

    def find(self, key: bytes) -> int | None:
        if not key or b"\n" in key or b"\r" in key:
            return None  # no line of the order is empty or holds a line break
        if self._index is not None:
            return self._index.get(key)
        self._finds += 1
        if self._finds > _FINDS_BEFORE_INDEX:  # a stream far from the order: index it once
            self._index = {}
            for pos in range(self.count - 1, -1, -1):
                self._index[bytes(self.line(pos))] = pos
            return self._index.get(key)
        at = self.blob.find(b"\n" + key + b"\n", 0, int(self.marks[-1]) + 1)
        if at < 0:
            return None
        return int(self.marks.searchsorted(np.array(at, dtype=self.marks.dtype)))  # same dtype: no copy of the marks

    def empty_lines(self) -> int:
        return int(np.count_nonzero(self.marks[1:] - self.marks[:-1] == 1))


class _Shuffled(_Lines):
    """Epoch `epoch` of a shuffled order ([driver.ledger] shuffle_seed): position k holds the
    file's line perm[k] (schemas.ledger_order.epoch_order)."""

    def __init__(self, order: _Order, seed: int, epoch: int) -> None:
        self.order, self.count = order, order.count
        self.perm = epoch_order(order.count, seed, epoch)
        self.inverse = np.empty_like(self.perm)
        self.inverse[self.perm] = np.arange(order.count, dtype=self.perm.dtype)
        sizes = np.diff(order.marks.astype(np.int64))[self.perm]  # each line with its newline
        self.cum = np.concatenate(([0], np.cumsum(sizes)))
        self.bytes = np.frombuffer(order.blob, dtype=np.uint8)

    def line(self, pos: int) -> bytearray:
        return self.order.line(int(self.perm[pos]))

    def span(self, pos: int, n: int) -> bytes:
        idx = self.perm[pos : pos + n]
        starts = self.order.marks[idx].astype(np.int64) + 1
        sizes = self.order.marks[idx + 1].astype(np.int64) - starts + 1  # each line and its newline
        offsets = np.cumsum(sizes) - sizes
        gather = np.repeat(starts - offsets, sizes) + np.arange(int(sizes.sum()))
        return self.bytes[gather].tobytes()[:-1]

    def joined(self, pos: int, n: int) -> int:
        return int(self.cum[pos + n] - self.cum[pos]) - 1

    def find(self, key: bytes) -> int | None:
        q = self.order.find(key)
        return None if q is None else int(self.inverse[q])


class _Ids:
    """A step's ids as written (the inside of the line's JSON array), decoded only when the step is
    not simply the next lines of the order (whose length alone says how many ids it holds)."""

    __slots__ = ("_list", "count", "quoted", "text")

    def __init__(self, text: bytes, decoded: list[str | int] | None = None) -> None:
        self.text = text
        self.quoted = text[:1] == b'"'
        self._list = decoded
        self.count: int | None = len(decoded) if decoded is not None else (0 if not text else None)

    def decoded(self) -> list[str | int]:
        if self._list is None:
            self._list = orjson.loads(b"[" + self.text + b"]")
            self.count = len(self._list)
        return self._list

    def exact(self) -> int:
        return self.count if self.count is not None else len(self.decoded())

    def types_ok(self) -> bool:
        """Every id a str or an int (asked of ids already decoded; the others are checked when decoded)."""
        return self._list is None or set(map(type, self._list)) <= {str, int}


@dataclass
class _Epoch:
    covered: list[list[int]] = field(default_factory=list)  # sorted, disjoint [start, end)
    reach: int = 0  # the furthest position placed
    cursor: int = 0  # where the last run ended: the next step usually starts there
    gaps: list[tuple[int, int, int, int]] = field(default_factory=list)  # (start, end, attempt, step)
    first_at: tuple[int, int] | None = None  # (attempt, step) of its first committed step

    def overlap(self, start: int, end: int) -> list[tuple[int, int]]:
        out = []
        i = max(0, bisect.bisect_right(self.covered, [start, float("inf")]) - 1)
        for a, b in self.covered[i:]:
            if a >= end:
                break
            lo, hi = max(a, start), min(b, end)
            if lo < hi:
                out.append((lo, hi))
        return out

    def cover(self, start: int, end: int) -> None:
        c = self.covered
        if c and c[-1][1] == start:  # the usual case: the stream goes on where it was
            c[-1][1] = end
            return
        i = bisect.bisect_left(c, [start, start])
        c.insert(i, [start, end])
        # merge neighbours
        j = max(0, i - 1)
        while j + 1 < len(c):
            if c[j][1] >= c[j + 1][0]:
                c[j][1] = max(c[j][1], c[j + 1][1])
                del c[j + 1]
            else:
                j += 1


class _Check:
    def __init__(self, order: _Order | None, shuffle_seed: int | None = None) -> None:
        self.order = order
        self.shuffle_seed = shuffle_seed
        self._views: dict[int, _Lines] = {}
        self.epochs: dict[int, _Epoch] = {}
        self.repeated = 0
        self.repeated_items: list[dict[str, Any]] = []
        self.unknown = 0
        self.unknown_items: list[dict[str, Any]] = []
        self.replayed = 0
        self.times: dict[tuple[int, int], str] = {}  # (attempt, step): `at` of a step that opened a gap or repeated

    def view(self, epoch: int) -> _Lines:
        """Epoch `epoch`'s order: the file's, or its shuffle (the last two kept: ~24 bytes a line each)."""
        assert self.order is not None
        if self.shuffle_seed is None:
            return self.order
        if epoch not in self._views:
            while len(self._views) >= 2:
                del self._views[min(self._views)]
            self._views[epoch] = _Shuffled(self.order, self.shuffle_seed, epoch)
        return self._views[epoch]

    def runs(self, order: _Lines, epoch: _Epoch, step_ids: _Ids) -> Iterator[tuple[int, int]]:
        """(start, length) of each run of consecutive order lines the ids are; -1: an unknown id."""
        pos, text = epoch.cursor, step_ids.text
        if not text:
            return
        for start in (pos, epoch.reach):  # where the stream goes on; where a resume should pick it up
            n = order.fit(start, len(text), step_ids.quoted) if start < order.count else None
            if n is not None and text == order.encoded(start, n, step_ids.quoted):
                step_ids.count = n
                yield start, n  # the whole step is consecutive lines of the file: one comparison in C
                return
        decoded = step_ids.decoded()
        n = len(decoded)
        keys = [x.encode() if type(x) is str else str(x).encode() for x in decoded]
        i = 0
        while i < n:
            q = pos if pos < order.count and order.line(pos) == keys[i] else order.find(keys[i])
            if q is None:
                yield -1, i
                i += 1
                continue
            rest = n - i
            if q + rest <= order.count and b"\n".join(keys[i:]) == order.span(q, rest):
                yield q, rest  # the rest of the step is consecutive from there (a resume's first step)
                return
            r = 1
            while i + r < n and q + r < order.count and order.line(q + r) == keys[i + r]:
                r += 1
            yield q, r
            i += r
            pos = q + r

    def place(self, att: _Attempt, step: int, epoch_no: int, ids: _Ids, at: str, committed: bool) -> None:
        epoch = self.epochs.setdefault(epoch_no, _Epoch())
        if committed and epoch.first_at is None:
            epoch.first_at = (att.number, step)
            self.times[epoch.first_at] = at  # where a finished epoch's tail gap opened
        for start, length in self.runs(self.view(epoch_no), epoch, ids):
            if start < 0:
                self.unknown += 1
                if len(self.unknown_items) < MAX_LISTED:
                    self.unknown_items.append({"id": ids.decoded()[length], "attempt": att.number, "step": step})
                continue
            end = start + length
            if committed and self._commit(att, step, epoch_no, epoch, start, end):
                self.times[(att.number, step)] = at
            else:
                _segment(att, epoch_no, start, end, "replayed")
            epoch.cursor = end

    def _commit(self, att: _Attempt, step: int, epoch_no: int, epoch: _Epoch, start: int, end: int) -> bool:
        """Places a committed run of lines; whether it opened a gap or repeated."""
        assert self.order is not None
        gap = start > epoch.reach
        if gap:
            epoch.gaps.append((epoch.reach, start, att.number, step))
        again = epoch.overlap(start, end)
        for lo, hi in again:
            self.repeated += hi - lo
            for pos in range(lo, min(hi, lo + MAX_LISTED - len(self.repeated_items))):
                self.repeated_items.append(
                    {
                        "id": self.view(epoch_no).line(pos).decode(errors="replace"),
                        "epoch": epoch_no,
                        "attempt": att.number,
                        "step": step,
                    }
                )
        kind = "repeated" if again else "committed"
        epoch.cover(start, end)
        epoch.reach = max(epoch.reach, end)
        _segment(att, epoch_no, start, end, kind)
        return gap or bool(again)

    def skipped(self, attempts: list[_Attempt]) -> tuple[int, list[dict[str, Any]]]:
        """Every position not covered below its epoch's reach (a whole finished epoch), each hole
        with the gap that opened it."""
        assert self.order is not None
        total, listed = 0, list[dict[str, Any]]()
        committed = sorted(e for e, ep in self.epochs.items() if ep.first_at is not None)  # not replay alone
        last = max(committed, default=0)
        for e in committed:
            ep = self.epochs[e]
            limit = self.order.count if e < last else ep.reach
            gaps = list(ep.gaps)
            if limit > ep.reach:  # a finished epoch's tail: the gap opened where the next epoch began
                nxt = self.epochs.get(min(k for k in committed if k > e))
                at = nxt.first_at if nxt is not None and nxt.first_at else (attempts[-1].number, -1)
                gaps.append((ep.reach, limit, at[0], at[1]))
            prev = 0
            holes = []
            for a, b in [*ep.covered, [limit, limit]]:
                if a > prev:
                    holes.append((prev, min(a, limit)))
                prev = max(prev, b)
                if prev >= limit:
                    break
            for lo, hi in holes:
                if hi <= lo:
                    continue
                total += hi - lo
                opened = next((g for g in gaps if g[0] <= lo < g[1]), None)
                if len(listed) < MAX_LISTED:
                    view = self.view(e)  # a shuffled epoch's order is rebuilt only to name ids
                    listed.append(
                        {
                            "epoch": e,
                            "from": lo,
                            "to": hi,
                            "count": hi - lo,
                            "attempt": opened[2] if opened else None,
                            "step": opened[3] if opened else None,
                            "ids": [view.line(p).decode(errors="replace") for p in range(lo, min(hi, lo + 10))],
                        }
                    )
        return total, listed


def _segment(att: _Attempt, epoch: int, start: int, end: int, kind: str) -> None:
    seg = att.segments
    if seg and seg[-1][0] == epoch and seg[-1][2] == start and seg[-1][3] == kind:
        seg[-1][2] = end
    elif len(seg) < MAX_SEGMENTS:
        seg.append([epoch, start, end, kind])
    else:
        att.segments_cut += 1


def _lines(safe: SafeDir, relpath: str, bad: list[Finding], rank: int) -> Iterator[tuple[dict[str, Any], _Ids | None]]:
    """Every valid line of one ledger file, streamed, as (its fields but the ids, its ids); each bad
    line a finding (a few shown)."""
    try:
        fd = safe.open_file(relpath)
    except (UnsafeFile, OSError) as exc:
        bad.append(Finding("error", "file.unreadable", f"cannot be read: {exc}", relpath, rank))
        return
    shown = 0
    pending = b""
    number = 0
    try:
        while chunk := os.read(fd, 8 << 20):
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                number += 1
                doc, ids, why = _parse(raw)
                if doc is not None:
                    yield doc, ids
                elif shown < 5:
                    shown += 1
                    bad.append(Finding("error", "schema.violation", f"line {number}: {why}", relpath, rank))
            if len(pending) > MAX_LINE_BYTES:
                bad.append(Finding("error", "json.invalid", f"line {number + 1}: too long; not read", relpath, rank))
                return
    finally:
        os.close(fd)
    if pending.strip():
        torn = f"line {number + 1} has no end (a writer killed mid-line)"
        bad.append(Finding("warning", "ledger.torn_line", torn, relpath, rank))


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, _Ids | None, str]:
    """A line's fields (its ids replaced by []) and its ids, undecoded where the writer's own
    spelling allows; or why the line is not one."""
    at = raw.find(b'"ids":[')
    end = raw.rfind(b"]")
    doc: Any = None
    ids = None
    if 0 <= at < end:
        try:
            doc = orjson.loads(raw[:at] + b'"ids":[]' + raw[end + 1 :])
            ids = _Ids(raw[at + 7 : end])
        except orjson.JSONDecodeError:
            doc = None  # not the writer's spelling: decoded whole below
    try:
        if doc is None:
            doc = orjson.loads(raw)
            if isinstance(doc, dict) and isinstance(doc.get("ids"), list):
                ids = _Ids(orjson.dumps(doc["ids"])[1:-1], doc["ids"])
                doc["ids"] = []
    except orjson.JSONDecodeError as exc:
        return None, None, f"not valid JSON: {str(exc)[:120]}"
    if not isinstance(doc, dict):
        return None, None, "not a JSON object"
    if ids is not None and not ids.types_ok():
        return None, None, "ids: every sample id is a string or an integer"
    found = violations("ledger", doc)  # the ids as []: their types are checked when decoded, their lines by the order
    if found:
        return None, None, "; ".join(str(v) for v in found[:3])
    return doc, ids, ""


def _read_order(path: str | None, found: list[Finding], recorded: Mapping[str, Any] | None = None) -> _Order | None:
    """The order file as it is now; `recorded`: its identity when the run started (spec.json's
    ledger_order), compared with the bytes read (data.order_changed)."""
    if path is None:
        return None
    try:
        with open(path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_ORDER_BYTES:
                raise OSError(f"larger than {MAX_ORDER_BYTES} bytes")
            blob = bytearray(size + 2)  # read in place between two newlines: no copy of the order
            blob[0] = 10
            got = fh.readinto(memoryview(blob)[1 : size + 1]) or 0
    except OSError as exc:
        found.append(Finding("warning", "data.order_unreadable", f"[driver.ledger] order {path}: {exc}; not checked"))
        return None
    blob[got + 1] = 10  # the closing newline; resizing the buffer would copy it
    if recorded is not None:
        found += _changed(path, recorded, blob, got)
    if got < size:
        blob = blob[: got + 2]  # the file shrank while read
    if blob.find(b"\r") >= 0:
        blob = bytearray(blob.replace(b"\r\n", b"\n"))
    order = _Order(blob)
    if order.empty_lines():
        found.append(
            Finding("warning", "data.order_invalid", f"[driver.ledger] order {path}: {order.empty_lines()} empty lines")
        )
    return order


def _changed(path: str, recorded: Mapping[str, Any], blob: bytearray, got: int) -> list[Finding]:
    """data.order_changed when the file read (blob[1 : got + 1]) is not the one the run started with."""
    now = hashlib.sha256(memoryview(blob)[1 : got + 1]).hexdigest()
    if now == recorded.get("sha256"):
        return []
    lines = blob.count(b"\n", 1, got + 1) + (got > 0 and blob[got] != 10)  # as schemas.ledger_order counts
    then = recorded.get("path")
    where = f"{path} (recorded as {then})" if then and then != os.path.abspath(path) else path
    return [
        Finding(
            "warning",
            "data.order_changed",
            f"[driver.ledger] order {where} is not the file the run started with: sha256 {recorded.get('sha256')} "
            f"({recorded.get('lines')} lines) when it started, {now} ({lines} lines) now; the ledger is checked "
            "against the file as it is now",
            names.SPEC,
        )
    ]


_STEP_HEAD = re.compile(rb'"kind":"(step|checkpoint)","step":(\d+)')


def _first_of(safe: SafeDir, files: list[LedgerFile]) -> int | None:
    """The first step an attempt recorded: its files' first step lines (read up to there only)."""
    firsts = []
    for f in files:
        try:
            fd = safe.open_file(f.relpath)
        except (UnsafeFile, OSError):
            continue
        try:
            data = b""
            while (chunk := os.read(fd, 1 << 20)) and len(data) <= MAX_LINE_BYTES:
                data += chunk
                if (step := _first_step(data)) is not None:
                    firsts.append(step)
                    break
        finally:
            os.close(fd)
    return min(firsts, default=None)


def _take(check: _Check, att: _Attempt, step: int, epoch: int, ids: _Ids, at: str, *, committed: bool) -> None:
    """One step line of an attempt, committed or replayed: placed in the order (when declared) and counted."""
    att.steps += 1
    if check.order is not None:  # placed first: a step that is not the order's next lines is decoded there
        check.place(att, step, epoch, ids, at, committed)
    count = ids.exact()
    att.ids += count
    att.first_step = step if att.first_step is None else min(att.first_step, step)
    att.last_step = step if att.last_step is None else max(att.last_step, step)
    if committed:
        att.committed_ids += count
    else:
        att.replayed_ids += count


def _first_step(data: bytes) -> int | None:
    pos = 0
    while (end := data.find(b"\n", pos)) >= 0:
        kind, step = _head_of(data[pos:end])
        if kind == b"step":
            return step
        pos = end + 1
    return None


def _head_of(raw: bytes) -> tuple[bytes | None, int]:
    m = _STEP_HEAD.search(raw, 0, 200)
    if m is not None:
        return m.group(1), int(m.group(2))
    doc, _, _ = _parse(raw) if raw.strip() else (None, None, "")
    if doc is None:
        return None, 0
    return str(doc["kind"]).encode(), doc["step"]


def _committed(att: _Attempt, step: int) -> bool:
    return att.committed_until is None or step <= att.committed_until


def _cut(nxt: int | None, last: bool, saved: list[int]) -> int | None:
    """The last committed step of an attempt: the checkpoint the next attempt resumed from (the
    latest recorded before its first step); with no checkpoint on record at all, the step before
    the next attempt's first. None for the last attempt (all of it is committed)."""
    if last or nxt is None:
        return None
    before = [c for c in saved if c < nxt]
    if before:
        return max(before)
    return -1 if saved else nxt - 1


def check_ledger(
    safe: SafeDir,
    files: list[LedgerFile],
    order_path: str | None,
    shuffle_seed: int | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> tuple[LedgerSummary, list[Finding]]:
    """Check every attempt's ledger against the declared order; the summary and the findings.
    `recorded`: the order's identity when the run started (spec.json's ledger_order), if kept."""
    findings: list[Finding] = []
    order = _read_order(order_path, findings, recorded)
    numbers = sorted({f.attempt for f in files})
    by_attempt = {n: sorted((f for f in files if f.attempt == n), key=lambda f: f.rank) for n in numbers}
    firsts = {n: _first_of(safe, by_attempt[n]) for n in numbers}
    attempts = [_Attempt(n, [f.relpath for f in by_attempt[n]]) for n in numbers]
    check = _Check(order, shuffle_seed)
    checkpoints: list[int] = []  # every checkpoint recorded so far, in any attempt
    for k, att in enumerate(attempts):
        nxt = next((firsts[m] for m in numbers[k + 1 :] if firsts[m] is not None), None)
        last = nxt is None  # no later attempt trained a step: this one's stream is the run's end
        # A step is committed once a checkpoint at or after it (before the next attempt's first
        # step) is seen; until then it waits here, in stream order: the steps since the last one.
        pending: list[tuple[int, int, _Ids, str]] = []
        for f in by_attempt[att.number]:
            for doc, ids in _lines(safe, f.relpath, findings, f.rank):
                step = doc["step"]
                if doc["kind"] == "checkpoint" or ids is None:
                    att.checkpoints.append(step)
                    if nxt is not None and step < nxt:
                        while pending and pending[0][0] <= step:
                            _take(check, att, *pending.pop(0), committed=True)
                    continue
                if last:
                    _take(check, att, step, doc["epoch"], ids, doc["at"], committed=True)
                else:
                    pending.append((step, doc["epoch"], ids, doc["at"]))
        att.committed_until = _cut(nxt, last, [*checkpoints, *att.checkpoints])
        for step, epoch, ids, at in pending:
            _take(check, att, step, epoch, ids, at, committed=_committed(att, step))
        if att.first_step is not None and k > 0:
            att.resumed_from = max((c for c in checkpoints if c < att.first_step), default=None)
        checkpoints.extend(att.checkpoints)
    check.replayed = sum(a.replayed_ids for a in attempts)
    skipped, gaps = check.skipped(attempts) if order is not None else (0, [])
    summary = LedgerSummary(
        order=order_path,
        order_ids=order.count if order is not None else None,
        shuffle_seed=shuffle_seed,
        attempts=tuple(a.to_json() for a in attempts),
        skipped={"count": skipped, "gaps": gaps},
        repeated={"count": check.repeated, "ids": check.repeated_items},
        replayed=check.replayed,
        unknown={"count": check.unknown, "ids": check.unknown_items},
        checked=order is not None,
        first_cause=None,
    )
    findings += _findings(summary, attempts, order_path)
    first = next(_causes(findings, summary), None)
    if first is None:
        return summary, findings
    cause, attempt, step = first
    wall = parse_iso(check.times.get((attempt, step), ""))  # the one stamp parsed: the first cause's step
    return replace(summary, first_cause=(cause.code, cause.message, cause.file or "", attempt, wall)), findings


def _causes(findings: list[Finding], summary: LedgerSummary) -> Iterator[tuple[Finding, int, int]]:
    """The data errors that can be a run's first cause, with the (attempt, step) where each began."""
    for f in findings:
        if f.code == "data.skipped":
            gap = summary.skipped["gaps"][0]
            yield f, gap["attempt"] or 0, gap["step"] if gap["step"] is not None else -1
        elif f.code == "data.repeated":
            first = summary.repeated["ids"][0]
            yield f, first["attempt"], first["step"]


def _where(attempts: list[_Attempt], number: int | None) -> str:
    return next((a.files[0] for a in attempts if a.number == number and a.files), attempts[-1].files[0])


def _findings(s: LedgerSummary, attempts: list[_Attempt], order_path: str | None) -> list[Finding]:
    out = []
    total = sum(a.ids for a in attempts)
    if not s.checked:
        if order_path is None:
            out.append(
                Finding(
                    "info",
                    "data.unchecked",
                    f"the ledger holds {total} ids over {len(attempts)} attempt(s); no [driver.ledger] order is "
                    "declared, so nothing is checked against it",
                    attempts[-1].files[0],
                )
            )
        return out
    if s.skipped["count"]:
        g = s.skipped["gaps"][0]
        at = f"attempt {g['attempt']} at step {g['step']}" if g["attempt"] is not None else "an unknown step"
        out.append(
            Finding(
                "error",
                "data.skipped",
                f"{s.skipped['count']} sample id(s) of the declared order never trained on; the first gap opened in "
                f"{at} (epoch {g['epoch']}, positions {g['from']}..{g['to'] - 1}: {', '.join(g['ids'][:5])}"
                f"{', ...' if g['count'] > 5 else ''})",
                _where(attempts, g["attempt"]),
            )
        )
    if s.repeated["count"]:
        r = s.repeated["ids"][0]
        out.append(
            Finding(
                "error",
                "data.repeated",
                f"{s.repeated['count']} sample id(s) trained on again in the same epoch beyond the replay since the "
                f"last checkpoint; the first in attempt {r['attempt']} at step {r['step']} (epoch {r['epoch']}: "
                f"{', '.join(x['id'] for x in s.repeated['ids'][:5])}{', ...' if s.repeated['count'] > 5 else ''})",
                _where(attempts, r["attempt"]),
            )
        )
    if s.unknown["count"]:
        u = s.unknown["ids"][0]
        out.append(
            Finding(
                "warning",
                "data.unknown",
                f"{s.unknown['count']} id(s) recorded that the declared order does not hold; the first {u['id']!r} "
                f"in attempt {u['attempt']} at step {u['step']}",
                _where(attempts, u["attempt"]),
            )
        )
    committed = sum(a.committed_ids for a in attempts)
    out.append(
        Finding(
            "info",
            "data.ledger",
            f"{committed} committed id(s) over {len(attempts)} attempt(s) checked against {s.order_ids} declared; "
            f"{s.replayed} replayed after a checkpoint (work redone on resume, not repeats)",
            attempts[-1].files[0],
        )
    )
    return out


def ledger_files(safe: SafeDir, top: list[str], current: int, earlier: list[int]) -> list[LedgerFile]:
    """Every attempt's ledger files: attempts/N/ for the earlier ones, the top for the current one."""
    out = []
    for n in earlier:
        if n == current:
            continue
        try:
            leaves, _ = safe.list_files(names.attempt_dir(n), 10_000)
        except UnsafeFile:
            continue
        for leaf in leaves:
            m = names.LEDGER_RE.match(leaf)
            if m:
                out.append(LedgerFile(n, f"{names.attempt_dir(n)}/{leaf}", int(m.group(1))))
    for rel in top:
        m = names.LEDGER_RE.match(rel)
        if m:
            out.append(LedgerFile(current, rel, int(m.group(1))))
    return out
