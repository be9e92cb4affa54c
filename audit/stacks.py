"""The stacks every agent kept (stacks-RANK.json), summarised across ranks and processes: processes
of one role whose threads sit in the same innermost frames are one group (the main thread's, and
every other thread that stands in the user's own code), and a process no other of its role shares
frames with is named the odd one out ("rank 2, Ray worker pid 4711: load_weights ← run; ranks 0–1,
2 Ray workers: barrier"). Threads of one process that wait in the user's own code are named with
their lines (two workers deadlocked on two locks while the main thread joins them). The audit
reports a hang's stacks with it; `gym-launch stacks` prints live answers with it.

What py-spy gives (and so what this can say): each thread's frames (function, file, line), its
name, and whether it is idle. Not which lock a thread waits for, nor which locks it holds: a lock
cycle cannot be named from its stacks, only the threads and the lines where each one waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "Group",
    "MIN_FOR_ODD",
    "NOT_COMPARED",
    "NO_LOCKS",
    "OURS",
    "PLURALS",
    "Proc",
    "ROLE_NAMES",
    "SHOWN_FRAMES",
    "SIGNATURE_FRAMES",
    "SHOWN_THREAD_FRAMES",
    "Summary",
    "ThreadStack",
    "WAITING",
    "group",
    "notes_of",
    "persistent",
    "procs_of",
    "ranks_text",
    "shown_frames",
    "summarise",
]

SIGNATURE_FRAMES = 3  # innermost frames of the main thread that make two processes' stacks "the same"
SHOWN_FRAMES = 2  # frames a group is shown by: the innermost own frame and its caller
SHOWN_THREAD_FRAMES = 8  # a thread's frames in --json
MIN_FOR_ODD = 3  # a role needs this many processes with stacks before one can be the odd one out
# Ray's own daemons (monitor, dashboard, log monitor) differ between head and workers by design:
# grouped, never the odd one out.
NOT_COMPARED = frozenset({"ray"})
WAITING = "waiting threads: "
NO_LOCKS = (
    "py-spy shows where each thread waits, not which lock it waits for or holds: a lock cycle among "
    "waiting threads is not named from the stacks (the lines are)"
)
ROLE_NAMES = {"driver": "driver", "ray_worker": "Ray worker", "ray": "Ray process", "judge": "judge"}
PLURALS = {"driver": "drivers", "ray_worker": "Ray workers", "ray": "Ray processes", "judge": "judges"}


Frames = tuple[tuple[str, str, int], ...]  # (function, file, line), innermost first
Signature = tuple[tuple[str, str], ...]


def _signature(frames: Frames) -> Signature:
    return tuple((fn, _leaf(f)) for fn, f, _line in frames[:SIGNATURE_FRAMES])


@dataclass(frozen=True)
class ThreadStack:
    """A thread other than the main one that stands in the user's own code."""

    name: str
    frames: Frames
    idle: bool  # py-spy: not running (waiting on a lock, a sleep, I/O)

    def where(self) -> str:
        """'loader in take_ab (dl.py:6)': its innermost own frame, with the line it waits at."""
        fn, f, line = next((fr for fr in self.frames if _own(fr[1])), self.frames[0])
        return f"{self.name} in {fn} ({_leaf(f)}:{line})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "where": self.where(),
            "idle": self.idle,
            "frames": [{"function": fn, "file": f, "line": line} for fn, f, line in self.frames[:SHOWN_THREAD_FRAMES]],
        }


@dataclass(frozen=True)
class Proc:
    """One process's stacks as the summary sees them."""

    rank: int
    pid: int
    role: str
    cmd: str
    method: str
    problem: str | None
    frames: Frames  # the main thread's
    threads: int
    others: tuple[ThreadStack, ...] = ()  # its other threads in the user's own code (library threads: not)
    main_idle: bool = False

    @property
    def signature(self) -> Signature:
        """Every thread counts: the main thread's frames, then each user thread's (sorted)."""
        threads = sorted({_signature(t.frames) for t in self.others})
        return _signature(self.frames) + tuple(frame for sig in threads for frame in sig)

    @property
    def has_stacks(self) -> bool:
        return bool(self.frames or self.others)

    def waiting(self) -> list[str]:
        """Its threads idle in the user's own code (the main thread among them), each where it
        waits: with two or more, they may wait for each other."""
        out = [t.where() for t in self.others if t.idle and _own(t.frames[0][1])]
        if self.main_idle and self.frames and _own(self.frames[0][1]):
            out.insert(0, ThreadStack("main thread", self.frames, True).where())
        return out


@dataclass(frozen=True)
class Group:
    role: str
    signature: Signature
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
        others = self.members[0].others
        threads = f"; threads: {', '.join(t.where() for t in others)}" if others else ""
        return f"{self.who()}: {self.shown()}{threads}"

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "frames": [{"function": fn, "file": f} for fn, f in _signature(self.members[0].frames)],
            "threads": [t.to_json() for t in self.members[0].others],
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

    def waiting(self) -> list[str]:
        """'waiting threads: rank 0, driver pid 7: loader in take_ab (dl.py:6), saver in …': a
        process with two or more threads idle in the user's own code (py-spy names no lock)."""
        out = []
        for g in self.groups:
            for p in g.members:
                where = p.waiting()
                if len(where) >= 2:
                    who = f"rank {p.rank}, {ROLE_NAMES.get(p.role, p.role)} pid {p.pid}"
                    out.append(f"{WAITING}{who}: {len(where)} threads wait in their own code: {', '.join(where)}")
        return out

    def lines(self) -> list[str]:
        """The text report's lines (no indentation)."""
        count = sum(len(g.members) for g in self.groups) + len(self.without)
        head = f"stacks ({self.reason}) from {ranks_text(self.ranks)}: {count} process(es)"
        if self.missing:
            head += f"; none from {ranks_text(self.missing)}"
        out = [head]
        out += [f"odd one out: {g.line()}" for g in self.odd]
        waiting = self.waiting()
        out += waiting
        out += [g.line() for g in self.groups if not g.odd]
        if self.without:
            shown = "; ".join(
                f"rank {p.rank} {ROLE_NAMES.get(p.role, p.role)} pid {p.pid}: {p.problem}" for p in self.without[:3]
            )
            more = f" (+{len(self.without) - 3} more)" if len(self.without) > 3 else ""
            out.append(f"without stacks: {shown}{more}")
        out += list(self.notes)
        if waiting:
            out.append(NO_LOCKS)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "files": list(self.files),
            "ranks": list(self.ranks),
            "missing_ranks": list(self.missing),
            "groups": [g.to_json() for g in self.groups],
            "odd_ones_out": [g.line() for g in self.odd],
            "waiting_threads": self.waiting(),
            "without_stacks": [
                {"rank": p.rank, "pid": p.pid, "role": p.role, "problem": p.problem} for p in self.without
            ],
            "notes": list(self.notes),
        }


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# The modules of ours a driver's frames pass through (its progress() calls, the judge client):
# wrappers, like Ray's, never the user's frame; the collective-trace hook's idle thread is never a waiting thread.
OURS = ("/agent/driver_api.py", "/agent/proc/driver_local.py", "/agent/proc/collective_hook.py", "/agent/judges/")


def _own(path: str) -> bool:
    """A frame of the user's code, not of Python's standard library, an installed package (Ray's
    tracing wrapper, its task executor) or the driver-side modules of ours."""
    return (
        "/lib/python" not in path
        and "site-packages" not in path
        and not path.startswith("<frozen")
        and not any(m in path for m in OURS)
    )


def shown_frames(frames: Sequence[tuple[str, str, int]]) -> str:
    """The innermost frame of the user's own code and its own caller ("load_weights ← run", Ray's
    or our wrappers between them skipped); the innermost frames when none is the user's (an idle
    Ray worker in Ray's own loop)."""
    own = [fn for fn, f, _line in frames if _own(f)]
    picked = own[:SHOWN_FRAMES] if own else [fn for fn, _f, _line in frames[:SHOWN_FRAMES]]
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


def _frames_of(thread: Mapping[str, Any] | None) -> Frames:
    return tuple(
        (str(f.get("function")), str(f.get("file")), f["line"] if isinstance(f.get("line"), int) else 0)
        for f in ((thread or {}).get("frames") or [])
        if isinstance(f, dict)
    )


def _others(threads: Sequence[Mapping[str, Any]], main: Mapping[str, Any] | None) -> tuple[ThreadStack, ...]:
    out = []
    for t in threads:
        frames = _frames_of(t)
        if t is main or not any(_own(f) for _fn, f, _line in frames):
            continue
        name = t.get("name") if isinstance(t.get("name"), str) else f"thread {t.get('id')}"
        out.append(ThreadStack(str(name), frames, t.get("active") is False))
    return tuple(out)


def procs_of(rank: int, doc: Mapping[str, Any]) -> list[Proc]:
    out = []
    for p in doc.get("processes") or []:
        if not isinstance(p, dict) or not isinstance(p.get("pid"), int):
            continue
        threads = [t for t in p.get("threads") or [] if isinstance(t, dict)]
        main = next((t for t in threads if t.get("main")), threads[0] if threads else None)
        cmd = " ".join(str(a) for a in (p.get("cmdline") or [])[:4])
        problem = p.get("problem") if isinstance(p.get("problem"), str) else None
        out.append(
            Proc(
                rank,
                p["pid"],
                str(p.get("role")),
                cmd[:200],
                str(p.get("method")),
                problem,
                _frames_of(main),
                len(threads),
                _others(threads, main),
                main is not None and main.get("active") is False,
            )
        )
    return out


def group(procs: Sequence[Proc]) -> tuple[tuple[Group, ...], tuple[Proc, ...]]:
    """(groups, processes without stacks). Within a role of at least MIN_FOR_ODD processes with
    stacks, a group of one is the odd one out when another group of that role has several."""
    with_stacks = [p for p in procs if p.has_stacks]
    # Ray's native daemons (raylet, gcs_server) never have Python stacks: not worth a line.
    without = tuple(p for p in procs if not p.has_stacks and not (p.role in NOT_COMPARED and p.method == "none"))
    by: dict[tuple[str, Signature], list[Proc]] = {}
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


def persistent(samples: Sequence[Summary]) -> Summary | None:
    """A live view from several samples: the last one, where a process is the odd one out only
    when it was, in the same frames, in every sample (a worker caught in another function at one
    instant is not; one stuck in it is)."""
    if not samples:
        return None
    last = samples[-1]

    def odd_in(s: Summary) -> set[tuple[int, int, Signature]]:
        return {(p.rank, p.pid, g.signature) for g in s.odd for p in g.members}

    kept = set.intersection(*(odd_in(s) for s in samples))
    groups = [
        replace(g, odd=g.odd and all((p.rank, p.pid, g.signature) in kept for p in g.members)) for g in last.groups
    ]
    groups.sort(key=lambda g: not g.odd)  # stable: the odd ones out first, the rest in their order
    return replace(last, groups=tuple(groups))
