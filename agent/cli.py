"""`gym-agent --uuid UUID`: run one replica of a run.

Exit codes: 0 the run succeeded; 1 the run failed (a failure record says why); 2 a usage or
configuration problem found before this replica joined the run (the message says what to fix).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from agent.ground import clock
from agent.proc.fast_exit import exit_now
from launch.spec.console import quiet_broken_pipe, version

STARTED = clock.mono()  # the single startup deadline counts from here
EXIT_CODES = """exit codes:
  0    the run succeeded
  1    the run failed (failures/failure-RANK.json says why; `gym-audit RUN` names the first cause)
  2    a usage or configuration problem found before this replica joined the run"""


class _PrintSteps(argparse.Action):
    """`--steps`, like `--version`: prints and exits before the required arguments are checked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        from agent.lifecycle.steps import text  # data only: no runtime is imported

        sys.stdout.write(text())
        parser.exit(0)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gym-agent",
        description="Run one replica of a gym-agent run.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=version("gym-agent"))
    ap.add_argument(
        "--steps", action=_PrintSteps, help="print the lifecycle's step table (state, phase, nodes, what runs) and exit"
    )
    loud = ap.add_mutually_exclusive_group()
    loud.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=1,
        default=0,
        help="library info on the console",
    )
    loud.add_argument(
        "-q", "--quiet", dest="verbosity", action="store_const", const=-1, help="library errors only on the console"
    )
    ap.add_argument("--uuid", required=True, help="the run's unique id: its directory is OUTPUT/cluster/UUID")
    ap.add_argument("--config", help="run spec (TOML, or the run directory's spec.json); default $GYM_RUN_SPEC")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=TOML_VALUE")
    ap.add_argument("--output-root", help="default: [output] root of the spec")
    ap.add_argument("--rank", type=int, help="this replica's rank (default: GYM_/BEAKER_/SLURM_ environment)")
    ap.add_argument("--replicas", type=int, help="how many replicas (default: from the environment)")
    ap.add_argument("--address", help="this node's address (default: BEAKER_NODE_HOSTNAME or the hostname)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="start (or join) a new attempt of a run whose previous attempt ended; default $GYM_RESUME=1 "
        "($GYM_RESUME=restart: a scheduler restart of this launch continues it by itself)",
    )
    # Set by `gym-launch local`: a pipe whose EOF means the launcher died (agent/coord/launcher_watch.py).
    ap.add_argument("--launcher-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument(
        "--expect-fingerprint",
        metavar="SHA256",
        help="refuse to start unless the loaded spec has this fingerprint (a rendered job carries it)",
    )
    return ap


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    from schemas.errors import GymError

    try:
        return _main(argv)
    except GymError as exc:  # a user error no step above put in its own words (with its origin or rank)
        print(f"gym-agent: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    from agent.proc import signals

    signals.block()  # before any thread: SIGTERM/SIGINT wait for the signal thread, sender and all
    rank_tag = f"[rank {args.rank}]" if args.rank is not None else "[agent]"

    def err(msg: str) -> int:
        print(f"gym-agent: {rank_tag} error: {msg}", file=sys.stderr, flush=True)
        return 2

    from agent.coord.identity import IdentityError, resolve
    from launch.spec.errors import SpecError, UsageError
    from launch.spec.load import SPEC_JSON_ENV, load_spec, load_spec_record, spec_record
    from schemas import RunDir, RunDirError, Writer, names, new_incarnation
    from schemas.timefmt import iso_ms

    config_path = args.config or os.environ.get("GYM_RUN_SPEC")
    # A rendered Beaker task carries the spec record inline: every replica loads the same bytes.
    inline = None if config_path else os.environ.get(SPEC_JSON_ENV)
    if not config_path and not inline:
        return err(f"no run spec: pass --config RUN.toml (or spec.json), or set GYM_RUN_SPEC or {SPEC_JSON_ENV}")
    origin = config_path or f"${SPEC_JSON_ENV}"
    try:
        from launch.spec.config import RunConfig
        from launch.spec.plan import plan as make_plan

        if config_path:
            resolved = load_spec(config_path, args.overrides)
        else:
            resolved = load_spec_record(inline or "", origin, args.overrides)
        if args.expect_fingerprint and resolved.fingerprint != args.expect_fingerprint:
            return err(
                f"{origin}: the spec's fingerprint is {resolved.fingerprint}, not {args.expect_fingerprint} "
                "(--expect-fingerprint): this replica would run another spec than the job was rendered with"
            )
        config = RunConfig.from_spec(resolved)
        plan = make_plan(config)
    except (SpecError, UsageError) as exc:
        return err(f"{origin}: {exc}")
    try:
        ident = resolve(args.rank, args.replicas, args.address)
    except IdentityError as exc:
        return err(str(exc))
    rank_tag = f"[rank {ident.rank}]"
    incarnation = new_incarnation()
    writer = Writer(config.fingerprint, ident.rank, incarnation, clock_offset=clock.skew())
    from agent.coord.attempts import AttemptRefused, enter_attempt, resume_mode
    from agent.coord.rendezvous import RankClaimed, claim

    try:
        mode = resume_mode(args.resume, os.environ)
    except UsageError as exc:
        return err(str(exc))
    from agent.coord import fs_guard

    output_root = args.output_root or config.output_root
    coord = config.coordination
    # Before anything is written: a filesystem that cannot hold the contract gets no run directory.
    guard = fs_guard.check(output_root, fs_guard.Heartbeat(coord.heartbeat_interval, coord.heartbeat_timeout))
    if guard.refusal:
        return err(guard.refusal)
    from agent.coord.doorbell import Doorbell

    bell: Doorbell | None = None
    bell_note = ""  # why the doorbell is off, for the agent's log
    try:
        run = RunDir.create(output_root, args.uuid, mode=config.dir_mode)
        if mode.joins:
            problem = _resume_spec_problem(run.read_json(names.SPEC), resolved, config.fingerprint)
            if problem:
                return err(f"{origin}: {problem}")
            enter_attempt(run, writer, ident.rank, config, mode, started_mono=STARTED)
        if config.coordination.doorbell:
            # Bound before the address record publishes its port, and kept: peers may ring at once.
            bell, bell_note = Doorbell.bind(ident.address)
        # Claim the rank before writing anything: a process that does not join touches nothing.
        claim(run, writer, ident, doorbell_port=bell.port if bell else None)
        log_fd = run.open_log(names.agent_log(ident.rank))
    except (RankClaimed, AttemptRefused) as exc:
        return err(str(exc))
    except (RunDirError, OSError) as exc:
        return err(f"run directory: {exc}")

    import logging

    from agent.lifecycle.logsetup import configure as route_library_logs

    console_level = {1: logging.INFO, 0: logging.WARNING, -1: logging.ERROR}[args.verbosity]
    route_library_logs(rank_tag, log_fd, console_level=console_level)

    console = {"open": True}

    def out(line: str) -> None:
        text = f"{rank_tag} {line}"
        try:
            os.write(log_fd, f"{iso_ms(clock.wall())} {text}\n".encode())
        except OSError:
            pass
        if not console["open"]:
            return
        try:
            print(text, flush=True)
        except OSError:
            # A closed console (broken pipe, a gone terminal) must not end the run mid-teardown:
            # the agent's log file has every line. Point stdout at /dev/null for the final flush.
            console["open"] = False
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    for line in guard.log_lines():
        out(line)
    if ident.rank == 0 and run.read_json(names.SPEC) is None:
        run.write_artifact(names.SPEC, writer, spec_record(resolved, origin))

    from agent.lifecycle.agent import Agent

    try:
        agent = Agent(
            config,
            plan,
            ident,
            run,
            incarnation=incarnation,
            started_mono=STARTED,
            out=out,
            filesystem=guard.record(),
            doorbell=(bell, bell_note),
        )
    except RunDirError as exc:
        return err(str(exc))
    if args.launcher_fd is not None:
        from agent.coord.launcher_watch import watch_launcher

        watch_launcher(args.launcher_fd, agent.signal, agent.log.phase_name)
    result = agent.run_lifecycle()
    if argv is None:  # this process is the agent (the gym-agent entry point or `-m agent.cli`)
        exit_now(result.exit_code)
    return result.exit_code


def _resume_spec_problem(recorded: dict[str, Any] | None, resolved: object, fingerprint: str) -> str | None:
    """A resume runs the recorded spec: a different fingerprint is refused, naming the keys."""
    if recorded is None:
        return None  # nothing recorded yet: the first attempt
    if recorded.get("fingerprint") == fingerprint:
        return None
    from launch.spec.load import spec_differences, spec_record

    new = spec_record(resolved, "")["spec"]  # type: ignore[arg-type]
    keys = spec_differences(recorded.get("spec") or {}, new) or ["(spelling only)"]
    return (
        f"--resume: the spec differs from the one this run was started with (keys: {', '.join(keys)}); "
        f"fingerprint {fingerprint} != recorded {recorded.get('fingerprint')}. Resume with the run "
        "directory's spec.json (--config RUN_DIR/spec.json) or restore those keys; nothing was written"
    )


if __name__ == "__main__":
    sys.exit(main())
