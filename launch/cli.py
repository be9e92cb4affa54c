"""``gym-launch``: subcommands over the run spec.

Each subcommand is a ``Command`` (name, help, how to add its arguments, how to
run it) listed in ``COMMANDS``; add one by writing its two functions and
appending it there. ``main`` turns every user error (``GymError``: a bad spec or command line, a
refused submission, an unusable run directory) into one-line (or one-line-per-problem) messages
on stderr and the error's exit code (2), never a traceback. ``local``, ``submit`` and ``regrade``
run their backend here, in this process: the launcher's own process starts the agents or calls
the scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

from launch.backends.base import Backend, RenderRequest
from launch.backends.registry import backend, scheduler_names
from launch.spec.config import RunConfig
from launch.spec.console import quiet_broken_pipe
from launch.spec.errors import GymError, SpecError, UsageError
from launch.spec.load import ResolvedSpec, load_spec
from launch.spec.plan import Plan, plan
from launch.spec.validate import validated
from schemas import names
from schemas.errors import EXIT_USAGE

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Asked = TypeVar("_Asked", bound="DataclassInstance")  # a command's arguments, typed (GradeArgs, RegradeArgs)

EXIT_OK = 0


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN.toml plus repeatable ``--set``: shared by every command that reads a spec."""
    parser.add_argument(
        "spec", metavar="RUN.toml", help="run spec (TOML, a NeMo Gym config .yaml, or a run directory's spec.json)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override a key with a TOML value, e.g. --set judges.general.timeout=300 (repeatable)",
    )


def load_valid(args: argparse.Namespace, *, grades_here: bool = False) -> tuple[ResolvedSpec, RunConfig, Plan]:
    """Load, validate and plan the spec named by ``args``; raises SpecError with every problem.
    ``grades_here``: this machine grades with the spec's rubrics (validate, local, grade), so an
    open-instruct profile's template must be readable here; a render or submit does not need it."""
    from launch._rubric_files import open_instruct_problems, template_problems

    resolved = load_spec(args.spec, args.overrides)
    config, problems = validated(resolved)
    if problems or config is None:
        raise SpecError(problems)
    for warning in config.warnings:  # accepted as written, but worth knowing (stdout stays the command's)
        print(f"warning: {warning}", file=sys.stderr)
    # Rubric template files: read, pinned to their template_sha256, only known fields.
    problems = template_problems(config) + (open_instruct_problems(config) if grades_here else [])
    if problems:
        raise SpecError(problems)
    return resolved, config, plan(config)


# --- validate ---------------------------------------------------------------


def _configure_validate(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)


def _run_validate(args: argparse.Namespace) -> int:
    resolved, _, _ = load_valid(args, grades_here=True)
    print(resolved.fingerprint)
    return EXIT_OK


# --- plan -------------------------------------------------------------------


def _configure_plan(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def describe_format(config: RunConfig) -> str:
    if config.source_format == "miles":
        sections = ", ".join(config.trainer_sections) or "none"
        return f"read as a MILES run file (carried to the driver untouched: {sections})"
    if config.source_format == "nemo-gym":
        return "read as a NeMo Gym submission config (docs/guides/nemo-gym.md)"
    return "read as a gym-agent run spec"


def format_plan(p: Plan, name: str, fingerprint: str, source: str = "", ray_enabled: bool = True) -> str:
    """A table with one row per replica (planned node) and a totals line. With `[ray] enabled =
    false` no node starts Ray, so the ray column says `off` rather than GPUs Ray would have had."""
    header: tuple[str, ...] = ("node", "pool", "trainer", "rollout", "policy", "judges", "ray", "unused")
    rows: list[tuple[str, ...]] = []
    for n in p.nodes:
        judges = ", ".join(f"{k}:{v}" for k, v in n.judges.items()) or "-"
        rollout = str(n.rollout_gpus)
        if n.colocated_rollout_gpus:
            rollout += f" (+{n.colocated_rollout_gpus} colocated)"
        marker = "*" if n.index == p.driver_node else ""
        rows.append(
            (
                f"{n.index}{marker}",
                n.pool or "-",
                str(n.trainer_gpus),
                rollout,
                str(n.policy_gpus),
                judges,
                str(n.ray_gpus) if ray_enabled else "off",
                str(n.unused_gpus),
            )
        )
    rows.append(
        (
            "total",
            "",
            str(sum(n.trainer_gpus for n in p.nodes)),
            str(sum(n.rollout_gpus for n in p.nodes)),
            str(sum(n.policy_gpus for n in p.nodes)),
            str(sum(n.judge_gpus for n in p.nodes)),
            str(sum(n.ray_gpus for n in p.nodes)) if ray_enabled else "off",
            str(p.unused_gpus),
        )
    )
    # No [pools] or no policy service: drop the column rather than print a column of dashes or zeros.
    dropped = {i for i, h in enumerate(header) if (h == "pool" and not any(n.pool for n in p.nodes))}
    dropped |= {header.index("policy")} if not p.policy_nodes else set()
    header = tuple(h for i, h in enumerate(header) if i not in dropped)
    rows = [tuple(c for i, c in enumerate(r) if i not in dropped) for r in rows]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    cpu = sum(1 for n in p.nodes if not n.gpus)
    shape = (
        f"{p.replicas} replica(s) ({p.replicas - cpu} x {p.gpus_per_replica} GPUs, {cpu} CPU-only)"
        if cpu and p.gpus_per_replica
        else f"{p.replicas} replica(s) x {p.gpus_per_replica} GPUs"
    )
    lines = [
        f"{name}  fingerprint {fingerprint}",
        *([source] if source else []),
        f"{shape} = {p.allocated_gpus} allocated, "
        f"{p.used_gpus} used, {p.unused_gpus} unused; driver on node {p.driver_node} "
        f"(placement {p.driver_placement}, marked *)",
        "",
    ]
    for r in (header, *rows):
        # Names left-aligned, counts right-aligned.
        cells = (
            c.ljust(w) if h in ("node", "pool", "judges") else c.rjust(w)
            for h, c, w in zip(header, r, widths, strict=True)
        )
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _run_plan(args: argparse.Namespace) -> int:
    resolved, config, p = load_valid(args)
    if args.json:
        doc = {**p.to_json(), "fingerprint": resolved.fingerprint, "format": config.source_format}
        doc["warnings"] = [{"key": w.key, "message": w.message} for w in config.warnings]
        print(json.dumps(doc, indent=2))
    else:
        print(format_plan(p, config.name, resolved.fingerprint, describe_format(config), bool(config.ray.enabled)))
    return EXIT_OK


# --- schema -----------------------------------------------------------------


def _configure_schema(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="print docs/spec.md instead of the JSON Schema")


def _run_schema(args: argparse.Namespace) -> int:
    from launch.spec.reference import run_spec_schema, spec_markdown

    print(spec_markdown() if args.markdown else json.dumps(run_spec_schema(), indent=2))
    return EXIT_OK


# --- judge-command -----------------------------------------------------------


def _configure_judge_command(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("judge", metavar="NAME", help="a managed judge: [judges.NAME]")
    parser.add_argument("--host", default="HOST", help="address to show in the argv (default: a placeholder)")
    parser.add_argument("--port", type=int, default=30000, help="port to show for SGLang, vLLM (the agent picks one)")


def _run_judge_command(args: argparse.Namespace) -> int:
    from launch.spec.sglang_argv import judge_command
    from launch.spec.vllm_argv import ENGINE_PYTHON_ENV

    resolved, config, p = load_valid(args)
    judge = config.judges.get(args.judge)
    if judge is None:
        raise UsageError(f"no judge named {args.judge!r}; judges: {', '.join(config.judges) or 'none'}")
    if not judge.managed:
        raise UsageError(f"judges.{args.judge} is external: the agent runs no command for it")
    # As the agent runs it: an engine's interpreter may be named apart from this one.
    engine_python = os.environ.get(ENGINE_PYTHON_ENV) if judge.backend in ("sglang", "vllm") else None
    cmd = judge_command(judge, host=args.host, port=args.port, port_file="PORT_FILE", python=engine_python or None)
    node = p.judge_node(args.judge)
    env = dict(cmd.env)
    if node is not None:
        # What the agent adds: only the judge's own devices are visible to it.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in p.nodes[node].judge_devices[args.judge])
    print(json.dumps({"judge": args.judge, "node": node, "argv": list(cmd.argv), "env": env}, indent=2))
    return EXIT_OK


# --- check-data --------------------------------------------------------------


def _configure_check_data(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _run_check_data(args: argparse.Namespace) -> int:
    from launch.spec.data_check import check_data, spec_bindings

    _, config, _ = load_valid(args)
    if not (config.data.train or config.data.eval):
        raise UsageError("the spec has no [data] train or eval paths to check")
    bindings = spec_bindings(config)
    report = check_data(*config.data_paths(), bindings)  # a DataError is a GymError: main reports it
    print(json.dumps(report.to_json(), indent=2) if args.json else report.text())
    return EXIT_OK if report.ok else EXIT_USAGE


# --- grade ------------------------------------------------------------------

GRADE_EPILOG = """where the judge is:
  an external judge: its [judges.NAME] endpoint (or --endpoint URL)
  a managed judge runs only inside a run: --run OUTPUT/cluster/UUID of a running run (its
  judge-NAME-RANK.json record names the endpoint), or --endpoint URL of one you started

grade exit codes:
  0    graded: the grade, the extracted answer and every diagnostic are printed
  1    no grade: the judge's reply is not a valid grade (truncated, empty, unparseable, out_of_scale),
       or the judge is unreachable (unavailable), refused the request or the request does not fit
       its context (overflow); the message says which (--json: error.kind)
  2    bad command line or invalid run spec (an unknown --binding names the spec's bindings)"""


def _configure_grade(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--binding", required=True, metavar="NAME", help='a verifier of [judging.bindings."NAME"]')
    parser.add_argument("--question", required=True, metavar="Q", help="the question (what metadata.judge_query holds)")
    parser.add_argument(
        "--answer",
        required=True,
        metavar="A",
        help="the policy's response as written (the rubric's extraction applies)",
    )
    parser.add_argument("--reference", metavar="R", help="the reference answer (required by a rubric that uses one)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--run",
        metavar="OUTPUT/cluster/UUID",
        help="a running run whose managed judge grades (a UUID with --output-root also works)",
    )
    where.add_argument("--endpoint", metavar="URL", help="grade at this judge base URL instead of the spec's")
    parser.add_argument("--output-root", help="where a bare --run UUID lives (default $GYM_OUTPUT_ROOT)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object: score, extracted_answer, verifier_diagnostics (and error)"
    )
    parser.epilog = GRADE_EPILOG


def _typed(cls: type[_Asked], args: argparse.Namespace) -> _Asked:
    """A command's arguments as its typed dataclass: each field is the option of the same name."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def _run_grade(args: argparse.Namespace) -> int:
    from launch._grade_job import GradeArgs, grade

    _, config, _ = load_valid(args, grades_here=True)
    asked = _typed(GradeArgs, args)
    return grade(config, asked, lambda line: print(line, flush=True), lambda line: print(line, file=sys.stderr))


# --- local ------------------------------------------------------------------


def _add_run_arguments(parser: argparse.ArgumentParser, output_root_help: str) -> None:
    """Which run: its id, its output root, and whether this is a new attempt of it."""
    parser.add_argument("--uuid", help="the run's id (default: time + random); its directory is ROOT/cluster/UUID")
    parser.add_argument("--output-root", help=output_root_help)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="a new attempt of the run --uuid names (its previous attempt ended); same spec required",
    )


def _configure_local(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    _add_run_arguments(parser, "default: [output] root of the spec")


def _run_local(args: argparse.Namespace) -> int:
    from launch.backends.local import run_local

    _, config, p = load_valid(args, grades_here=True)  # every problem reported before any process starts
    return run_local(
        config,
        p,
        args.spec,
        uuid=args.uuid,
        output_root=args.output_root,
        out=lambda line: print(line, flush=True),
        resume=args.resume,
    )


# --- stacks -----------------------------------------------------------------

STACKS_EPILOG = """stacks exit codes:
  0    stacks from at least one agent (a rank that did not answer is named)
  1    no agent of the run answered in time (a finished run: said so, nobody is asked)
  2    bad command line or no such run directory"""


def _configure_stacks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run directory OUTPUT/cluster/UUID, or a UUID with --output-root")
    parser.add_argument("--output-root", help="where a bare UUID's run lives (default $GYM_OUTPUT_ROOT)")
    parser.add_argument("--rank", type=int, metavar="R", help="ask only this rank's agent")
    parser.add_argument("--json", action="store_true", help="every answer and the grouped summary as JSON")
    parser.epilog = STACKS_EPILOG


def _run_stacks(args: argparse.Namespace) -> int:
    from launch._live_stacks import run_stacks
    from launch._status import resolve_run_dir

    if args.rank is not None and args.rank < 0:
        raise UsageError("--rank must be a rank (0 or more)")
    return run_stacks(resolve_run_dir(args.run, args.output_root), args.rank, args.json, lambda s: print(s, flush=True))


# --- status -----------------------------------------------------------------


def _configure_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run directory OUTPUT/cluster/UUID, or a UUID with --output-root")
    parser.add_argument("--output-root", help="where a bare UUID's run lives (default $GYM_OUTPUT_ROOT)")
    parser.add_argument("--watch", action="store_true", help="refresh until the run ends (Ctrl-C to stop watching)")
    parser.add_argument("--interval", type=float, default=2.0, metavar="S", help="--watch refresh period (default 2)")
    parser.add_argument("--json", action="store_true", help="JSON (one document per refresh with --watch)")
    parser.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not ask the scheduler about a submitted run's job (its state, reason and nodes)",
    )


def _run_status(args: argparse.Namespace) -> int:
    from launch._status import (
        HeartbeatClock,
        format_status,
        open_run,
        planned_replicas,
        read_status,
        resolve_run_dir,
        scheduler_view,
        watch_clock,
    )
    from launch.spec.console import use_colour

    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    run = open_run(resolve_run_dir(args.run, args.output_root))
    hb = HeartbeatClock()

    replicas = planned_replicas(run)
    colour = use_colour(sys.stdout) and not args.json
    clock = watch_clock(run.path, args.interval) if args.watch else None
    try:
        while True:
            st = read_status(run, hb, replicas, scheduler_view(run, replicas) if not args.no_scheduler else None)
            if args.json:
                print(json.dumps(st.to_json(), sort_keys=True), flush=True)
            else:
                if args.watch and colour:
                    sys.stdout.write("\033[H\033[J")  # redraw in place on a terminal
                print(format_status(st, colour), flush=True)
                if args.watch and not colour:
                    print(flush=True)
            if clock is None or st.outcome in ("succeeded", "failed"):
                break
            if st.scheduler is not None and st.scheduler.ended and st.outcome == "not started":
                break  # the job ended before any agent wrote a record: nothing more will come
            clock.wait()
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if clock is not None:
            clock.close()
        run.close()
    return 1 if st.outcome in ("failed", "failing") else EXIT_OK


# --- render / submit ----------------------------------------------------------


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--backend", choices=scheduler_names(), help="default: [launch] backend of the spec")
    _add_run_arguments(parser, "default: [output] root of the spec; must be a shared filesystem")


def backend_of(args: argparse.Namespace, config: RunConfig) -> Backend:
    chosen = backend(args.backend or config.backend)
    if not chosen.schedules:
        raise UsageError(
            f"this command renders for a scheduler: pass --backend {'|'.join(scheduler_names())} "
            f"(or set [launch] backend); for this machine use gym-launch {chosen.name}"
        )
    return chosen


def render_request(args: argparse.Namespace, *, submitting: bool = False) -> tuple[RenderRequest, Backend]:
    """The render request of ``args`` (validated spec, plan, uuid, absolute output root) and its backend.
    ``submitting``: every replica loads the run directory's spec.json (overrides applied), not the file."""
    resolved, config, p = load_valid(args)
    chosen = backend_of(args, config)
    uuid = args.uuid or names.new_uuid()
    if not names.UUID_RE.match(uuid):
        raise UsageError(f"--uuid {uuid!r}: use letters, digits, '_' and '-' (at most 128)")
    root = args.output_root or config.output_root
    output_root = os.path.abspath(root)
    spec_path = str(Path(output_root) / "cluster" / uuid / names.SPEC) if submitting else os.path.abspath(args.spec)
    request = RenderRequest(
        config=config,
        plan=p,
        uuid=uuid,
        output_root=output_root,
        spec_path=spec_path,
        overrides=() if submitting else tuple(args.overrides),
        resume=bool(getattr(args, "resume", False)),
        output_root_given=root,
        workdir=os.getcwd(),
    )
    return request, chosen


def _configure_render(parser: argparse.ArgumentParser) -> None:
    add_backend_arguments(parser)
    parser.add_argument("-o", "--output", metavar="FILE", help="write the rendered job to FILE instead of stdout")


def _run_render(args: argparse.Namespace) -> int:
    request, chosen = render_request(args)
    rendered = chosen.render(request)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(rendered.text)
        except OSError as exc:
            raise UsageError(f"-o {args.output}: cannot write: {exc.strerror or exc}") from None
        if args.verbosity >= 0:
            print(f"wrote {args.output} ({rendered.backend})", file=sys.stderr)
    else:
        sys.stdout.write(rendered.text)
    return EXIT_OK


def _configure_submit(parser: argparse.ArgumentParser) -> None:
    add_backend_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="print what would be submitted; submit nothing")


def _run_submit(args: argparse.Namespace) -> int:
    from launch._submit_job import submit

    request, chosen = render_request(args, submitting=True)
    rendered = chosen.render(request)  # every problem of rendering reported before anything is created
    return submit(
        request, chosen, rendered, spec_source=args.spec, dry_run=args.dry_run, out=lambda line: print(line, flush=True)
    )


# --- completion -----------------------------------------------------------------


def _configure_completion(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash",), help="the shell to print a completion script for")


def _run_completion(args: argparse.Namespace) -> int:
    from launch.spec.completion import bash_script, subcommands_of

    top = build_parser()
    print(bash_script("gym-launch", top, subcommands_of(top)))
    return EXIT_OK


# --- regrade ------------------------------------------------------------------


def add_regrade_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="OUTPUT/cluster/UUID", help="the finished run to grade again")
    p.add_argument("--judge-partition", metavar="P", help="the CPU partition of a CPU profile")
    p.add_argument("--judge-qos", metavar="Q", help="the QOS of a CPU profile")
    p.add_argument(
        "--command",
        metavar="CMD",
        default="true",
        help="the shell command the job runs once its judges are up and checked; it gets the judges' "
        "registry as a run's driver does (default: true, which only checks them)",
    )
    p.add_argument("--uuid", help="the judge job's run id (default: time + random); beside the run")
    p.add_argument("--dry-run", action="store_true", help="print the profile and the job; submit nothing")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")


def _run_regrade(args: argparse.Namespace) -> int:
    from launch._regrade_job import RegradeArgs, regrade

    asked = _typed(RegradeArgs, args)
    return regrade(asked, lambda line: print(line, flush=True))


# --- preflight --------------------------------------------------------------


def _configure_preflight(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the record a run's preflight-RANK.json holds")
    parser.add_argument("--address", help="this node's address (default: the hostname's, as gym-agent resolves it)")
    parser.add_argument("--output-root", metavar="DIR", help="the output root to measure (default: [output] root)")


def _run_preflight(args: argparse.Namespace) -> int:
    """The agent's own checks (agent/preflight/), run by its interpreter in a child: the launcher
    never imports the agent's runtime."""
    import subprocess

    load_valid(args)  # every problem of the spec at once, as validate reports them (exit 2)
    argv = [sys.executable, "-m", "agent.preflight", args.spec]
    for override in args.overrides:
        argv += ["--set", override]
    if args.json:
        argv.append("--json")
    for flag, value in (("--address", args.address), ("--output-root", args.output_root)):
        if value:
            argv += [flag, value]
    return subprocess.run(argv, check=False).returncode


COMMANDS: list[Command] = [
    Command("validate", "check a run spec; print its fingerprint", _configure_validate, _run_validate),
    Command("plan", "show which GPU does what on which node", _configure_plan, _run_plan),
    Command(
        "schema",
        "print the run spec's JSON Schema (2020-12), generated from the model, for editors",
        _configure_schema,
        _run_schema,
    ),
    Command(
        "judge-command",
        "print the exact argv and environment the agent runs for a managed judge",
        _configure_judge_command,
        _run_judge_command,
    ),
    Command(
        "check-data",
        "check that every judge-graded verifier in [data] has a binding",
        _configure_check_data,
        _run_check_data,
    ),
    Command(
        "grade",
        "grade one answer through a binding's judge and rubric, as a driver would; print every diagnostic",
        _configure_grade,
        _run_grade,
    ),
    Command(
        "render",
        "print (or write with -o) the job a scheduler takes: a Slurm batch script, a Beaker experiment spec or "
        "a SkyPilot task",
        _configure_render,
        _run_render,
    ),
    Command(
        "submit",
        "render the job, write it into the run directory and submit it (Slurm's sbatch, Beaker's API or SkyPilot's)",
        _configure_submit,
        _run_submit,
    ),
    Command(
        "stacks",
        "the stacks of every process of a running run, from every agent, grouped across ranks (changes nothing)",
        _configure_stacks,
        _run_stacks,
    ),
    Command(
        "status",
        "one row per rank of a run (phase, time in phase, heartbeat age, failure), now or --watch",
        _configure_status,
        _run_status,
    ),
    Command(
        "regrade",
        "grade a finished run's saved answers again: a judge-only Slurm job (CPU or served-judge profile)",
        add_regrade_arguments,
        _run_regrade,
    ),
    Command(
        "preflight",
        "run a node's preflight checks (GPUs, /dev/shm, network, disk, limits) on this node alone",
        _configure_preflight,
        _run_preflight,
    ),
    Command(
        "local",
        "run every replica on this machine (127.0.0.2, .3, ...) and stream their phases",
        _configure_local,
        _run_local,
    ),
    Command(
        "completion",
        "print a shell completion script: source <(gym-launch completion bash)",
        _configure_completion,
        _run_completion,
    ),
]


EXIT_CODES = """exit codes:
  0    success (local: every agent exited 0 and the audit passes; status: running or succeeded)
  1    the run failed (local: an agent failed or the audit fails the run; status);
       grade: no valid grade (the judge's reply is truncated, unparseable or out of scale, or the
       judge is unreachable); preflight: a check whose mode is "fail" found a problem on this node
  2    bad command line, invalid run spec or unusable run directory (the message says what to change);
       check-data: a judge-graded verifier lacks a binding, or a data file is missing or malformed;
       local: every agent refused to start (a restart cap of [launch], an attempt still running)
  141  the output pipe was closed (`| head`)"""


def add_common_options(parser: argparse.ArgumentParser, prog: str) -> None:
    """--version and -v/-q, the same on every tool."""
    from launch.spec.console import version

    parser.add_argument("--version", action="version", version=version(prog))
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=0, help="say more")
    group.add_argument(
        "-q", "--quiet", dest="verbosity", action="store_const", const=-1, help="only errors and results"
    )


def build_parser(commands: Sequence[Command] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gym-launch",
        description="Plan, validate and launch runs.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(parser, "gym-launch")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in commands or COMMANDS:
        cmd.configure(
            sub.add_parser(
                cmd.name,
                help=cmd.help,
                description=cmd.help,
                epilog=EXIT_CODES,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
        sub.choices[cmd.name].set_defaults(_run=cmd.run)
    return parser


def report(exc: GymError, stream: TextIO) -> None:
    if isinstance(exc, SpecError):
        print(f"gym-launch: {len(exc.problems)} problem(s) in the run spec:", file=stream)
        for problem in exc.problems:
            print(problem, file=stream)
    else:
        print(f"gym-launch: error: {exc}", file=stream)


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except GymError as exc:  # every user error, the run directory's refusals (schemas/) too
        report(exc, sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
