"""The stacks every agent kept (stacks-RANK.json), summarised across ranks and processes: processes
of one role whose main thread sits in the same innermost frames are one group, and a process no
other of its role shares frames with is named the odd one out ("rank 2, Ray worker pid 4711:
load_weights ← run; ranks 0–1, 2 Ray workers: barrier"). The audit reports a hang's stacks with
it; `gym-launch stacks` prints live answers with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Group",
    "MIN_FOR_ODD",
    "NOT_COMPARED",
    "PLURALS",
    "Proc",
    "ROLE_NAMES",
    "SHOWN_FRAMES",
    "SIGNATURE_FRAMES",
    "Summary",
    "group",
    "notes_of",
    "procs_of",
    "ranks_text",
    "shown_frames",
    "summarise",
]

SIGNATURE_FRAMES = 3  # innermost frames of the main thread that make two processes' stacks "the same"
SHOWN_FRAMES = 2  # frames a group is shown by: the innermost own frame and its caller
MIN_FOR_ODD = 3  # a role needs this many processes with stacks before one can be the odd one out
# Ray's own daemons (monitor, dashboard, log monitor) differ between head and workers by design:
# grouped, never the odd one out.
NOT_COMPARED = frozenset({"ray"})
ROLE_NAMES = {"driver": "driver", "ray_worker": "Ray worker", "ray": "Ray process", "judge": "judge"}
PLURALS = {"driver": "drivers", "ray_worker": "Ray workers", "ray": "Ray processes", "judge": "judges"}


@dataclass(frozen=True)
class Proc:
    """One process's stacks as the summary sees them."""

    rank: int
    pid: int
    role: str
    cmd: str
    method: str
    problem: str | None
    frames: tuple[tuple[str, str, int], ...]  # the main thread's (function, file, line), innermost first
    threads: int

    @property
    def signature(self) -> tuple[tuple[str, str], ...]:
        return tuple((fn, _leaf(f)) for fn, f, _line in self.frames[:SIGNATURE_FRAMES])


@dataclass(frozen=True)
class Group:
    role: str
    signature: tuple[tuple[str, str], ...]
    members: tuple[Proc, ...]
    odd: bool = False

    def shown(self) -> str:
        return shown_frames(self.members[0].frames)

    def who(self) -> str:
        ranks = ranks_text(p.rank for p in self.members)
        if len(self.members) == 1:
            return f"{ranks}, {ROLE_NAMES.get(self.role, self.role)} pid {self.members[0].pid}"
        return f"{ranks}, {len(self.members)} {PLURALS.get(self.role, self.role + ' processes')}"

    def line(self) -> str:
        return f"{self.who()}: {self.shown()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "frames": [{"function": fn, "file": f} for fn, f in self.signature],
            "shown": self.shown(),
            "odd_one_out": self.odd,
            "processes": [{"rank": p.rank, "pid": p.pid, "method": p.method} for p in self.members],
        }


@dataclass(frozen=True)
class Summary:
    files: tuple[str, ...]
    ranks: tuple[int, ...]  # ranks that kept stacks
    missing: tuple[int, ...]  # expected ranks that did not
    groups: tuple[Group, ...]  # odd ones out first, then by role and size
    without: tuple[Proc, ...]  # processes without stacks (not Python, refused, timed out)
    notes: tuple[str, ...]  # py-spy missing, ptrace refused (with the capability to grant), fallbacks used
    reason: str

    @property
    def odd(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.odd)

    def lines(self) -> list[str]:
        """The text report's lines (no indentation)."""
        count = sum(len(g.members) for g in self.groups) + len(self.without)
        head = f"stacks ({self.reason}) from {ranks_text(self.ranks)}: {count} process(es)"
        if self.missing:
            head += f"; none from {ranks_text(self.missing)}"
        out = [head]
        out += [f"odd one out: {g.line()}" for g in self.odd]
        out += [g.line() for g in self.groups if not g.odd]
        if self.without:
            shown = "; ".join(
                f"rank {p.rank} {ROLE_NAMES.get(p.role, p.role)} pid {p.pid}: {p.problem}" for p in self.without[:3]
            )
            more = f" (+{len(self.without) - 3} more)" if len(self.without) > 3 else ""
            out.append(f"without stacks: {shown}{more}")
        out += list(self.notes)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "files": list(self.files),
            "ranks": list(self.ranks),
            "missing_ranks": list(self.missing),
            "groups": [g.to_json() for g in self.groups],
            "odd_ones_out": [g.line() for g in self.odd],
            "without_stacks": [
                {"rank": p.rank, "pid": p.pid, "role": p.role, "problem": p.problem} for p in self.without
            ],
            "notes": list(self.notes),
        }


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _own(path: str) -> bool:
    """A frame of the user's code, not of Python's standard library or an installed package."""
    return "/lib/python" not in path and "site-packages" not in path and not path.startswith("<frozen")


def shown_frames(frames: Sequence[tuple[str, str, int]]) -> str:
    """The innermost frame of the user's own code and its caller ("load_weights ← run"); the
    innermost frames when none is the user's (an idle Ray worker in Ray's own loop)."""
    start = next((i for i, (_fn, f, _line) in enumerate(frames) if _own(f)), 0)
    picked = [fn for fn, _f, _line in frames[start : start + SHOWN_FRAMES]]
    return " ← ".join(picked) if picked else "(no frames)"


def ranks_text(ranks: Iterable[int]) -> str:
    """'rank 2', 'ranks 0–1', 'ranks 0–2, 5'."""
    rs = sorted(set(ranks))
    if not rs:
        return "no rank"
    runs: list[str] = []
    start = prev = rs[0]
    for r in [*rs[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(runs)


def procs_of(rank: int, doc: Mapping[str, Any]) -> list[Proc]:
    out = []
    for p in doc.get("processes") or []:
        if not isinstance(p, dict) or not isinstance(p.get("pid"), int):
            continue
        threads = [t for t in p.get("threads") or [] if isinstance(t, dict)]
        main = next((t for t in threads if t.get("main")), threads[0] if threads else None)
        frames = tuple(
            (str(f.get("function")), str(f.get("file")), f["line"] if isinstance(f.get("line"), int) else 0)
            for f in ((main or {}).get("frames") or [])
            if isinstance(f, dict)
        )
        cmd = " ".join(str(a) for a in (p.get("cmdline") or [])[:4])
        problem = p.get("problem") if isinstance(p.get("problem"), str) else None
        out.append(
            Proc(rank, p["pid"], str(p.get("role")), cmd[:200], str(p.get("method")), problem, frames, len(threads))
        )
    return out


def group(procs: Sequence[Proc]) -> tuple[tuple[Group, ...], tuple[Proc, ...]]:
    """(groups, processes without stacks). Within a role of at least MIN_FOR_ODD processes with
    stacks, a group of one is the odd one out when another group of that role has several."""
    with_stacks = [p for p in procs if p.frames]
    # Ray's native daemons (raylet, gcs_server) never have Python stacks: not worth a line.
    without = tuple(p for p in procs if not p.frames and not (p.role in NOT_COMPARED and p.method == "none"))
    by: dict[tuple[str, tuple[tuple[str, str], ...]], list[Proc]] = {}
    for p in with_stacks:
        by.setdefault((p.role, p.signature), []).append(p)
    groups = []
    for (role, sig), members in by.items():
        of_role = [g for (r, _s), g in by.items() if r == role]
        total = sum(len(g) for g in of_role)
        odd = (
            role not in NOT_COMPARED
            and len(members) == 1
            and total >= MIN_FOR_ODD
            and max(len(g) for g in of_role) >= 2
        )
        groups.append(Group(role, sig, tuple(sorted(members, key=lambda p: (p.rank, p.pid))), odd))
    groups.sort(
        key=lambda g: (
            not g.odd,
            g.role in NOT_COMPARED,
            g.role != "driver",
            g.role,
            -len(g.members),
            g.members[0].rank,
        )
    )
    return tuple(groups), without


def notes_of(docs: Mapping[int, Mapping[str, Any]]) -> tuple[str, ...]:
    """What limited the stacks: py-spy missing, ptrace refused (and the capability to grant), the
    driver API's fallback used, records cut."""
    out: list[str] = []
    missing = sorted(r for r, d in docs.items() if (d.get("py_spy") or {}).get("problem"))
    if missing:
        problem = (docs[missing[0]].get("py_spy") or {}).get("problem")
        out.append(f"{ranks_text(missing)}: {problem}")
    refused = sorted(r for r, d in docs.items() if (d.get("ptrace") or {}).get("permitted") is False)
    if refused:
        grant = (docs[refused[0]].get("ptrace") or {}).get("grant")
        out.append(f"{ranks_text(refused)}: py-spy could not attach (ptrace not permitted): {grant}")
    fallbacks = {r: d.get("fallback_dumps") for r, d in docs.items() if isinstance(d.get("fallback_dumps"), int)}
    used = sorted(r for r, n in fallbacks.items() if n)
    if used:
        n = sum(int(fallbacks[r] or 0) for r in used)
        out.append(
            f"{ranks_text(used)}: {n} process(es) dumped their own stacks (the driver API's faulthandler fallback)"
        )
    cut = sorted(r for r, d in docs.items() if d.get("truncated") or d.get("processes_not_shown"))
    if cut:
        out.append(f"{ranks_text(cut)}: stacks cut to the record's size cap")
    return tuple(out)


def summarise(docs: Mapping[int, Mapping[str, Any]], files: Sequence[str], expected: Iterable[int]) -> Summary | None:
    """The summary of every rank's stacks record, or None when no rank kept any."""
    if not docs:
        return None
    procs = [p for rank, doc in sorted(docs.items()) for p in procs_of(rank, doc)]
    groups, without = group(procs)
    reasons = sorted({str(d.get("reason")) for d in docs.values()})
    missing = tuple(sorted(set(expected) - set(docs)))
    return Summary(tuple(files), tuple(sorted(docs)), missing, groups, without, notes_of(docs), "/".join(reasons))
