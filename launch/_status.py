"""`gym-launch status RUN [--watch] [--json]`: one row per rank of a run, read from its directory.

Works from any machine that mounts the run directory, while the run goes and after it: only the
run directory is read (through schemas: safe reads, no symlinks followed), never a process.
Heartbeat age is measured on this observer's own monotonic clock (the time since it saw the
counter change), as the agents themselves do: another host's wall clock may be off by minutes.
Until a change was seen (the first look), the age is estimated from the writer's wall time and
marked `~`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launch.backends.answers import SchedulerView
from launch.backends.registry import BACKENDS
from launch.spec.errors import UsageError
from schemas import RunDir, RunDirError, credentials, names
from schemas.records import SubmissionRecord

if TYPE_CHECKING:
    from schemas.watch import RunDirWatch

__all__ = [
    "HeartbeatClock",
    "OUTPUT_ROOT_ENV",
    "REDRAWN_BY",
    "RankRow",
    "Status",
    "TERMINAL",
    "format_status",
    "open_run",
    "planned_replicas",
    "read_status",
    "redraws",
    "resolve_run_dir",
    "scheduler_view",
    "unfit_of",
    "watch_clock",
]

TERMINAL = ("SUCCEEDED", "FAILED")
# The records whose arrival redraws --watch at once. Not heartbeats: a new one only resets an age,
# which the refresh every --interval shows (a redraw per heartbeat of every rank would flood a
# terminal), and not logs.
REDRAWN_BY = ("phases", "address", "failure", "cleanup")
OUTPUT_ROOT_ENV = "GYM_OUTPUT_ROOT"


def resolve_run_dir(run: str, output_root: str | None) -> Path:
    """RUN is a run directory, or a bare UUID under --output-root (default $GYM_OUTPUT_ROOT)."""
    p = Path(run)
    if p.is_dir():
        return p
    if names.UUID_RE.match(run) and "/" not in run:
        root = output_root or os.environ.get(OUTPUT_ROOT_ENV)
        if not root:
            raise UsageError(
                f"{run!r} is not a directory; for a UUID pass --output-root ROOT (or set {OUTPUT_ROOT_ENV})"
            )
        candidate = Path(root) / "cluster" / run
        if candidate.is_dir():
            return candidate
        raise UsageError(f"no run {run!r} under {root}: {candidate} does not exist")
    raise UsageError(f"{run}: no such run directory; pass OUTPUT/cluster/UUID or a UUID with --output-root")


@dataclass
class HeartbeatClock:
    """Ages heartbeats on the observer's monotonic clock: time since the counter last changed."""

    now: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _seen: dict[int, tuple[Any, float]] = field(default_factory=dict)
    _changed: set[int] = field(default_factory=set)

    def age(self, rank: int, doc: dict[str, Any] | None) -> tuple[float | None, bool]:
        """(age in seconds, measured) — measured False: a first look, estimated from wall times."""
        if doc is None:
            return None, False
        key = (doc.get("seq"), doc.get("incarnation"))
        t = self.now()
        last = self._seen.get(rank)
        if last is None or last[0] != key:
            if last is not None:
                self._changed.add(rank)
            self._seen[rank] = (key, t)
            last = self._seen[rank]
        if rank in self._changed:
            return t - last[1], True
        written = doc.get("written_at")
        estimate = self.wall() - float(written) if isinstance(written, int | float) else None
        return (max(0.0, estimate) if estimate is not None else None), False


@dataclass(frozen=True)
class RankRow:
    rank: int
    address: str | None
    state: str
    phase: str | None
    phase_elapsed_s: float | None
    heartbeat_age_s: float | None
    heartbeat_measured: bool
    failure: str | None
    agent_pid: int | None = None  # on the agent's host (its address record)
    driver_pid: int | None = None  # on the driver's node while the driver runs (its heartbeat)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "address": self.address,
            "state": self.state,
            "phase": self.phase,
            "phase_elapsed_s": None if self.phase_elapsed_s is None else round(self.phase_elapsed_s, 3),
            "heartbeat_age_s": None if self.heartbeat_age_s is None else round(self.heartbeat_age_s, 3),
            "heartbeat_age_basis": "observer_monotonic" if self.heartbeat_measured else "writer_wall_clock",
            "failure": self.failure,
            "agent_pid": self.agent_pid,
            "driver_pid": self.driver_pid,
        }


def scheduler_view(run: RunDir, replicas: int | None = None) -> SchedulerView | None:
    """Ask the scheduler the run was submitted to (submission.json names it and the job) what the
    job is doing, at each look (each backend's ``view``: launch/backends/*/query.py); None for a run
    that was not submitted (local)."""
    submission = SubmissionRecord.from_json(run.read_json(names.SUBMISSION))
    if submission is None or submission.job_id is None:
        return None
    name, job = str(submission.backend_as_written), submission.job_id
    view = next((b.view for b in BACKENDS if b.name == name), None)
    if view is None:
        return SchedulerView(name, job, error=f"gym-launch status knows no scheduler {name!r}", asks="nothing")
    return view(job, replicas)


@dataclass(frozen=True)
class Status:
    run_dir: str
    replicas: int | None
    started_at: float | None
    elapsed_s: float | None
    outcome: str  # running | succeeded | failed | not started
    rows: tuple[RankRow, ...]
    scheduler: SchedulerView | None = None
    unfit: dict[str, Any] | None = None  # nodes whose preflight failed, and how to resubmit without them

    @property
    def not_joined(self) -> tuple[int, ...]:
        """Planned ranks without an address record: their agent has not started (or not reached
        the run directory) yet."""
        return tuple(r.rank for r in self.rows if r.address is None and r.state == "NOT STARTED")

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "replicas": self.replicas,
            "started_at": self.started_at,
            "elapsed_s": None if self.elapsed_s is None else round(self.elapsed_s, 3),
            "outcome": self.outcome,
            "ranks": [r.to_json() for r in self.rows],
            "not_joined": list(self.not_joined),
            "scheduler": self.scheduler.to_json() if self.scheduler is not None else None,
            "unfit": self.unfit,
        }


def planned_replicas(run: RunDir) -> int | None:
    """The planned replica count, from the run's own spec.json (None when it cannot be read)."""
    try:
        from launch.spec.config import RunConfig
        from launch.spec.load import load_spec
        from launch.spec.plan import plan

        return plan(RunConfig.from_spec(load_spec(str(run.path / names.SPEC), []))).replicas
    except Exception:  # noqa: BLE001 - a status view shows what it can
        return None


def _ranks(run: RunDir, replicas: int | None) -> list[int]:
    found = set(range(replicas or 0))
    for sub in (names.ADDRESSES_DIR, names.HEARTBEATS_DIR, names.FAILURES_DIR):
        found.update(r for r in (names.rank_in(sub, n) for n in run.listdir(sub)) if r is not None)
    for n in run.listdir():
        parsed = names.parse(n)
        if parsed is not None and parsed.schema == "phases" and parsed.rank is not None:
            found.add(parsed.rank)
    return sorted(found)


def read_status(
    run: RunDir, hb: HeartbeatClock, replicas: int | None, scheduler: SchedulerView | None = None
) -> Status:
    wall = hb.wall()
    rows = []
    starts: list[float] = []
    ends: list[float] = []
    for rank in _ranks(run, replicas):
        phases = run.read_json(names.phases(rank)) or {}
        addr = run.read_json(names.address(rank)) or {}
        fail = run.read_json(names.failure(rank))
        entries = [e for e in phases.get("phases", []) if isinstance(e, dict)]
        state = str(phases.get("state") or ("INIT" if addr else "NOT STARTED"))
        phase = elapsed = None
        if entries:
            last = entries[-1]
            phase = str(last.get("phase"))
            t0, t1 = last.get("started_at"), last.get("ended_at")
            if isinstance(t0, int | float):
                elapsed = (float(t1) if isinstance(t1, int | float) else wall) - float(t0)
            first = entries[0].get("started_at")
            if isinstance(first, int | float):
                starts.append(float(first))
            if state in TERMINAL and isinstance(t1, int | float):
                ends.append(float(t1))
        beat = run.read_json(names.heartbeat(rank))
        age, measured = hb.age(rank, beat)
        failure = None
        if fail:
            failure = f"{fail.get('kind')}: {str(fail.get('cause', ''))[:160]}"
        pids = _pid(addr.get("pid")), _pid((beat or {}).get("driver_pid"))
        rows.append(RankRow(rank, addr.get("address"), state, phase, elapsed, age, measured, failure, *pids))
    states = {r.state for r in rows}
    if not rows or states == {"NOT STARTED"}:
        outcome = "not started"
    elif "FAILED" in states or any(r.failure for r in rows):
        outcome = "failed" if states <= set(TERMINAL) else "failing"
    elif states == {"SUCCEEDED"} and (replicas is None or len(rows) >= replicas):
        outcome = "succeeded"
    else:
        outcome = "running"
    started = min(starts) if starts else None
    finished = outcome in ("failed", "succeeded") and ends
    elapsed_run = ((max(ends) if finished else wall) - started) if started is not None else None
    unfit = unfit_of(run, scheduler.backend if scheduler is not None else None)
    status = Status(str(run.path), replicas, started, elapsed_run, outcome, tuple(rows), scheduler, unfit)
    # The one redaction: the records may come from an older version or a hand (text and --json alike).
    redacted: Status = credentials.redact(status)
    return redacted


def _pid(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def unfit_of(run: RunDir, backend: str | None) -> dict[str, Any] | None:
    """The nodes whose preflight failed (preflight-RANK.json), with the line to resubmit without
    them in the scheduler's words, as the audit words it (audit/preflight.py)."""
    from audit.preflight import exclude_line, unfit_node

    nodes = []
    schedulers = set()
    for name in run.listdir():
        parsed = names.parse(name)
        if parsed is None or parsed.schema != "preflight" or parsed.rank is None:
            continue
        doc = run.read_json(name) or {}
        node = unfit_node(parsed.rank, doc)
        if node is not None:
            nodes.append(node)
            job = (run.read_json(names.address(parsed.rank)) or {}).get("scheduler_job") or {}
            if isinstance(job, dict) and isinstance(job.get("scheduler"), str):
                schedulers.add(job["scheduler"])
    if not nodes:
        return None
    scheduler = backend or (sorted(schedulers)[0] if schedulers else None)
    nodes.sort(key=lambda n: n.rank)
    return {"scheduler": scheduler, "nodes": [n.to_json() for n in nodes], "exclude": exclude_line(scheduler, nodes)}


def _age(row: RankRow) -> str:
    if row.heartbeat_age_s is None:
        return "-"
    return f"{'' if row.heartbeat_measured else '~'}{row.heartbeat_age_s:.1f}s"


def _pids(row: RankRow) -> str:
    """'agent 4711' or 'agent 4711 driver 4790': on the rank's own host."""
    shown = [f"{who} {pid}" for who, pid in (("agent", row.agent_pid), ("driver", row.driver_pid)) if pid is not None]
    return " ".join(shown) or "-"


def format_status(st: Status, colour: bool = False) -> str:
    from schemas.timefmt import iso_ms

    start = iso_ms(st.started_at) if st.started_at is not None else "-"
    took = f"{st.elapsed_s:.1f}s" if st.elapsed_s is not None else "-"
    lines = [
        f"{st.run_dir}",
        f"outcome {st.outcome}; started {start}; elapsed {took}; replicas {st.replicas or '?'}",
    ]
    if st.scheduler is not None:
        lines.append(f"scheduler: {st.scheduler.describe()}")
    if st.unfit is not None:
        failed = "; ".join(
            f"rank {n['rank']} ({n['host']}): {', '.join(n['checks']) or '?'}" for n in st.unfit["nodes"][:8]
        )
        lines.append(f"preflight failed on {failed}; {st.unfit['exclude']}")
    if st.not_joined and st.rows and len(st.not_joined) < len(st.rows):
        lines.append(f"not joined yet: rank(s) {', '.join(map(str, st.not_joined))} (no address record)")
    lines.append("")
    header = ("rank", "address", "state", "phase", "in phase", "heartbeat", "pids", "failure")
    table = [header] + [
        (
            str(r.rank),
            r.address or "-",
            r.state,
            r.phase or "-",
            f"{r.phase_elapsed_s:.1f}s" if r.phase_elapsed_s is not None else "-",
            _age(r),
            _pids(r),
            r.failure or "",
        )
        for r in st.rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for i, row in enumerate(table):
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        line = "  ".join(cells + [row[-1]]).rstrip()
        if colour and i > 0:
            state = row[2]
            code = "31" if state == "FAILED" or row[-1] else "32" if state == "SUCCEEDED" else ""
            line = f"\033[{code}m{line}\033[0m" if code else line
        lines.append(line)
    if any(not r.heartbeat_measured and r.heartbeat_age_s is not None for r in st.rows):
        lines.append("")
        lines.append("~ heartbeat age estimated from the writer's wall clock (first look); --watch measures it")
    return "\n".join(lines)


def redraws(relpath: str) -> bool:
    parsed = names.parse(relpath)
    return parsed is not None and parsed.schema in REDRAWN_BY


def watch_clock(path: Path, interval: float) -> RunDirWatch:
    """--watch's clock: a refresh every `interval` (ages and times in phase move on their own),
    and at once when a phase, address, failure or cleanup record lands (schemas/watch.py; on a
    network filesystem a record written on another node waits for the refresh)."""
    from schemas.watch import RunDirWatch

    return RunDirWatch.start(
        path,
        redraws,
        interval,
        modified=False,  # records are renamed into place; appends are logs
        quiet=interval,
        subdirs=(names.ADDRESSES_DIR, names.FAILURES_DIR),
    )


def open_run(path: Path) -> RunDir:
    try:
        return RunDir.open(path)
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
