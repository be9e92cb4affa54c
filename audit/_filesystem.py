"""What each node's output root lived on (the placement records' `filesystem`, written by the
agent's filesystem guard, agent/coord/fs_guard.py), and what the guard warned about.

Nodes that saw the same mount are reported together; a warning becomes a finding (`filesystem.cache`)
naming the ranks that logged it. Records of agents older than the guard have no `filesystem`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from audit._context import AuditContext
from audit._load import LoadedRun
from audit._model import Finding
from audit._views import rank_of
from schemas import names
from schemas.lenient import as_dict, as_list, as_str

__all__ = ["MAX_GROUPS", "Mount", "check_filesystem", "describe", "mounts"]

MAX_GROUPS = 64  # a heterogeneous cluster lists a few mounts; more are summarised by the first ones


@dataclass(frozen=True)
class Mount:
    """One mount as one or more nodes recorded it."""

    fstype: str
    source: str
    mount_point: str
    options: tuple[str, ...]
    warnings: tuple[str, ...]
    ranks: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.fstype,
            "source": self.source,
            "mount_point": self.mount_point,
            "options": list(self.options),
            "warnings": list(self.warnings),
            "ranks": list(self.ranks),
        }


def describe(m: Mapping[str, Any]) -> str:
    """The text report's line for one entry of `mounts` (its JSON form)."""
    where = " ".join(x for x in (as_str(m.get("type")), as_str(m.get("source"))) if x)
    if as_str(m.get("mount_point")):
        where += f" at {m['mount_point']}"
    ranks = tuple(r for r in as_list(m.get("ranks")) if isinstance(r, int))
    warned = f"; {len(as_list(m.get('warnings')))} warning(s), see Findings" if as_list(m.get("warnings")) else ""
    return f"filesystem: {where} (rank{'s' if len(ranks) > 1 else ''} {_ranks(ranks)}{warned})"


def _ranks(ranks: tuple[int, ...]) -> str:
    """0-3,7: runs of consecutive ranks as ranges."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(x for x in as_list(v) if isinstance(x, str))


def mounts(run: LoadedRun) -> tuple[Mount, ...]:
    groups: dict[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], list[int]] = {}
    for art in run.by_schema("placement"):
        rank = rank_of(art)
        fs = as_dict(as_dict(art.doc).get("filesystem"))
        if rank is None or not fs:
            continue
        key = (
            as_str(fs.get("type")) or "unknown",
            as_str(fs.get("source")) or "",
            as_str(fs.get("mount_point")) or "",
            _strings(fs.get("options")),
            _strings(fs.get("warnings")),
        )
        groups.setdefault(key, []).append(rank)
    out = [Mount(t, src, mp, opts, warns, tuple(sorted(ranks))) for (t, src, mp, opts, warns), ranks in groups.items()]
    return tuple(sorted(out, key=lambda m: m.ranks)[:MAX_GROUPS])


def check_filesystem(ctx: AuditContext) -> list[Finding]:
    """The guard's warnings, once per distinct warning, with the ranks that logged it."""
    ranks_of: dict[str, list[int]] = {}
    for m in mounts(ctx.run):
        for w in m.warnings:
            ranks_of.setdefault(w, []).extend(m.ranks)
    out = []
    for warning, ranks in ranks_of.items():
        ranks.sort()
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks(tuple(ranks))}"
        out.append(Finding("warning", "filesystem.cache", f"{who}: {warning}", names.placement(ranks[0]), ranks[0]))
    return out
