"""INIT, the agent's first state: everything a replica does before its state machine's first step.

Its steps, in order (each a function below; the first refusal ends INIT):

    load_spec         the run spec (a file, or the record a rendered job carries), its plan
    identify          rank, replica count, address, GPUs
    (writer)          this incarnation's stamp on every record
    resume_mode       --resume / $GYM_RESUME
    (guard)           the filesystem guard: a filesystem that cannot hold the contract gets no run directory
    join_run          the run directory, the attempt, the doorbell, the rank claim, the agent's log
    open_console      library logs and the agent's line printer
    announce          the guard's log lines; rank 0 writes spec.json

A process that does not join exits 2 and touches nothing: every step up to the rank claim writes
nothing, and what refuses it comes back as a `Refusal` (the message, exit code 2). A replica that
joined comes back as one `Joined`, which `Agent` takes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.coord import fs_guard
from agent.coord.attempts import AttemptRefused, ResumeMode, enter_attempt, resume_mode
from agent.coord.doorbell import Doorbell
from agent.coord.identity import Identity, IdentityError, resolve
from agent.coord.rendezvous import RankClaimed, claim
from agent.ground import clock
from agent.lifecycle._logsetup import configure as route_library_logs
from agent.lifecycle._printer import Printer
from launch.spec import load
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError, UsageError
from launch.spec.plan import Plan
from launch.spec.plan import plan as make_plan
from launch.spec.run_record import run_spec_record
from schemas import RunDir, RunDirError, Writer, names, new_incarnation

__all__ = ["Joined", "Refusal", "Request", "init"]

SPEC_ENV = "GYM_RUN_SPEC"
CONSOLE_LEVELS = {1: logging.INFO, 0: logging.WARNING, -1: logging.ERROR}  # -v, default, -q


@dataclass(frozen=True)
class Request:
    """What gym-agent's command line asks for."""

    uuid: str
    config: str | None = None  # the spec's path; default $GYM_RUN_SPEC, else the inline record
    overrides: Sequence[str] = ()
    output_root: str | None = None  # default: the spec's [output] root
    rank: int | None = None
    replicas: int | None = None
    address: str | None = None
    resume: bool = False
    expect_fingerprint: str | None = None
    verbosity: int = 0  # 1: library info on the console; -1: library errors only


@dataclass(frozen=True)
class Refusal:
    """This process does not join the run: it says why and exits 2, having written nothing."""

    message: str
    rank: int | None  # None before the rank is known
    exit_code: int = 2

    def line(self) -> str:
        tag = f"[rank {self.rank}]" if self.rank is not None else "[agent]"
        return f"gym-agent: {tag} error: {self.message}"


@dataclass(frozen=True)
class Spec:
    resolved: load.ResolvedSpec
    config: RunConfig
    plan: Plan
    origin: str  # where it was read from (messages, spec.json's `source`)


@dataclass(frozen=True)
class Joined:
    """INIT's result: this replica holds its rank in the run; what the Agent starts from."""

    config: RunConfig
    plan: Plan
    ident: Identity
    run: RunDir
    writer: Writer
    started_mono: float  # the single startup deadline counts from here
    out: Printer  # the agent's lines: console and agent-RANK.log
    log_fd: int  # agent-RANK.log
    filesystem: Mapping[str, Any]  # the output root's mount, for the placement record
    doorbell: Doorbell | None  # bound before the address record published its port
    doorbell_note: str = ""  # why the doorbell is off, for the agent's log


@dataclass(frozen=True)
class _Member:
    """What joining the run directory gave."""

    run: RunDir
    log_fd: int
    doorbell: Doorbell | None
    doorbell_note: str


def init(request: Request, started_mono: float, env: Mapping[str, str] = os.environ) -> Joined | Refusal:
    """Run INIT's steps in order; the first refusal ends it."""
    spec = load_spec(request, env)
    if isinstance(spec, Refusal):
        return spec
    ident = identify(request, env)
    if isinstance(ident, Refusal):
        return ident
    writer = Writer(spec.config.fingerprint, ident.rank, new_incarnation(), clock_offset=clock.skew())
    try:
        mode = resume_mode(request.resume, env)
    except UsageError as exc:
        return Refusal(str(exc), ident.rank)
    output_root = request.output_root or spec.config.output_root
    coord = spec.config.coordination
    guard = fs_guard.check(output_root, fs_guard.Heartbeat(coord.heartbeat_interval, coord.heartbeat_timeout))
    if guard.refusal:
        return Refusal(guard.refusal, ident.rank)
    member = join_run(output_root, request.uuid, spec, ident, writer, mode, started_mono, env)
    if isinstance(member, Refusal):
        return member
    out = open_console(ident.rank, member.log_fd, request.verbosity)
    announce(member.run, writer, ident.rank, spec, guard, out)
    return Joined(
        spec.config,
        spec.plan,
        ident,
        member.run,
        writer,
        started_mono,
        out,
        member.log_fd,
        guard.record(),
        member.doorbell,
        member.doorbell_note,
    )


def load_spec(request: Request, env: Mapping[str, str]) -> Spec | Refusal:
    """The run spec: --config, else $GYM_RUN_SPEC, else the record a rendered job carries inline
    (every replica then loads the same bytes); the fingerprint a rendered job expects; the plan."""
    path = request.config or env.get(SPEC_ENV)
    inline = None if path else env.get(load.SPEC_JSON_ENV)
    if not path and not inline:
        return Refusal(
            f"no run spec: pass --config RUN.toml (or spec.json), or set {SPEC_ENV} or {load.SPEC_JSON_ENV}",
            request.rank,
        )
    origin = path or f"${load.SPEC_JSON_ENV}"
    try:
        if path:
            resolved = load.load_spec(path, request.overrides)
        else:
            resolved = load.load_spec_record(inline or "", origin, request.overrides)
        expected = request.expect_fingerprint
        if expected and resolved.fingerprint != expected:
            return Refusal(
                f"{origin}: the spec's fingerprint is {resolved.fingerprint}, not {expected} "
                "(--expect-fingerprint): this replica would run another spec than the job was rendered with",
                request.rank,
            )
        config = RunConfig.from_spec(resolved)
        return Spec(resolved, config, make_plan(config), origin)
    except (SpecError, UsageError) as exc:
        return Refusal(f"{origin}: {exc}", request.rank)


def identify(request: Request, env: Mapping[str, str]) -> Identity | Refusal:
    """Rank, count, address and GPUs, from the flags or the scheduler's environment."""
    try:
        return resolve(request.rank, request.replicas, request.address, env)
    except IdentityError as exc:
        return Refusal(str(exc), request.rank)


def join_run(
    output_root: str,
    uuid: str,
    spec: Spec,
    ident: Identity,
    writer: Writer,
    mode: ResumeMode,
    started_mono: float,
    env: Mapping[str, str],
) -> _Member | Refusal:
    """The run directory, the attempt (resume), the doorbell, the rank claim and the agent's log,
    in this order: the claim comes before anything this replica writes of its own."""
    bell: Doorbell | None = None
    note = ""
    try:
        run = RunDir.create(output_root, uuid, mode=spec.config.dir_mode)
        if mode.joins:
            problem = resumed_spec_problem(run.read_json(names.SPEC), spec)
            if problem:
                return Refusal(f"{spec.origin}: {problem}", ident.rank)
            enter_attempt(run, writer, ident.rank, spec.config, mode, started_mono=started_mono, env=env)
        if spec.config.coordination.doorbell:
            # Bound before the address record publishes its port, and kept: peers may ring at once.
            bell, note = Doorbell.bind(ident.address)
        claim(run, writer, ident, doorbell_port=bell.port if bell else None)
        log_fd = run.open_log(names.agent_log(ident.rank))
    except (RankClaimed, AttemptRefused) as exc:
        return Refusal(str(exc), ident.rank)
    except (RunDirError, OSError) as exc:
        return Refusal(f"run directory: {exc}", ident.rank)
    return _Member(run, log_fd, bell, note)


def resumed_spec_problem(recorded: Mapping[str, Any] | None, spec: Spec) -> str | None:
    """A resume runs the recorded spec: a different fingerprint is refused, naming the keys."""
    if recorded is None:
        return None  # nothing recorded yet: the first attempt
    fingerprint = spec.config.fingerprint
    if recorded.get("fingerprint") == fingerprint:
        return None
    new = load.spec_record(spec.resolved, "")["spec"]
    keys = load.spec_differences(recorded.get("spec") or {}, new) or ["(spelling only)"]
    return (
        f"--resume: the spec differs from the one this run was started with (keys: {', '.join(keys)}); "
        f"fingerprint {fingerprint} != recorded {recorded.get('fingerprint')}. Resume with the run "
        "directory's spec.json (--config RUN_DIR/spec.json) or restore those keys; nothing was written"
    )


def open_console(rank: int, log_fd: int, verbosity: int) -> Printer:
    """Library log records and the agent's own lines: all in agent-RANK.log, tagged on the console."""
    tag = f"[rank {rank}]"
    route_library_logs(tag, log_fd, console_level=CONSOLE_LEVELS[verbosity])
    return Printer(tag, log_fd)


def announce(run: RunDir, writer: Writer, rank: int, spec: Spec, guard: fs_guard.Guard, out: Printer) -> None:
    """The filesystem guard's lines in the log; rank 0 records the spec (once: a resume keeps it)."""
    for line in guard.log_lines():
        out(line)
    if rank == 0 and run.read_json(names.SPEC) is None:
        run.write_artifact(names.SPEC, writer, run_spec_record(spec.config, spec.origin))
