"""Judge replies counted independently of the driver's own claim (driver-result.json
`judge_replies`), from what the judges and the grading client wrote themselves:

- a managed judge's request log (judge-NAME-RANK.log): one access line per request, as SGLang's
  uvicorn writes them (``"POST /v1/chat/completions HTTP/1.1" 200``), so chat completions
  answered 200, less the canaries' replies (judge-canaries.json: the agent's, not the driver's).
  A log with no access line at all (a log level above info) counts nothing: None, not 0;
- grades-RANK.jsonl and its rotated segments grades-RANK.N.jsonl (every grade the judge client
  makes, canaries excluded): lines with ``replied: true``, any judge, external ones included;
  `seq` (1, 2, ... per writing process, never reset by rotation) tells how many lines rotation
  dropped, which may have been replies too;
- the judge's gateway (judge-gateway-NAME.jsonl and its segments): every request any client sent,
  so generating requests the judge answered 2xx, less those the canary client marked. Where a
  gateway log exists it is the count: it sees every client (a MILES trainer, plain HTTP) and every
  judge, external ones included.

Everything is read through SafeDir and bounded (audit/_lines.py).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from audit._lines import LineReader
from audit._load import LoadedRun
from audit._model import Finding
from audit.safedir import SafeDir, UnsafeFile
from schemas import names
from schemas.lenient import as_str
from schemas.records import CanariesRecord

__all__ = [
    "ACCESS_RE",
    "CHAT_PATH",
    "GRADES_CAP_BYTES",
    "JudgeReplies",
    "LOG_CAP_BYTES",
    "ReplyCounts",
    "canary_replies",
    "count_access_log",
    "count_gateway",
    "count_grades",
    "count_replies",
]

# One access-log line: uvicorn's `"METHOD PATH HTTP/1.1" STATUS`, which SGLang and the
# reference judge both print.
ACCESS_RE = re.compile(rb'"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) (/[^ "?]*)(?:\?[^ "]*)? HTTP/[0-9.]+" (\d{3})')
CHAT_PATH = b"/v1/chat/completions"
LOG_CAP_BYTES = 16 << 30  # a judge's log: counted in its first 16 GiB (about 16 s at disk speed)
GRADES_CAP_BYTES = 1 << 30


@dataclass(frozen=True)
class JudgeReplies:
    """One judge's counts. None where a source cannot count (no log, no access lines, no grades)."""

    judge: str
    mode: str | None
    server_answered: int | None = None  # chat completions answered 200 in its own logs
    logs: tuple[str, ...] = ()
    canary_replies: int = 0
    grades_replied: int | None = None  # grades lines with replied = true
    grades_lines: int = 0
    grades_lost: int = 0  # lines rotation dropped (by seq), replies or not
    gateway_replied: int | None = None  # generating requests answered 2xx, canaries excluded
    gateway_lines: int = 0
    gateway_lost: int = 0  # lines rotation dropped (by seq)

    @property
    def server_driver_replies(self) -> int | None:
        """What the judge answered others than the canaries (the driver, any other client)."""
        if self.server_answered is None:
            return None
        return max(0, self.server_answered - self.canary_replies)

    @property
    def independent(self) -> int | None:
        """The best independent count: the gateway's, else the server's own, else the grades files'."""
        if self.gateway_replied is not None:
            return self.gateway_replied
        server = self.server_driver_replies
        return server if server is not None else self.grades_replied

    @property
    def upper_bound(self) -> int | None:
        """At most this many replies reached the driver; None when nothing bounds it."""
        if self.gateway_replied is not None:
            return self.gateway_replied + self.gateway_lost
        server = self.server_driver_replies
        if server is not None:
            return server
        return None if self.grades_replied is None else self.grades_replied + self.grades_lost

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "server_answered": self.server_answered,
            "logs": list(self.logs),
            "canary_replies": self.canary_replies,
            "server_driver_replies": self.server_driver_replies,
            "grades_replied": self.grades_replied,
            "grades_lines": self.grades_lines,
            "grades_lost_to_rotation": self.grades_lost,
            "gateway_replied": self.gateway_replied,
            "gateway_lines": self.gateway_lines,
            "gateway_lost_to_rotation": self.gateway_lost,
            "independent": self.independent,
        }


@dataclass(frozen=True)
class ReplyCounts:
    judges: Mapping[str, JudgeReplies] = field(default_factory=dict)  # the bound judges
    grades_files: tuple[str, ...] = ()
    claimed: int | None = None  # driver-result.json judge_replies
    findings: tuple[Finding, ...] = ()

    @property
    def independent(self) -> int | None:
        """Replies the judges answered the driver, summed; None when no bound judge can be counted."""
        known = [j.independent for j in self.judges.values() if j.independent is not None]
        return sum(known) if known else None

    @property
    def upper_bound(self) -> int | None:
        """None unless every bound judge is bounded."""
        bounds = [j.upper_bound for j in self.judges.values()]
        if not bounds or any(b is None for b in bounds):
            return None
        return sum(b for b in bounds if b is not None)

    @property
    def uncounted(self) -> tuple[str, ...]:
        return tuple(name for name, j in sorted(self.judges.items()) if j.independent is None)

    def to_json(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "independent": self.independent,
            "upper_bound": self.upper_bound,
            "grades_files": list(self.grades_files),
            "judges": {name: j.to_json() for name, j in sorted(self.judges.items())},
        }


def count_access_log(safe: SafeDir, relpath: str, found: list[Finding]) -> int | None:
    """Chat completions answered 200 in one judge log; None when the log has no access line."""
    reader = LineReader(safe, relpath, LOG_CAP_BYTES)
    answered = 0
    any_access = False
    try:
        for block in reader.blocks():
            for m in ACCESS_RE.finditer(block):
                any_access = True
                if m.group(1) == CHAT_PATH and m.group(2) == b"200":
                    answered += 1
    except FileNotFoundError:
        return None
    except UnsafeFile as exc:
        found.append(Finding("error", exc.code, f"{exc}; its replies are not counted", relpath))
        return None
    except OSError as exc:
        found.append(Finding("error", "file.unreadable", f"cannot be read: {exc.strerror}", relpath))
        return None
    if reader.truncated:
        found.append(
            Finding("warning", "judge_replies.truncated", f"counted in its first {LOG_CAP_BYTES} bytes", relpath)
        )
    return answered if any_access else None


def canary_replies(canaries: Mapping[str, Any] | None) -> dict[str, int]:
    """judge -> canary samples the judge answered (a reply excerpt was recorded), before training
    and in the rounds during it."""
    out: dict[str, int] = defaultdict(int)
    doc = CanariesRecord.from_json(canaries) or CanariesRecord()
    for item in (*doc.bindings, *(b for r in doc.rounds for b in r.bindings)):
        if item.judge is None:
            continue
        out[item.judge] += sum(1 for s in item.samples if isinstance(s.get("reply_excerpt"), str))
    return dict(out)


@dataclass
class _Grades:
    replied: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lines: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lost: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _seq_losses(seqs: Iterable[int]) -> int:
    """Lines a writer wrote (seq 1..max) that are not here any more."""
    seen = set(seqs)
    return max(seen) - len(seen) if seen else 0


def count_grades(lines: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[_Grades, tuple[str, ...]]:
    """Replied lines per judge; lines lost to rotation per writer (`seq` 1..max with some not
    here), charged to the judge that writer graded most with (a dropped line's judge is gone
    with it). Returns the counts and the files the lines came from."""
    g = _Grades()
    files: dict[str, None] = {}
    seqs: dict[Any, set[int]] = defaultdict(set)  # writer -> seqs seen
    judges_of: dict[Any, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for rel, doc in lines:
        files[rel] = None
        judge = as_str(doc.get("judge")) or "?"
        g.lines[judge] += 1
        if doc.get("replied") is True:
            g.replied[judge] += 1
        # B's writer token (one per writing process); the rank's file when a line lacks it.
        writer = (doc.get("writer"), doc.get("pid"), (names.grades_segment(rel) or (0, 0))[0])
        judges_of[writer][judge] += 1
        seq = doc.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= 1 << 40:
            seqs[writer].add(seq)
    for writer, seen in seqs.items():
        lost = _seq_losses(seen)
        if lost:
            counts = judges_of[writer]
            g.lost[max(counts, key=lambda j: counts[j])] += lost
    return g, tuple(files)


@dataclass
class _Gateway:
    replied: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lines: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lost: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def count_gateway(lines: Iterable[Mapping[str, Any]]) -> _Gateway:
    """Per judge: generating requests answered 2xx that no canary sent; lines lost to rotation."""
    g = _Gateway()
    seqs: dict[tuple[str, Any], set[int]] = defaultdict(set)
    for doc in lines:
        judge = as_str(doc.get("judge")) or "?"
        g.lines[judge] += 1
        if doc.get("generation") is True and doc.get("canary") is not True and doc.get("outcome") == "replied":
            g.replied[judge] += 1
        seq = doc.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= 1 << 40:
            seqs[(judge, doc.get("writer"))].add(seq)
    for (judge, _), seen in seqs.items():
        g.lost[judge] += _seq_losses(seen)
    return g


def count_replies(
    safe: SafeDir,
    run: LoadedRun,
    bound_judges: Iterable[str],
    judge_modes: Mapping[str, str],
    claimed: int | None,
) -> ReplyCounts:
    found: list[Finding] = []
    canaries = canary_replies(run.doc(names.CANARIES))
    logs_of: dict[str, list[str]] = defaultdict(list)
    for rel, judge in sorted(run.judge_logs.items()):
        logs_of[judge].append(rel)
    grades, read = count_grades((art.relpath, line) for art, line in run.jsonl_lines("grade"))
    gateway = count_gateway(line for _, line in run.jsonl_lines("judge-gateway"))
    judges: dict[str, JudgeReplies] = {}
    for judge in sorted(set(bound_judges)):
        answered: int | None = None
        for rel in logs_of.get(judge, []):
            n = count_access_log(safe, rel, found)
            if n is not None:
                answered = (answered or 0) + n
        seen = judge in grades.lines or bool(read)  # grades files hold every grade the client made
        judges[judge] = JudgeReplies(
            judge,
            judge_modes.get(judge),
            answered,
            tuple(logs_of.get(judge, [])),
            canaries.get(judge, 0),
            grades.replied.get(judge, 0) if seen else None,
            grades.lines.get(judge, 0),
            grades.lost.get(judge, 0),
            gateway.replied.get(judge, 0) if judge in gateway.lines else None,
            gateway.lines.get(judge, 0),
            gateway.lost.get(judge, 0),
        )
    return ReplyCounts(judges, read, claimed, tuple(found))
