"""The driver's evidence of training that the trainer itself leaves, as `[driver.evidence]`
declares it: read once, summarised for the checks and the reports.

Three kinds of source, any of which may be declared:
- preset "miles": the MILES trainer's per-rank contract records in its save directory,
  ``training_contract_rank{R}.jsonl`` (a line per event; ``event = "optimizer"`` lines carry the
  completed ``step``, 1..N, and ``local_policy_objective``), and ``publication.jsonl`` (a line per
  weight publication to the rollout engines, ``version`` = completed steps);
- metrics: a JSONL of the user's trainer, with named step, loss and refresh fields;
- log patterns: regular expressions over the driver's own log.

Every file is read through SafeDir inside the run directory (no symlink followed) and bounded
(`CAP_BYTES` per file, `MAX_RANK_FILES` contract files), so a hostile or runaway file costs the
audit a bounded time and memory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from audit._lines import LineReader
from audit._model import Finding
from audit.safedir import SafeDir, UnsafeFile
from launch.spec.evidence_lines import (
    MILES_CONTRACT_GLOB,
    MILES_CONTRACT_RE,
    MILES_LOSS_FIELD,
    MILES_OPTIMIZER_EVENT,
    MILES_PUBLICATION,
    MILES_REPLAY_EVENT,
    is_number,
    metrics_step,
    miles_step,
)
from launch.spec.sections import EvidenceConfig

if TYPE_CHECKING:  # loaded by read_evidence, for a run that declares evidence
    from audit._rollout_records import ReplayTally, RolloutTally

__all__ = [
    "ACCEPTED",
    "CAP_BYTES",
    "LOG_CAP_BYTES",
    "MAX_RANK_FILES",
    "MAX_REFRESH_MARKS",
    "MAX_SERIES",
    "MAX_STEPS_KEPT",
    "NOT_DECLARED",
    "SourceReading",
    "TrainingEvidence",
    "read_evidence",
    "read_log",
    "read_metrics",
    "read_miles",
    "read_rollouts",
    "thin",
]

MAX_SERIES = 500  # (step, loss) points a source keeps for the report's chart
MAX_REFRESH_MARKS = 500
MAX_STEPS_KEPT = 1 << 20  # steps whose losses are kept before thinning (memory stays bounded)
CAP_BYTES = 1 << 30  # per evidence file: more than any tiny or long run writes, bounded all the same
LOG_CAP_BYTES = 8 << 30  # a driver's log may be large; the pattern is searched in its first 8 GiB
MAX_RANK_FILES = 4096


@dataclass(frozen=True)
class SourceReading:
    """What one declared source showed."""

    source: str  # "miles" | "metrics" | "log"
    files: tuple[str, ...]  # run-directory paths read
    steps: int  # distinct optimizer steps seen
    refreshes: int | None  # policy refreshes seen; None: this source cannot show any
    losses: int = 0  # loss values checked
    nonfinite: tuple[str, ...] = ()  # where a loss was not a finite number ("FILE:LINE")
    missing: str = ""  # what was looked for and not found, for the finding's message
    gaps: tuple[str, ...] = ()  # e.g. "rank 1 lacks steps [3]"
    # (step, loss) in step order (a step's losses over ranks averaged), and the steps where the
    # policy was refreshed: the HTML report's chart (audit/_report_charts.py), at most MAX_SERIES.
    series: tuple[tuple[float, float], ...] = ()
    refresh_at: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "files": list(self.files),
            "optimizer_steps": self.steps,
            "policy_refreshes": self.refreshes,
            "losses_checked": self.losses,
            "nonfinite_losses": list(self.nonfinite),
        }


@dataclass(frozen=True)
class TrainingEvidence:
    declared: bool
    sources: tuple[SourceReading, ...] = ()
    findings: tuple[Finding, ...] = ()  # files that could not be read safely
    # The trainer's replay and rollout records (audit/_rollout_records.py), None when it wrote none.
    replay: dict[str, Any] | None = None
    rollouts: dict[str, Any] | None = None

    @property
    def steps(self) -> int:
        return max((s.steps for s in self.sources), default=0)

    @property
    def refresh_checkable(self) -> bool:
        return any(s.refreshes is not None for s in self.sources)

    @property
    def refreshes(self) -> int:
        return max((s.refreshes or 0 for s in self.sources), default=0)

    @property
    def nonfinite(self) -> tuple[str, ...]:
        return tuple(w for s in self.sources for w in s.nonfinite)


NOT_DECLARED = TrainingEvidence(declared=False)


@dataclass
class _Reading:
    """A source being read (mutable while reading; frozen into SourceReading at the end)."""

    source: str
    files: list[str] = field(default_factory=list)
    steps: set[Any] = field(default_factory=set)
    refresh_values: set[Any] = field(default_factory=set)
    losses: int = 0
    nonfinite: list[str] = field(default_factory=list)
    by_step: dict[float, list[float]] = field(default_factory=dict)  # finite losses per step
    refresh_steps: set[float] = field(default_factory=set)

    def loss(self, value: Any, where: str, step: Any = None) -> None:
        self.losses += 1
        finite = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not finite and len(self.nonfinite) < 20:
            self.nonfinite.append(where)
        if finite and is_number(step) and (step in self.by_step or len(self.by_step) < MAX_STEPS_KEPT):
            self.by_step.setdefault(float(step), []).append(float(value))

    def frozen(self, refreshable: bool, missing: str = "", gaps: Iterable[str] = ()) -> SourceReading:
        return SourceReading(
            self.source,
            tuple(self.files),
            len(self.steps),
            len(self.refresh_values) if refreshable else None,
            self.losses,
            tuple(self.nonfinite),
            missing,
            tuple(gaps),
            thin([(step, sum(v) / len(v)) for step, v in sorted(self.by_step.items())]),
            tuple(x for x, _ in thin([(x, 0.0) for x in sorted(self.refresh_steps)], MAX_REFRESH_MARKS)),
        )


def _objects(safe: SafeDir, relpath: str, found: list[Finding]) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, object) of every JSON-object line; unreadable files become findings, a
    missing one yields nothing. NaN/Infinity (what Python writes for a diverged loss) parse as
    floats, so the finite check can name them."""
    reader = LineReader(safe, relpath, CAP_BYTES)
    n = 0
    try:
        for line in reader.lines():
            n += 1
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                try:
                    doc = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # a torn last line of a killed writer, or noise: not a record
            if isinstance(doc, dict):
                yield n, doc
    except FileNotFoundError:
        return
    except UnsafeFile as exc:
        found.append(Finding("error", exc.code, f"evidence of training {exc}; not read", relpath))
        return
    except OSError as exc:
        found.append(
            Finding("error", "file.unreadable", f"evidence of training cannot be read: {exc.strerror}", relpath)
        )
        return
    if reader.truncated:
        found.append(Finding("warning", "evidence.truncated", f"read only its first {CAP_BYTES} bytes", relpath))


def thin(points: list[tuple[float, float]], at_most: int = MAX_SERIES) -> tuple[tuple[float, float], ...]:
    """At most ``at_most`` of ``points``, evenly spaced, the first and the last kept."""
    if len(points) <= at_most:
        return tuple(points)
    last = len(points) - 1
    return tuple(points[round(i * last / (at_most - 1))] for i in range(at_most))


def _listing(safe: SafeDir, folder: str, limit: int, what: str, found: list[Finding]) -> tuple[list[str], bool] | None:
    """The folder's files (cut at `limit`?), or None with a finding when it cannot be listed safely."""
    try:
        return safe.list_files(folder, limit)
    except UnsafeFile as exc:
        found.append(Finding("error", exc.code, f"{exc}; {what} not read", folder))
    except OSError as exc:
        found.append(Finding("error", "file.unreadable", f"cannot be listed: {exc.strerror}", folder))
    return None


def read_miles(safe: SafeDir, save_dir: str, found: list[Finding], replay: ReplayTally | None = None) -> SourceReading:
    from audit._rollout_records import ReplayTally

    r = _Reading("miles")
    replay = replay if replay is not None else ReplayTally()
    listing = _listing(safe, save_dir, MAX_RANK_FILES * 4, "evidence of training", found)
    if listing is None:
        return r.frozen(True, f"{save_dir}/ could not be listed")
    names, cut = listing
    ranks = sorted((int(m.group(1)), n) for n in names if (m := MILES_CONTRACT_RE.match(n)))[:MAX_RANK_FILES]
    if cut:
        found.append(Finding("warning", "evidence.truncated", f"more than {MAX_RANK_FILES * 4} files listed", save_dir))
    per_rank: dict[int, set[int]] = {}
    for rank, leaf in ranks:
        rel = f"{save_dir}/{leaf}"
        r.files.append(rel)
        per_rank.setdefault(rank, set()).update(_read_contract(safe, rel, rank, r, found, replay))
    _read_publications(safe, save_dir, r, found)
    gaps = _step_gaps(per_rank, max(r.steps, default=0))
    missing = "" if ranks else f"no {save_dir}/{MILES_CONTRACT_GLOB}"
    if ranks and not r.steps:
        missing = f'no `event: "optimizer"` line with a step >= 1 in {save_dir}/{MILES_CONTRACT_GLOB}'
    return r.frozen(True, missing, gaps)


def _read_contract(
    safe: SafeDir, rel: str, rank: int, r: _Reading, found: list[Finding], replay: ReplayTally
) -> set[int]:
    """One rank's contract records: its optimizer steps (returned, and counted in `r` with their
    losses and the publications they name), and its replay lines (counted in `replay`)."""
    steps: set[int] = set()
    for n, doc in _objects(safe, rel, found):
        if doc.get("event") == MILES_REPLAY_EVENT:
            replay.add(rank, doc, f"{rel}:{n}")
            continue
        if doc.get("event") != MILES_OPTIMIZER_EVENT or doc.get("optimizer_skipped") is True:
            continue
        step = miles_step(doc)
        if step is not None:
            steps.add(step)
            r.steps.add(step)
        if MILES_LOSS_FIELD in doc:
            r.loss(doc[MILES_LOSS_FIELD], f"{rel}:{n}", step)
        published = doc.get("published_step")
        if isinstance(published, int) and not isinstance(published, bool) and published >= 1:
            r.refresh_values.add(published)
            r.refresh_steps.add(published)
    return steps


def _read_publications(safe: SafeDir, save_dir: str, r: _Reading, found: list[Finding]) -> None:
    """The weight publications to the rollout engines (publication.jsonl), counted as refreshes."""
    pub = f"{save_dir}/{MILES_PUBLICATION}"
    for _n, doc in _objects(safe, pub, found):
        version = doc.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
            r.refresh_values.add(version)
        if pub not in r.files:
            r.files.append(pub)


def _step_gaps(per_rank: dict[int, set[int]], top: int) -> list[str]:
    """The ranks that lack some of the steps 1..top (a rank that recorded none is not a gap)."""
    gaps = []
    for rank, steps in sorted(per_rank.items()):
        lacking = sorted(set(range(1, top + 1)) - steps)
        if lacking and steps:
            gaps.append(f"rank {rank} lacks steps {lacking[:10]}")
    return gaps


def read_metrics(safe: SafeDir, cfg: EvidenceConfig, found: list[Finding]) -> SourceReading:
    assert cfg.metrics is not None
    r = _Reading("metrics", [cfg.metrics])
    lines = 0
    for n, doc in _objects(safe, cfg.metrics, found):
        lines += 1
        step = metrics_step(doc, cfg.step_field)
        if step is not None:
            r.steps.add(step)
        if cfg.loss_field is not None and cfg.loss_field in doc:
            r.loss(doc[cfg.loss_field], f"{cfg.metrics}:{n}", step)
        if cfg.refresh_field is not None:
            value = doc.get(cfg.refresh_field)
            if value is True or (isinstance(value, int | float) and not isinstance(value, bool) and value >= 1):
                r.refresh_values.add(value)
                if isinstance(step, int | float) and is_number(step):
                    r.refresh_steps.add(float(step))
    missing = ""
    if not r.steps:
        missing = f"no line of {cfg.metrics} with a number in {cfg.step_field!r}" + ("" if lines else " (no lines)")
    return r.frozen(cfg.refresh_field is not None, missing)


def read_log(safe: SafeDir, log: str | None, cfg: EvidenceConfig, found: list[Finding]) -> SourceReading:
    r = _Reading("log")
    refreshes = 0
    if log is None:
        return r.frozen(cfg.log_refresh_pattern is not None, "no driver log (the driver's rank is unknown)")
    r.files.append(log)
    step_re = re.compile(cfg.log_step_pattern, re.MULTILINE) if cfg.log_step_pattern else None
    refresh_re = re.compile(cfg.log_refresh_pattern, re.MULTILINE) if cfg.log_refresh_pattern else None
    reader = LineReader(safe, log, LOG_CAP_BYTES)
    seen = 0
    try:
        for block in reader.blocks():
            text = block.decode("utf-8", errors="replace")
            if step_re is not None:
                for m in step_re.finditer(text):
                    seen += 1
                    r.steps.add(seen)  # every matching line is one step
                    loss = m.groupdict().get("loss")
                    if loss is not None:
                        try:
                            value: Any = float(loss)
                        except ValueError:
                            value = loss
                        r.loss(value, f"{log}: {m.group(0)[:80]!r}", seen)
            if refresh_re is not None:
                refreshes += sum(1 for _ in refresh_re.finditer(text))
    except FileNotFoundError:
        return r.frozen(refresh_re is not None, f"no {log}")
    except UnsafeFile as exc:
        found.append(Finding("error", exc.code, f"{exc}; evidence of training not read", log))
    except OSError as exc:
        found.append(Finding("error", "file.unreadable", f"cannot be read: {exc.strerror}", log))
    r.refresh_values = set(range(refreshes))
    missing = f"no line of {log} matches log_step_pattern" if step_re is not None and not r.steps else ""
    return r.frozen(refresh_re is not None, missing)


def read_rollouts(safe: SafeDir, rollouts: str, found: list[Finding]) -> RolloutTally:
    """The rollout dumps' samples (every *.jsonl file of the directory, one sample per line); a
    directory the trainer never made lists nothing: no finding."""
    from audit._rollout_records import RolloutTally

    tally = RolloutTally()
    listing = _listing(safe, rollouts, MAX_RANK_FILES, "rollout dumps", found)
    if listing is None:
        return tally
    listed, cut = listing
    if cut:
        found.append(Finding("warning", "evidence.truncated", f"more than {MAX_RANK_FILES} files listed", rollouts))
    for leaf in sorted(n for n in listed if n.endswith(".jsonl")):
        rel = f"{rollouts}/{leaf}"
        tally.files.append(rel)
        for n, doc in _objects(safe, rel, found):
            tally.add(doc, f"{rel}:{n}")
    return tally


def _invalid_finding(code: str, what: str, count: int, where: tuple[str, ...], file: str | None) -> list[Finding]:
    if not count:
        return []
    return [Finding("warning", code, f"{count} {what} not valid: {'; '.join(where)}", file)]


def read_evidence(safe: SafeDir, cfg: EvidenceConfig | None, driver_log: str | None) -> TrainingEvidence:
    """Every declared source, read. A spec that declares none yields NOT_DECLARED."""
    if cfg is None or not cfg.declared:
        return NOT_DECLARED
    from audit._rollout_records import ReplayTally, RolloutTally

    found: list[Finding] = []
    sources = []
    replay = ReplayTally()
    if cfg.preset is not None:
        sources.append(read_miles(safe, cfg.save_dir, found, replay))
    if cfg.metrics is not None:
        sources.append(read_metrics(safe, cfg, found))
    if cfg.log_step_pattern is not None:
        sources.append(read_log(safe, driver_log, cfg, found))
    rollouts = read_rollouts(safe, cfg.rollouts, found) if cfg.rollouts is not None else RolloutTally()
    found += _invalid_finding(
        "evidence.replay_invalid", "replay_routes line(s)", replay.invalid.count, replay.invalid_where, cfg.save_dir
    )
    found += _invalid_finding(
        "evidence.rollout_invalid",
        "verifier diagnostics",
        rollouts.invalid.count,
        rollouts.invalid_where,
        cfg.rollouts,
    )
    return TrainingEvidence(True, tuple(sources), tuple(found), replay.to_json(), rollouts.to_json())


ACCEPTED = (
    "driver-result.json (a driver calling agent.driver_api.write_result), or the trainer's own records "
    'declared in [driver.evidence]: preset = "miles" (training_contract_rank*.jsonl and publication.jsonl in '
    'save_dir, default "checkpoints" = $GYM_CHECKPOINT_DIR), metrics = "PATH.jsonl" with step_field, '
    "loss_field and refresh_field, or log_step_pattern (and log_refresh_pattern) over driver-RANK.log; "
    "a run that trains nothing says [driver] trains = false"
)
