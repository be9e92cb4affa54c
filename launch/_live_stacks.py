"""`gym-launch stacks RUN [--rank R] [--json]`: the stacks of every process of a running run, from
every agent, grouped across ranks - what `py-spy dump` is for one process, for the whole run.

Through the run directory: a request file in stack-requests/, then each agent's answer
stacks-RANK-ID.json, read by name and removed once read (with the request), so the run directory
is left as it was. The doorbell wakes the agents (an authenticated `stacks` datagram to each
agent's doorbell port, schemas/doorbell_wire.py); without it (the secret unreadable here, UDP
blocked between this host and the nodes) an agent finds the request by listing within
LIST_EVERY_S. Nothing of the run changes: py-spy reads the processes without pausing them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.stacks import Summary, persistent, summarise
from launch.spec.errors import UsageError
from schemas import RunDir, RunDirError, Writer, WriterKind, names
from schemas.doorbell_wire import send_copies, stacks_request

__all__ = [
    "AGENT_LIST_EVERY_S",
    "Answers",
    "COPIES_AT",
    "MARGIN_S",
    "POLL_S",
    "SAMPLES",
    "SAMPLE_GAP_S",
    "SHOWN_FRAMES",
    "Target",
    "ask",
    "format_text",
    "live_targets",
    "run_stacks",
    "to_json",
    "wait_for",
]

COPIES_AT = (0.0, 0.05, 0.25)  # a lost datagram is sent again, briefly
AGENT_LIST_EVERY_S = 10.0  # agent/stacks/live.py's slow path (an agent not reached by the doorbell)
MARGIN_S = 5.0
POLL_S = 0.2
# A live run moves: one sample catches a healthy worker in another function than its peers. A
# difference is called odd only when it is in every one of SAMPLES samples SAMPLE_GAP_S apart: a
# worker that spends a fifth of its time elsewhere is caught there three times running about one
# time in 125, a stuck one every time; each sample costs one non-pausing py-spy dump per process.
SAMPLES = 3
SAMPLE_GAP_S = 1.0
SHOWN_FRAMES = 12


@dataclass
class Answers:
    request: str
    asked: list[int]
    docs: dict[int, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    doorbell: str = ""  # how the agents were woken (or why they were not)
    samples: int = 1  # answers taken (gym-launch stacks takes SAMPLES)

    @property
    def missing(self) -> list[int]:
        return [r for r in self.asked if r not in self.docs]


@dataclass(frozen=True)
class Target:
    rank: int
    address: str
    port: int | None
    incarnation: str


def live_targets(run: RunDir) -> tuple[list[Target], list[int]]:
    """(agents that may answer, ranks that already finished): an agent with its cleanup record has
    stopped, one with an address record and no cleanup record may still run."""
    targets, finished = [], []
    for leaf in run.listdir(names.ADDRESSES_DIR):
        rank = names.rank_in(names.ADDRESSES_DIR, leaf)
        if rank is None:
            continue
        doc = run.read_json(names.address(rank))
        if doc is None:
            continue
        if run.read_json(names.cleanup(rank)) is not None:
            finished.append(rank)
            continue
        port = doc.get("doorbell_port")
        targets.append(
            Target(rank, str(doc.get("address")), port if isinstance(port, int) else None, str(doc.get("incarnation")))
        )
    return sorted(targets, key=lambda t: t.rank), sorted(finished)


def _ring(run: RunDir, targets: list[Target], request: str) -> str:
    """Wake each agent with an authenticated datagram; says how it went (for the output)."""
    try:
        raw, _mode = run.read_private(names.DOORBELL_SECRET, 256)
        secret = bytes.fromhex(raw.decode("ascii").strip())
    except (OSError, RunDirError, ValueError, UnicodeError) as exc:
        return f"doorbell: the run's secret cannot be read here ({exc}); agents find the request by listing"
    datagrams = [
        (
            t.address,
            t.port,
            stacks_request(
                secret,
                run=run.path.name,
                attempt=run.attempt,
                to=t.rank,
                to_incarnation=t.incarnation,
                request=request,
                seq=seq,
                sent_at=time.time(),
            ),
        )
        for seq, t in enumerate(targets, 1)
        if t.port is not None
    ]
    rung, sent = send_copies(datagrams, COPIES_AT)
    if not sent:
        return "doorbell: no datagram could be sent; the agents find the request by listing"
    return f"doorbell: rang {rung} agent(s)"


def ask(run: RunDir, ranks: list[int] | None, wait: float, *, now: Callable[[], float] = time.monotonic) -> Answers:
    """Write the request, wake the agents, wait up to `wait` seconds for their answers, then
    remove the request and every answer read."""
    spec = run.read_json(names.SPEC) or {}
    fingerprint = spec.get("fingerprint")
    if not isinstance(fingerprint, str):
        raise UsageError(f"{run.path} has no readable spec.json: not a run directory")
    targets, _finished = live_targets(run)
    if ranks is not None:
        targets = [t for t in targets if t.rank in ranks]
    request = os.urandom(8).hex()
    answers = Answers(request, [t.rank for t in targets])
    if not targets:
        return answers
    t0 = now()
    run.ensure_dir(names.STACK_REQUESTS_DIR)
    writer = Writer(fingerprint, None, "launcher", kind=WriterKind.LAUNCHER)
    rel = names.stacks_request(request)
    run.write_artifact(rel, writer, {"request": request, "ranks": answers.asked, "asked_at": time.time()})
    try:
        answers.doorbell = _ring(run, targets, request)
        deadline = t0 + wait
        while answers.missing and now() < deadline:
            for rank in answers.missing:
                doc = run.read_json(names.live_stacks(rank, request), attempts=1)
                if doc is not None and doc.get("request") == request:
                    answers.docs[rank] = doc
            if answers.missing:
                time.sleep(POLL_S)
    finally:
        answers.seconds = now() - t0
        for name in [rel, *(names.live_stacks(r, request) for r in answers.asked)]:
            run.unlink(name)
        run.remove_empty_dir(names.STACK_REQUESTS_DIR)  # another request may still be in it: then it stays
    return answers


def wait_for(run: RunDir) -> float:
    """How long to wait: the agents' stack_dump_timeout, their listing period, a margin."""
    try:
        from launch.spec.config import RunConfig
        from launch.spec.load import load_spec

        config = RunConfig.from_spec(load_spec(str(run.path / names.SPEC), []))
        dump = config.coordination.stack_dump_timeout
    except Exception:  # noqa: BLE001 - the default bound when the spec cannot be resolved here
        dump = 30.0
    return dump + AGENT_LIST_EVERY_S + MARGIN_S


def format_text(run: RunDir, answers: Answers, summary: Summary | None) -> str:
    missing = f"; no answer from {', '.join(map(str, answers.missing))}" if answers.missing else ""
    lines = [
        f"stacks of run {run.path.name}: {len(answers.docs)} of {len(answers.asked)} rank(s) answered "
        f"in {answers.seconds:.1f}s{missing} ({answers.doorbell}); odd one out: only a difference seen in "
        f"each of {answers.samples} samples {SAMPLE_GAP_S:g} s apart"
    ]
    if summary is None:
        return "\n".join(lines) + "\n"
    for g in summary.groups:
        lines.append(("odd one out: " if g.odd else "") + g.line())
        for fn, f, line in g.members[0].frames[:SHOWN_FRAMES]:
            lines.append(f"    {fn} ({f}:{line})")
    for p in summary.without:
        lines.append(f"rank {p.rank} {p.role} pid {p.pid}: no stacks ({p.problem})")
    lines += summary.notes
    return "\n".join(lines) + "\n"


def to_json(run: RunDir, answers: Answers, summary: Summary | None) -> str:
    return json.dumps(
        {
            "run_dir": str(run.path),
            "request": answers.request,
            "asked": answers.asked,
            "answered": sorted(answers.docs),
            "missing": answers.missing,
            "seconds": round(answers.seconds, 3),
            "doorbell": answers.doorbell,
            "samples": answers.samples,
            "summary": summary.to_json() if summary is not None else None,
            "stacks": {str(r): {k: v for k, v in d.items() if k != "fingerprint"} for r, d in answers.docs.items()},
        },
        indent=2,
    )


def sample(run: RunDir, ranks: list[int] | None, wait: float) -> tuple[Answers, Summary | None]:
    """SAMPLES answers SAMPLE_GAP_S apart, the later ones asked only of the ranks that answered
    the first (one that did not costs its wait once); the last one's stacks, odd ones out only
    where every sample had them (audit.stacks.persistent)."""
    first = answers = ask(run, ranks, wait)
    summaries: list[Summary] = []
    seconds = 0.0
    for i in range(SAMPLES):
        if i:
            time.sleep(SAMPLE_GAP_S)
            answers = ask(run, sorted(first.docs), wait)
        seconds += answers.seconds
        summary = summarise(answers.docs, [], first.asked)
        if summary is None:
            break
        summaries.append(summary)
    said = Answers(answers.request, first.asked, answers.docs, seconds, first.doorbell, len(summaries))
    return said, persistent(summaries)


def run_stacks(path: Path, rank: int | None, as_json: bool, out: Callable[[str], None]) -> int:
    try:
        run = RunDir.open(path)
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
    with run:
        targets, finished = live_targets(run)
        if rank is not None and rank not in {t.rank for t in targets} | set(finished):
            known = sorted({t.rank for t in targets} | set(finished))
            raise UsageError(f"--rank {rank}: the run has no agent of that rank (ranks: {known or 'none yet'})")
        if not targets or (rank is not None and rank in finished):
            what = f"rank {rank}" if rank is not None else "every agent"
            out(
                f"gym-launch: {what} of {run.path.name} has finished (its cleanup record is written): no agent to "
                f"ask; the stacks a hang kept are in its audit: gym-audit {run.path}"
            )
            return 1
        answers, summary = sample(run, [rank] if rank is not None else None, wait_for(run))
        out(to_json(run, answers, summary) if as_json else format_text(run, answers, summary).rstrip("\n"))
        if not answers.docs:
            out(
                f"gym-launch: no agent answered within {answers.seconds:.0f}s (the run may have ended meanwhile, or "
                "its agents cannot read the request)"
            )
            return 1
        return 0
