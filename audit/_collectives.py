"""The collective a hang stopped in, from every node's collectives-RANK.json (PyTorch's Flight
Recorder, as agent/stacks/collectives.py keeps it): for each process group, the first sequence id
not every rank completed, the operation and sizes the ranks that entered it agree on, which ranks
entered it, which sit in another operation under that id (gloo pairs collectives by order: a
rank that skipped one is found where the counts first differ, not where it skipped), which never
reached it, which left no trace, and each rank's last completed sequence id.

Written for this project (PyTorch's own analyser fails on gloo's dumps); the same keys come from
NCCL's recorder, whose dumps were not tried here (no GPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Rank", "Stuck", "Summary", "summarise"]


@dataclass(frozen=True)
class Rank:
    """One trainer rank's view of the stuck collective."""

    rank: int  # the process group's global rank
    node: int  # the agent rank whose record holds it
    pid: int
    last_completed: int | None
    state: str  # entered, elsewhere, never_entered, no_trace
    op: str | None = None  # what it sits in, when elsewhere
    sizes: tuple[tuple[int, ...], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "pid": self.pid,
            "last_completed": self.last_completed,
            "state": self.state,
            "op": self.op,
            "input_sizes": [list(s) for s in self.sizes],
        }


@dataclass(frozen=True)
class Stuck:
    """The first collective of one group not every rank completed."""

    group: str
    backend: str | None
    seq: int
    op: str
    sizes: tuple[tuple[int, ...], ...]
    ranks: tuple[Rank, ...]
    missing: tuple[int, ...]  # ranks of the group with no trace at all (a dead process, a node without a record)

    def of(self, state: str) -> tuple[Rank, ...]:
        return tuple(r for r in self.ranks if r.state == state)

    def headline(self) -> str:
        """Who kept the group from completing it, first: the rank(s) that never entered it."""
        what = f"{self.op} #{self.seq} of {self.group} (sizes {_sizes(self.sizes)})"
        blame = []
        never = self.of("never_entered")
        if never:
            blame.append(f"{_who(never)} never entered {what}")
        for r in self.of("elsewhere"):
            blame.append(f"rank {r.rank} sits in {r.op} #{self.seq} (sizes {_sizes(r.sizes)}) instead of {what}")
        if self.missing:
            blame.append(f"{_ranks(self.missing)} left no trace of {what}")
        entered = self.of("entered")
        waiting = f"{_who(entered)} wait in it" if entered else "no rank entered it"
        return ("; ".join(blame) + f"; {waiting}") if blame else f"{what}: {waiting}"

    def detail(self) -> str:
        return "last completed: " + ", ".join(
            f"rank {r.rank} #{r.last_completed if r.last_completed is not None else '-'}"
            for r in sorted(self.ranks, key=lambda r: r.rank)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "backend": self.backend,
            "seq": self.seq,
            "op": self.op,
            "input_sizes": [list(s) for s in self.sizes],
            "entered": [r.rank for r in self.of("entered")],
            "never_entered": [r.rank for r in self.of("never_entered")],
            "elsewhere": [r.to_json() for r in self.of("elsewhere")],
            "no_trace": list(self.missing),
            "ranks": [r.to_json() for r in self.ranks],
            "headline": self.headline(),
        }


@dataclass(frozen=True)
class Summary:
    files: tuple[str, ...]
    stuck: tuple[Stuck, ...]  # one per group with a collective not every rank completed
    processes: int
    errors: tuple[str, ...] = ()  # what a failed group said in the first cause's log (audit/_collective_errors.py)

    @property
    def named(self) -> bool:
        """Whether it names a collective or a group's error (else it only says none is pending)."""
        return bool(self.stuck or self.errors)

    def lines(self) -> list[str]:
        out = []
        for s in self.stuck:
            out += [f"collective: {s.headline()}", f"  {s.detail()}"]
        out += list(self.errors)
        if not out:
            return [f"collectives ({self.processes} process(es) in {len(self.files)} file(s)): none pending"]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "processes": self.processes,
            "stuck": [s.to_json() for s in self.stuck],
            "errors": list(self.errors),
        }


@dataclass(frozen=True)
class _Proc:
    node: int
    pid: int
    rank: int
    backend: str | None
    world: int | None
    entries: dict[tuple[str, int], dict[str, Any]]  # (group, seq) -> entry
    completed: dict[str, int | None]  # group -> last completed
    members: dict[str, tuple[int, ...] | None]  # group -> its ranks, where the recorder said


def summarise(
    docs: Mapping[int, Mapping[str, Any]], files: Sequence[str], errors: Sequence[str] = ()
) -> Summary | None:
    """Every node's record analysed together, with the group's errors from the log; None without either."""
    if not docs and not errors:
        return None
    procs = [p for node, doc in sorted(docs.items()) for p in _procs(node, doc)]
    stuck = []
    for group in sorted({g for p in procs for g in p.completed}):
        found = _stuck(group, [p for p in procs if group in p.completed], procs)
        if found is not None:
            stuck.append(found)
    return Summary(tuple(files), tuple(stuck), len(procs), tuple(errors))


def _procs(node: int, doc: Mapping[str, Any]) -> list[_Proc]:
    out = []
    for p in doc.get("processes") or []:
        if not isinstance(p, dict) or not isinstance(p.get("rank"), int):
            continue  # no process group in it (torch imported, never initialised)
        entries = {(str(e["group"]), int(e["seq"])): e for e in p.get("entries") or []}
        # The recorder's own status may lag its entries (gloo: a retired entry above it): the later wins.
        completed = {
            str(g["group"]): _later(g.get("last_completed"), _last_retired(entries, str(g["group"])))
            for g in p.get("groups") or []
        }
        members = {str(g["group"]): tuple(g["ranks"]) if g.get("ranks") else None for g in p.get("groups") or []}
        out.append(
            _Proc(node, int(p["pid"]), p["rank"], p.get("backend"), p.get("world_size"), entries, completed, members)
        )
    return out


def _stuck(group: str, procs: list[_Proc], everyone: list[_Proc]) -> Stuck | None:
    lasts = [p.completed[group] for p in procs]
    low = min((x for x in lasts if x is not None), default=0)
    seq = low + 1
    pending = [p for p in procs if (group, seq) in p.entries and not p.entries[(group, seq)]["completed"]]
    if not pending:
        return None  # nobody waits under that id: the group is idle, not stuck
    # The operation and sizes most of the ranks that entered it agree on.
    shapes = Counter(_shape(p.entries[(group, seq)]) for p in pending)
    op, sizes = shapes.most_common(1)[0][0]
    ranks = []
    for p in procs:
        e = p.entries.get((group, seq))
        last = p.completed[group]
        if e is None:
            state = "never_entered" if (last or 0) < seq else "entered"
            ranks.append(Rank(p.rank, p.node, p.pid, last, state))
        elif _shape(e) != (op, sizes):
            ranks.append(Rank(p.rank, p.node, p.pid, last, "elsewhere", str(e["op"]), _shape(e)[1]))
        else:
            ranks.append(Rank(p.rank, p.node, p.pid, last, "completed" if e["completed"] else "entered"))
    members = next((p.members[group] for p in procs if p.members.get(group)), None)
    if members is None:
        world = next((p.world for p in procs if p.world), None)
        members = tuple(range(world)) if world else ()
    seen = {p.rank for p in procs}
    missing = tuple(r for r in members if r not in seen)
    backend = next((p.backend for p in everyone if p.backend), None)
    return Stuck(group, backend, seq, op, sizes, tuple(sorted(ranks, key=lambda r: r.rank)), missing)


def _last_retired(entries: Mapping[tuple[str, int], Mapping[str, Any]], group: str) -> int | None:
    return max((seq for (g, seq), e in entries.items() if g == group and e["completed"]), default=None)


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _shape(e: Mapping[str, Any]) -> tuple[str, tuple[tuple[int, ...], ...]]:
    return str(e["op"]), tuple(tuple(s) for s in e.get("input_sizes") or [])


def _sizes(sizes: tuple[tuple[int, ...], ...]) -> str:
    return ", ".join("[" + "x".join(map(str, s)) + "]" for s in sizes) or "none"


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, sorted(ranks)))


def _who(ranks: Sequence[Rank]) -> str:
    return _ranks([r.rank for r in ranks])
