"""`gym-audit ls OUTPUT`: the run history of an output root, one line per run.

Each run is audited (read-only, through the same safe loader); a directory that cannot be
audited is listed as unusable rather than stopping the listing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit._model import AuditResult
from audit._sanitize import terminal_safe
from audit.api import audit_run
from audit.safedir import UnusableRunDir

__all__ = ["MAX_RUNS", "RunRow", "list_runs", "render_json", "render_table", "row_from", "row_of"]

MAX_RUNS = 10_000


@dataclass(frozen=True)
class RunRow:
    uuid: str
    started_at: float | None
    elapsed_s: float | None
    outcome: str
    first_cause: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "started_at": self.started_at,
            "elapsed_s": None if self.elapsed_s is None else round(self.elapsed_s, 3),
            "outcome": self.outcome,
            "first_cause": self.first_cause,
        }


def row_of(path: Path) -> RunRow:
    try:
        result = audit_run(path, ask_scheduler=False)  # a listing of many runs asks nobody
    except (UnusableRunDir, OSError) as exc:
        return RunRow(path.name, None, None, "unusable", str(exc)[:200])
    return row_from(path.name, result)


def row_from(uuid: str, result: AuditResult) -> RunRow:
    starts = [r.phases[0].started_at for r in result.ranks if r.phases]
    ends = [p.ended_at for r in result.ranks for p in r.phases if p.ended_at is not None]
    started = min(starts) if starts else None
    elapsed = (max(ends) - started) if (started is not None and ends) else None
    if elapsed is not None and not math.isfinite(elapsed):  # corrupt times at both ends (-1e308, 1e308)
        elapsed = None
    fc = result.first_cause
    cause = f"rank {fc.rank} {fc.kind} in {fc.phase or '?'}: {fc.cause}" if fc else None
    return RunRow(uuid, started, elapsed, result.outcome, cause)


def list_runs(output_root: Path) -> list[RunRow]:
    cluster = output_root / "cluster"
    if not output_root.is_dir():
        raise UnusableRunDir(f"{output_root} is not a directory; pass the output root (the parent of cluster/)")
    if not cluster.is_dir():
        return []
    dirs = [p for p in cluster.iterdir() if p.is_dir() and not p.is_symlink()][:MAX_RUNS]
    rows = [row_of(p) for p in dirs]
    return sorted(rows, key=lambda r: (r.started_at is None, r.started_at or 0.0, r.uuid))


def render_table(rows: list[RunRow]) -> str:
    from schemas.timefmt import iso_ms, seconds

    table = [("uuid", "start", "elapsed", "outcome", "first cause")]
    for r in rows:
        table.append(
            (
                r.uuid,
                iso_ms(r.started_at) if r.started_at is not None else "-",
                f"{seconds(r.elapsed_s)}s" if r.elapsed_s is not None else "-",
                r.outcome,
                (r.first_cause or "")[:160],
            )
        )
    widths = [max(len(t[i]) for t in table) for i in range(4)]
    lines = ["  ".join([c.ljust(w) for c, w in zip(t[:4], widths, strict=True)] + [t[4]]).rstrip() for t in table]
    return "\n".join(terminal_safe(line) for line in lines) + "\n"


def render_json(rows: list[RunRow]) -> str:
    return "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in rows)
