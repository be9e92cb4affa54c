"""What the nodes' preflights found (preflight-RANK.json) and what the teardowns left on the GPUs
(cleanup-RANK.json's `gpu_residue`), and the node list to resubmit without, in the scheduler's
words: Slurm's `--exclude=HOST,...` (its node names), hostnames for Beaker and SkyPilot.

Pure over parsed documents, so `gym-launch status` words the exclude line exactly as the audit does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from audit._context import AuditContext
from audit._model import Finding
from audit._views import by_rank
from schemas import names
from schemas.lenient import as_dict, as_int, as_list

if TYPE_CHECKING:  # the record's type loads for a run whose nodes ran a preflight (issue 51 item 9)
    from audit._load import LoadedRun
    from schemas.records import PreflightRecord

__all__ = [
    "MAX_NAMED",
    "UnfitNode",
    "check_gpu_residue",
    "check_preflight",
    "exclude_line",
    "unfit_node",
    "unfit_nodes",
]

MAX_NAMED = 64  # hosts named on one exclude line before "..." (the JSON has them all)


@dataclass(frozen=True)
class UnfitNode:
    """A node whose preflight failed: who, where, and which checks."""

    rank: int
    node_index: int | None
    host: str  # the scheduler's name for it (Slurm), else its hostname
    checks: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "node_index": self.node_index, "host": self.host, "checks": list(self.checks)}


def unfit_node(rank: int, doc: Mapping[str, Any]) -> UnfitNode | None:
    """The node of one preflight document, when a check whose mode is "fail" failed there."""
    from schemas.records import PreflightRecord

    rec = PreflightRecord.from_json(doc, rank=rank, relpath=names.preflight(rank))
    return _unfit(rec) if rec is not None else None


def _unfit(rec: PreflightRecord) -> UnfitNode | None:
    if rec.passed is not False:
        return None
    failed = tuple(str(c.get("check")) for c in rec.checks if c.get("status") == "failed")
    host = rec.scheduler_node or rec.hostname or rec.address or "?"
    return UnfitNode(rec.rank, rec.node_index, host, failed)


def exclude_line(scheduler: str | None, nodes: Iterable[UnfitNode]) -> str:
    """How to resubmit without the unfit nodes, in the scheduler's words."""
    hosts = sorted({n.host for n in nodes})
    shown = ",".join(hosts[:MAX_NAMED]) + (f",... ({len(hosts)} in all)" if len(hosts) > MAX_NAMED else "")
    if scheduler in ("beaker", "skypilot"):
        return f"resubmit avoiding host(s) {shown} ({scheduler}: hostnames)"
    return f"resubmit with sbatch --exclude={shown}"


def _preflights(run: LoadedRun) -> dict[int, PreflightRecord]:
    """Every node's preflight record, by rank; none for a run without preflights."""
    if not run.by_schema("preflight"):
        return {}
    from schemas.records import PreflightRecord

    return by_rank(run, "preflight", PreflightRecord)


def unfit_nodes(ctx: AuditContext) -> list[UnfitNode]:
    out = [node for rec in _preflights(ctx.run).values() if (node := _unfit(rec))]
    return sorted(out, key=lambda n: n.rank)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (f" (+{len(ranks) - 16} more)" if len(ranks) > 16 else "")


def check_preflight(ctx: AuditContext) -> list[Finding]:
    """`preflight.failed` for each unfit node [error]; `preflight.warned` per check that warned
    [warning], with the ranks it warned on and the first of them's words."""
    out: list[Finding] = []
    warned: dict[str, list[tuple[int, str]]] = {}
    for rank, rec in sorted(_preflights(ctx.run).items()):
        for c in rec.checks:
            problems = [str(p) for p in as_list(c.get("problems"))]
            if c.get("status") == "failed":
                where = f"node {rec.node_index} ({rec.hostname}, {rec.address})"
                out.append(
                    Finding(
                        "error",
                        "preflight.failed",
                        f"{where}: {c.get('check')}: {'; '.join(problems)[:1500]}",
                        rec.relpath,
                        rank,
                    )
                )
            elif c.get("status") == "warned" and problems:
                warned.setdefault(str(c.get("check")), []).append((rank, problems[0]))
    for check, seen in sorted(warned.items()):
        ranks = [r for r, _ in seen]
        out.append(
            Finding(
                "warning",
                "preflight.warned",
                f"{check} warned on rank(s) {_ranks(ranks)}: {seen[0][1][:1000]}",
                names.preflight(ranks[0]),
                ranks[0],
            )
        )
    return out


def check_gpu_residue(ctx: AuditContext) -> list[Finding]:
    """`gpu.residue` [error]: a planned GPU still held memory after the teardown's wait; the next
    job on that node inherits it."""
    out: list[Finding] = []
    hosts = {r: a.hostname for r, a in ctx.addresses.items()}
    for rank, rec in ctx.cleanups.items():
        for g in rec.gpu_residue:
            pids = [as_dict(p) for p in as_list(g.get("pids"))]
            who = (
                ", ".join(
                    f"{p.get('pid')}" + (f" `{str(p.get('cmdline'))[:160]}`" if p.get("cmdline") else "")
                    for p in pids[:6]
                )
                or "no process visible"
            )
            node = ctx.node_of_rank.get(rank)
            used, before = as_int(g.get("used_bytes")), as_int(g.get("preflight_used_bytes"))
            out.append(
                Finding(
                    "error",
                    "gpu.residue",
                    f"node {node} ({hosts.get(rank) or '?'}): GPU {g.get('index')} ({g.get('uuid')}) still used "
                    f"{_mib(used)} (preflight saw {_mib(before)}) {g.get('waited_s')} s after teardown, pids: {who}; "
                    "the next job on this node inherits them: stop them, or exclude the node",
                    rec.relpath,
                    rank,
                    "$.gpu_residue",
                )
            )
    return out


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 20):.0f} MiB"
