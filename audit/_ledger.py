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
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from audit._model import Finding
from audit.safedir import SafeDir, UnsafeFile
from schemas import names, violations

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
    attempts: tuple[dict[str, Any], ...]
    skipped: dict[str, Any]
    repeated: dict[str, Any]
    replayed: int
    unknown: dict[str, Any]
    checked: bool
    first_cause: tuple[str, str, str, int] | None  # (code, message, file, attempt)

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "order_ids": self.order_ids,
            "checked": self.checked,
            "attempts": list(self.attempts),
            "skipped": self.skipped,
            "repeated": self.repeated,
            "replayed": self.replayed,
            "unknown": self.unknown,
        }


class _Order:
    """The declared order: one bytes blob (framed by newlines) and the start of every line."""

    def __init__(self, blob: bytes) -> None:
        body = blob.replace(b"\r\n", b"\n").strip(b"\n")
        self.blob = b"\n" + body + b"\n"
        marks = np.flatnonzero(np.frombuffer(self.blob, dtype=np.uint8) == 10)
        self.starts = marks[:-1] + 1  # line i is blob[starts[i]:starts[i+1]-1]
        self.ends = marks[1:]
        self.count = len(self.starts)
        self._finds = 0
        self._index: dict[bytes, int] | None = None

    def line(self, pos: int) -> bytes:
        return self.blob[self.starts[pos] : self.ends[pos]]

    def span(self, pos: int, n: int) -> bytes:
        """Lines pos..pos+n-1 joined by newlines."""
        return self.blob[self.starts[pos] : self.ends[pos + n - 1]]

    def find(self, key: bytes) -> int | None:
        if self._index is not None:
            return self._index.get(key)
        self._finds += 1
        if self._finds > _FINDS_BEFORE_INDEX:  # a stream far from the order: index it once
            self._index = {}
            for pos in range(self.count - 1, -1, -1):
                self._index[self.line(pos)] = pos
            return self._index.get(key)
        at = self.blob.find(b"\n" + key + b"\n")
        if at < 0:
            return None
        return int(np.searchsorted(self.starts, at + 1))

    def empty_lines(self) -> int:
        return int(np.count_nonzero(self.ends - self.starts == 0))


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
    def __init__(self, order: _Order | None) -> None:
        self.order = order
        self.epochs: dict[int, _Epoch] = {}
        self.repeated = 0
        self.repeated_items: list[dict[str, Any]] = []
        self.unknown = 0
        self.unknown_items: list[dict[str, Any]] = []
        self.replayed = 0

    def runs(self, epoch: _Epoch, ids: list[str | int]) -> Iterator[tuple[int, int]]:
        """(start, length) of each run of consecutive order lines the ids are; -1: an unknown id."""
        order = self.order
        assert order is not None
        keys = [str(x).encode() for x in ids]
        n, pos = len(keys), epoch.cursor
        if pos + n <= order.count and b"\n".join(keys) == order.span(pos, n):
            yield pos, n  # the whole step is the next lines of the file
            return
        i = 0
        while i < n:
            q = pos if pos < order.count and order.line(pos) == keys[i] else order.find(keys[i])
            if q is None:
                yield -1, i
                i += 1
                continue
            r = 1
            while i + r < n and q + r < order.count and order.line(q + r) == keys[i + r]:
                r += 1
            yield q, r
            i += r
            pos = q + r

    def place(self, att: _Attempt, step: int, epoch_no: int, ids: list[str | int], committed: bool) -> None:
        epoch = self.epochs.setdefault(epoch_no, _Epoch())
        if committed and epoch.first_at is None:
            epoch.first_at = (att.number, step)
        for start, length in self.runs(epoch, ids):
            if start < 0:
                self.unknown += 1
                if len(self.unknown_items) < MAX_LISTED:
                    self.unknown_items.append({"id": ids[length], "attempt": att.number, "step": step})
                continue
            end = start + length
            if committed:
                self._commit(att, step, epoch_no, epoch, ids, start, end)
            else:
                _segment(att, epoch_no, start, end, "replayed")
            epoch.cursor = end

    def _commit(
        self, att: _Attempt, step: int, epoch_no: int, epoch: _Epoch, ids: list[str | int], start: int, end: int
    ) -> None:
        assert self.order is not None
        if start > epoch.reach:
            epoch.gaps.append((epoch.reach, start, att.number, step))
        again = epoch.overlap(start, end)
        for lo, hi in again:
            self.repeated += hi - lo
            for pos in range(lo, min(hi, lo + MAX_LISTED - len(self.repeated_items))):
                self.repeated_items.append(
                    {
                        "id": self.order.line(pos).decode(errors="replace"),
                        "epoch": epoch_no,
                        "attempt": att.number,
                        "step": step,
                    }
                )
        kind = "repeated" if again else "committed"
        epoch.cover(start, end)
        epoch.reach = max(epoch.reach, end)
        _segment(att, epoch_no, start, end, kind)

    def skipped(self, attempts: list[_Attempt]) -> tuple[int, list[dict[str, Any]]]:
        """Every position not covered below its epoch's reach (a whole finished epoch), each hole
        with the gap that opened it."""
        assert self.order is not None
        total, listed = 0, list[dict[str, Any]]()
        last = max(self.epochs, default=0)
        for e in sorted(self.epochs):
            ep = self.epochs[e]
            limit = self.order.count if e < last else ep.reach
            gaps = list(ep.gaps)
            if limit > ep.reach:  # a finished epoch's tail: the gap opened where the next epoch began
                nxt = self.epochs.get(min(k for k in self.epochs if k > e))
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
                    listed.append(
                        {
                            "epoch": e,
                            "from": lo,
                            "to": hi,
                            "count": hi - lo,
                            "attempt": opened[2] if opened else None,
                            "step": opened[3] if opened else None,
                            "ids": [self.order.line(p).decode(errors="replace") for p in range(lo, min(hi, lo + 10))],
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


def _lines(safe: SafeDir, relpath: str, bad: list[Finding], rank: int) -> Iterator[dict[str, Any]]:
    """Every valid line of one ledger file, streamed; each bad one a finding (a few shown)."""
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
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                number += 1
                doc, why = _parse(raw)
                if doc is not None:
                    yield doc
                elif shown < 5:
                    shown += 1
                    bad.append(Finding("error", "schema.violation", f"line {number}: {why}", relpath, rank))
            if len(pending) > MAX_LINE_BYTES:
                bad.append(Finding("error", "json.invalid", f"line {number + 1}: too long; not read", relpath, rank))
                return
    finally:
        os.close(fd)
    if pending.strip():
        bad.append(
            Finding("warning", "ledger.torn_line", f"line {number + 1} has no end (a killed writer)", relpath, rank)
        )


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"not valid JSON: {str(exc)[:120]}"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    ids = doc.get("ids")
    if isinstance(ids, list):
        if not {type(x) for x in ids} <= {str, int}:
            return None, "ids: every sample id is a string or an integer"
        found = violations("ledger", {**doc, "ids": ids[:1]})  # the ids' types are checked above, in C
    else:
        found = violations("ledger", doc)
    if found:
        return None, "; ".join(str(v) for v in found[:3])
    return doc, ""


def _read_order(path: str | None, found: list[Finding]) -> _Order | None:
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_ORDER_BYTES:
                raise OSError(f"larger than {MAX_ORDER_BYTES} bytes")
            with os.fdopen(os.dup(fd), "rb") as fh:
                blob = fh.read()
        finally:
            os.close(fd)
    except OSError as exc:
        found.append(Finding("warning", "data.order_unreadable", f"[driver.ledger] order {path}: {exc}; not checked"))
        return None
    order = _Order(blob)
    if order.empty_lines():
        found.append(
            Finding("warning", "data.order_invalid", f"[driver.ledger] order {path}: {order.empty_lines()} empty lines")
        )
    return order


_STEP_HEAD = re.compile(rb'"kind":"(step|checkpoint)","step":(\d+)')


def _outline(safe: SafeDir, files: list[LedgerFile]) -> tuple[int | None, list[int]]:
    """(first step, checkpoints) of an attempt, without decoding its ids: a line's head says its
    kind and step (the writer puts them first); a line whose head does not is decoded whole."""
    first, saved = None, []
    for f in files:
        try:
            fd = safe.open_file(f.relpath)
        except (UnsafeFile, OSError):
            continue
        try:
            pending = b""
            while chunk := os.read(fd, 8 << 20):
                *complete, pending = (pending + chunk).split(b"\n")
                for raw in complete:
                    kind, step = _head_of(raw)
                    if kind == b"checkpoint":
                        saved.append(step)
                    elif kind == b"step" and (first is None or step < first):
                        first = step
        finally:
            os.close(fd)
    return first, saved


def _head_of(raw: bytes) -> tuple[bytes | None, int]:
    m = _STEP_HEAD.search(raw, 0, 200)
    if m is not None:
        return m.group(1), int(m.group(2))
    doc, _ = _parse(raw) if raw.strip() else (None, "")
    if doc is None:
        return None, 0
    return str(doc["kind"]).encode(), doc["step"]


def _cut(nxt: int | None, last: bool, saved: list[int]) -> int | None:
    """The last committed step of an attempt: the checkpoint the next attempt resumed from (the
    latest recorded before its first step); with no checkpoint on record at all, the step before
    the next attempt's first. None for the last attempt (all of it is committed)."""
    if last:
        return None
    if nxt is None:
        return -1
    before = [c for c in saved if c < nxt]
    if before:
        return max(before)
    return -1 if saved else nxt - 1


def check_ledger(safe: SafeDir, files: list[LedgerFile], order_path: str | None) -> tuple[LedgerSummary, list[Finding]]:
    """Check every attempt's ledger against the declared order; the summary and the findings."""
    findings: list[Finding] = []
    order = _read_order(order_path, findings)
    numbers = sorted({f.attempt for f in files})
    by_attempt = {n: sorted((f for f in files if f.attempt == n), key=lambda f: f.rank) for n in numbers}
    outlines = {n: _outline(safe, by_attempt[n]) for n in numbers}
    attempts = [_Attempt(n, [f.relpath for f in by_attempt[n]]) for n in numbers]
    check = _Check(order)
    checkpoints: list[int] = []  # every checkpoint recorded so far, in any attempt
    for k, att in enumerate(attempts):
        nxt = next((outlines[m][0] for m in numbers[k + 1 :] if outlines[m][0] is not None), None)
        saved = [*checkpoints, *outlines[att.number][1]]
        att.committed_until = _cut(nxt, k == len(attempts) - 1, saved)
        for f in by_attempt[att.number]:
            for doc in _lines(safe, f.relpath, findings, f.rank):
                step = doc["step"]
                if doc["kind"] == "checkpoint":
                    att.checkpoints.append(step)
                    continue
                att.steps += 1
                att.ids += len(doc["ids"])
                att.first_step = step if att.first_step is None else min(att.first_step, step)
                att.last_step = step if att.last_step is None else max(att.last_step, step)
                committed = att.committed_until is None or step <= att.committed_until
                if committed:
                    att.committed_ids += len(doc["ids"])
                else:
                    att.replayed_ids += len(doc["ids"])
                if order is not None:
                    check.place(att, step, doc["epoch"], doc["ids"], committed)
        if att.first_step is not None and k > 0:
            att.resumed_from = max((c for c in checkpoints if c < att.first_step), default=None)
        checkpoints.extend(att.checkpoints)
    check.replayed = sum(a.replayed_ids for a in attempts)
    skipped, gaps = check.skipped(attempts) if order is not None else (0, [])
    summary = LedgerSummary(
        order=order_path,
        order_ids=order.count if order is not None else None,
        attempts=tuple(a.to_json() for a in attempts),
        skipped={"count": skipped, "gaps": gaps},
        repeated={"count": check.repeated, "ids": check.repeated_items},
        replayed=check.replayed,
        unknown={"count": check.unknown, "ids": check.unknown_items},
        checked=order is not None,
        first_cause=None,
    )
    findings += _findings(summary, attempts, order_path)
    cause = next(((f.code, f.message, f.file or "", a) for f, a in _causes(findings, summary)), None)
    return _with_cause(summary, cause), findings


def _with_cause(summary: LedgerSummary, cause: tuple[str, str, str, int] | None) -> LedgerSummary:
    return replace(summary, first_cause=cause)


def _causes(findings: list[Finding], summary: LedgerSummary) -> Iterator[tuple[Finding, int]]:
    for f in findings:
        if f.code == "data.skipped":
            gap = summary.skipped["gaps"][0]
            yield f, gap["attempt"] or 0
        elif f.code == "data.repeated":
            yield f, summary.repeated["ids"][0]["attempt"]


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
