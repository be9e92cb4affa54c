"""`gym-agent --uuid UUID`: run one replica of a run.

Exit codes: 0 the run succeeded; 1 the run failed (a failure record says why); 2 a usage or
configuration problem found before this replica joined the run (the message says what to fix).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from agent.coord.launcher_watch import watch_launcher
from agent.ground import clock
from agent.proc import signals
from agent.proc.fast_exit import exit_now
from launch.spec.console import quiet_broken_pipe, version

if TYPE_CHECKING:
    from agent.lifecycle.init import Request

STARTED = clock.mono()  # the single startup deadline counts from here
EXIT_CODES = """exit codes:
  0    the run succeeded
  1    the run failed (failures/failure-RANK.json says why; `gym-audit RUN` names the first cause)
  2    a usage or configuration problem found before this replica joined the run"""


class _PrintAndExit(argparse.Action):
    """`--version`, `--steps`: prints `say()` and exits before the required arguments are checked.
    `say` runs only when the flag is given: an agent that runs never loads what it needs (the
    version's importlib.metadata is megabytes of an idle agent's memory, issue 51)."""

    def __init__(self, option_strings: Sequence[str], dest: str, say: Callable[[], str], **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)
        self.say = say

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        sys.stdout.write(self.say())
        parser.exit(0)


def _version() -> str:
    return version("gym-agent") + "\n"


def _steps() -> str:
    from agent.lifecycle.steps import text  # data only: no runtime is imported

    return text()


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gym-agent",
        description="Run one replica of a gym-agent run.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action=_PrintAndExit, say=_version, help="show program's version number and exit")
    ap.add_argument(
        "--steps",
        action=_PrintAndExit,
        say=_steps,
        help="print the lifecycle's step table (state, phase, nodes, what runs) and exit",
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
    ap.add_argument(
        "--config",
        help="run spec (TOML, a NeMo Gym config .yaml, or the run directory's spec.json); default $GYM_RUN_SPEC",
    )
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
    signals.block()  # before any thread: SIGTERM/SIGINT wait for the signal thread, sender and all
    # Imported after STARTED is taken: the startup deadline counts the agent's own imports too.
    from agent.lifecycle.agent import Agent
    from agent.lifecycle.init import Refusal, init

    joined = init(_request(args), STARTED)
    if isinstance(joined, Refusal):
        print(joined.line(), file=sys.stderr, flush=True)
        return joined.exit_code
    agent = Agent(joined)
    if args.launcher_fd is not None:
        watch_launcher(args.launcher_fd, agent.signal, agent.log.phase_name)
    result = agent.run_lifecycle()
    if argv is None:  # this process is the agent (the gym-agent entry point or `-m agent.cli`)
        exit_now(result.exit_code)
    return result.exit_code


def _request(args: argparse.Namespace) -> Request:
    """INIT's request, from the parsed command line: the parser's dests are its fields' names."""
    from agent.lifecycle.init import Request  # imported late, as in _main

    return Request(**{field.name: getattr(args, field.name) for field in fields(Request)})


if __name__ == "__main__":
    sys.exit(main())
