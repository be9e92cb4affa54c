"""`gym-launch local`: the embedded default backend — every replica of a run on this machine.

`gym-launch local` validates the spec, then execs `python -m agent.local_run` with the same
arguments (launch/ never imports agent/); `main` here is that entry.

Each replica is a real `gym-agent` process with its own loopback address (127.0.0.2, .3, ...)
and `CUDA_VISIBLE_DEVICES=0..C-1` (Ray advertises them as GPUs; no GPU is touched). Their phase
lines are streamed prefixed by rank; the exit code is the run's outcome.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import load_spec, spec_differences, spec_record
from launch.spec.plan import plan as make_plan
from schemas import RunDir, RunDirError, Writer, WriterKind, names
from schemas.vocab import ResumeEnv

FIRST_LOCAL_ADDRESS = ipaddress.ip_address("127.0.0.2")


@dataclass(frozen=True)
class LocalReplica:
    """How one replica is started (pure data: printable, testable)."""

    rank: int
    address: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


def local_replicas(
    spec_file: Path, uuid: str, output_root: Path, replicas: int, gpus: int, extra_env: dict[str, str] | None = None
) -> list[LocalReplica]:
    out = []
    for rank in range(replicas):
        address = str(FIRST_LOCAL_ADDRESS + rank)
        argv = (
            sys.executable,
            "-m",
            "agent.cli",
            "--uuid",
            uuid,
            "--config",
            str(spec_file),
            "--output-root",
            str(output_root),
            "--rank",
            str(rank),
            "--replicas",
            str(replicas),
            "--address",
            address,
        )
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)), **(extra_env or {})}
        out.append(LocalReplica(rank, address, argv, tuple(sorted(env.items()))))
    return out


def run_local(
    spec_path: str,
    overrides: Sequence[str],
    *,
    uuid: str | None = None,
    output_root: str | None = None,
    out: Callable[[str], None] = print,
    per_rank_env: dict[int, dict[str, str]] | None = None,
    resume: bool = False,
) -> int:
    resolved = load_spec(spec_path, overrides)
    config = RunConfig.from_spec(resolved)
    plan = make_plan(config)
    uuid = uuid or names.new_uuid()
    root = Path(output_root or config.output_root).absolute()
    run = RunDir.create(root, uuid, mode=config.dir_mode)
    writer = Writer(config.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER)
    recorded = run.read_json(names.SPEC)
    if recorded is not None and not resume:
        out(f"gym-launch: error: run directory {run.path} already holds a run; pick a new --uuid (or --resume it)")
        return 2
    if recorded is not None and recorded.get("fingerprint") != config.fingerprint:
        keys = spec_differences(recorded.get("spec") or {}, spec_record(resolved, "")["spec"])
        out(
            f"gym-launch: error: --resume: the spec differs from the one run {uuid} was started with "
            f"(keys: {', '.join(keys) or '(spelling only)'}); resume with {run.path / names.SPEC} or restore them"
        )
        return 2
    if recorded is None:
        run.write_artifact(names.SPEC, "spec", writer, spec_record(resolved, str(spec_path)))
    spec_file = run.path / names.SPEC
    out(f"gym-launch: run {uuid}: {plan.replicas} replica(s) x {plan.gpus_per_replica} GPUs -> {run.path}")

    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    env_base = dict(os.environ)
    env_base.pop("CUDA_VISIBLE_DEVICES", None)
    # Every agent of this launch joins the same attempt; another launch started at once cannot.
    env_base[ResumeEnv.TOKEN] = f"local-{secrets.token_hex(6)}"
    if resume:
        env_base[ResumeEnv.RESUME] = "1"
    lock = threading.Lock()
    # Agents watch this pipe's read end: its EOF (our death, even by SIGKILL) stops them cleanly.
    # The write end stays with us alone (close_fds keeps it out of the agents).
    alive_r, alive_w = os.pipe()
    stopping: list[int] = []

    def pump(stream: IO[str]) -> None:
        for line in stream:
            with lock:
                out(line.rstrip("\n"))

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    # A closed terminal (SIGHUP) stops the run like ^C: the agents get SIGTERM and record it.
    # Installed before the first agent starts, so no signal finds an agent we do not pass it to.
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for rep in local_replicas(spec_file, uuid, root, plan.replicas, plan.gpus_per_replica):
        if stopping:
            break  # told to stop while starting: the agents already started were passed it
        env = {**env_base, **dict(rep.env), **(per_rank_env or {}).get(rep.rank, {})}
        # Own session: a terminal ^C reaches us, and we pass it on as SIGTERM to every agent.
        p = subprocess.Popen(
            (*rep.argv, "--launcher-fd", str(alive_r)),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            pass_fds=(alive_r,),
        )
        procs.append(p)
        t = threading.Thread(target=pump, args=(p.stdout,), daemon=True)
        t.start()
        pumps.append(t)

    os.close(alive_r)
    try:
        codes = [p.wait() for p in procs]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    os.close(alive_w)
    for t in pumps:
        t.join(timeout=5)
    ok = all(c == 0 for c in codes)
    out(f"gym-launch: run {'succeeded' if ok else 'FAILED'} (agent exit codes {codes})")
    if not ok:
        cause = first_cause_line(run.path)
        if cause:
            out(f"gym-launch: first cause: {cause}")
    out(f"gym-launch: run directory: {run.path}")
    out(f"gym-launch: inspect it with: gym-audit {run.path}   (logs: gym-audit logs {run.path})")
    run.close()
    return 0 if ok else 1


def first_cause_line(run_dir: Path) -> str | None:
    """The audit's first cause in one line (the run's, not one replica's view of it)."""
    from audit.api import audit_run
    from audit.load import UnusableRunDir

    try:
        fc = audit_run(run_dir).first_cause
    except (UnusableRunDir, OSError):
        return None
    if fc is None:
        return None
    log = f" (log {fc.log})" if fc.log else ""
    return f"rank {fc.rank} {fc.kind} in {fc.phase or '?'}: {fc.cause}{log}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gym-launch local", description="Run every replica on this machine.")
    ap.add_argument("spec", metavar="RUN.toml")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--uuid")
    ap.add_argument("--output-root")
    ap.add_argument("--resume", action="store_true", help="start a new attempt of the run --uuid names")
    args = ap.parse_args(argv)
    try:
        return run_local(
            args.spec,
            args.overrides,
            uuid=args.uuid,
            output_root=args.output_root,
            out=lambda line: print(line, flush=True),
            resume=args.resume,
        )
    except SpecError as exc:
        print(f"gym-launch: {len(exc.problems)} problem(s) in the run spec:", file=sys.stderr)
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    except (UsageError, RunDirError) as exc:
        print(f"gym-launch: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
