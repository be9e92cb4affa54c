"""The local backend: every replica of a run on this machine (``gym-launch local`` runs them itself).

Each replica is a real `gym-agent` process with its own loopback address (127.0.0.2, .3, ...)
and `CUDA_VISIBLE_DEVICES=0..C-1` (Ray advertises them as GPUs; no GPU is touched). Their phase
lines are streamed prefixed by rank; the exit code is the run's verdict: 0 only when every agent
exited 0 and `gym-audit` passes the run (evidence of training included), else 1. There is no job to
render or submit: the launcher's own process is the parent of every agent.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

from launch.backends.base import Backend, agent_argv
from launch.backends.rundir import claim_run_dir
from launch.spec.config import RunConfig
from launch.spec.errors import UsageError
from launch.spec.plan import Plan
from schemas import RunDir, names
from schemas.vocab import ResumeEnv

AGENT = (sys.executable, "-m", "agent.cli")  # this interpreter's agent: the one installed beside us
NOT_A_SCHEDULER = "the local backend renders and submits no job: gym-launch local runs every replica here"

FIRST_LOCAL_ADDRESS = ipaddress.ip_address("127.0.0.2")


@dataclass(frozen=True)
class LocalReplica:
    """How one replica is started (pure data: printable, testable)."""

    rank: int
    address: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


def local_replicas(
    spec_file: Path,
    uuid: str,
    output_root: Path,
    replicas: int,
    gpus: int | Sequence[int],
    extra_env: dict[str, str] | None = None,
    launcher_fd: int | None = None,
) -> list[LocalReplica]:
    """One replica per rank; ``gpus`` per replica, or per rank (a CPU pool's node has none)."""
    per_rank = [gpus] * replicas if isinstance(gpus, int) else list(gpus)
    out = []
    for rank in range(replicas):
        address = str(FIRST_LOCAL_ADDRESS + rank)
        argv = agent_argv(
            AGENT,
            uuid,
            str(output_root),
            config=str(spec_file),
            rank=str(rank),
            replicas=replicas,
            address=address,
            launcher_fd=launcher_fd,
        )
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(per_rank[rank])), **(extra_env or {})}
        out.append(LocalReplica(rank, address, argv, tuple(sorted(env.items()))))
    return out


def run_local(
    config: RunConfig,
    plan: Plan,
    spec_source: str,
    *,
    uuid: str | None = None,
    output_root: str | None = None,
    out: Callable[[str], None] = print,
    per_rank_env: dict[int, dict[str, str]] | None = None,
    resume: bool = False,
) -> int:
    """Start every replica of the validated ``config`` here, stream their lines, wait for them all;
    0 when every agent succeeded and the audit of the run passes, else 1. A used run directory
    raises UsageError."""
    uuid = uuid or names.new_uuid()
    root = Path(output_root or config.output_root).absolute()
    run = claim_run_dir(root, uuid, config, spec_source, resume=resume)
    try:
        return _run_replicas(run, config, plan, uuid, root, out, per_rank_env or {}, resume)
    finally:
        run.close()


def _run_replicas(
    run: RunDir,
    config: RunConfig,
    plan: Plan,
    uuid: str,
    root: Path,
    out: Callable[[str], None],
    per_rank_env: dict[int, dict[str, str]],
    resume: bool,
) -> int:
    spec_file = run.path / names.SPEC
    out(f"gym-launch: run {uuid}: {plan.replicas} replica(s) x {plan.gpus_per_replica} GPUs -> {run.path}")

    procs: list[subprocess.Popen[str]] = []
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

    _become_subreaper()
    ours_before = set(_children())
    # A closed terminal (SIGHUP) stops the run like ^C: the agents get SIGTERM and record it.
    # Installed before the first agent starts, so no signal finds an agent we do not pass it to.
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for rep in local_replicas(spec_file, uuid, root, plan.replicas, [n.gpus for n in plan.nodes], launcher_fd=alive_r):
        if stopping:
            break  # told to stop while starting: the agents already started were passed it
        env = {**env_base, **dict(rep.env), **per_rank_env.get(rep.rank, {})}
        # Own session: a terminal ^C reaches us, and we pass it on as SIGTERM to every agent.
        p = subprocess.Popen(
            rep.argv,
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
        # An agent that was killed leaves its reaper to record and clean up after it: the run is
        # over (and its files final) only once that is done too.
        grace = config.coordination.teardown_grace + ORPHAN_MARGIN_S
        left = _wait_for_orphans(time.monotonic() + grace, ours_before)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    os.close(alive_w)
    for t in pumps:
        t.join(timeout=5)
    if left:
        out(f"gym-launch: still running after the agents exited (pids {left}): they end by themselves")
    if codes and all(c == 2 for c in codes):
        # Every agent refused before starting anything (a restart cap, an attempt still running):
        # their messages above say why; there is no run of this launch to summarise.
        out(f"gym-launch: every agent refused to start (exit codes {codes}); run directory: {run.path}")
        return 2
    ok = all(c == 0 for c in codes)
    if ok:
        # Agents exiting 0 says every lifecycle ended well, not that the driver trained: the run
        # succeeded only if the audit passes too (so the launcher and gym-audit never disagree).
        failing = audit_errors(run.path)
        ok = not failing
        if ok:
            out(f"gym-launch: run succeeded: agents exited 0 and the audit passes (agent exit codes {codes})")
        else:
            out(f"gym-launch: run FAILED: agents exited 0, but the audit FAILS: {failing[0]}")
            for line in failing[1:MAX_SUMMARY_ERRORS]:
                out(f"gym-launch:   also: {line}")
    else:
        out(f"gym-launch: run FAILED (agent exit codes {codes})")
        for line in failure_lines(run.path):
            out(f"gym-launch: {line}")
    out(f"gym-launch: run directory: {run.path}")
    out(f"gym-launch: inspect it with: gym-audit {run.path}   (logs: gym-audit logs {run.path})")
    return 0 if ok else 1


MAX_SUMMARY_ERRORS = 3


PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
ORPHAN_MARGIN_S = 15.0  # beyond teardown_grace: a reaper records the death, then stops its agent's groups


def _become_subreaper() -> None:
    """Orphans of a killed agent (its reaper, say) become our children instead of init's, so we
    can wait for them. Linux only; elsewhere nothing waits for them and they end on their own."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _wait_for_orphans(deadline: float, ours_before: set[int]) -> list[int]:
    """Reap the children this run left us (the agents are waited for already; children we had
    before the run are not ours to wait for) until none is left or the deadline passes; returns
    the pids still running then."""
    while True:
        left = []
        for pid in sorted(set(_children()) - ours_before):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if not done:
                left.append(pid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _children() -> list[int]:
    me = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
        kids = {int(c) for t in tasks for c in Path(f"/proc/{me}/task/{t}/children").read_text().split()}
    except OSError:
        return []
    return sorted(kids)


def audit_errors(run_dir: Path) -> list[str]:
    """The audit's errors as "code — message" lines; empty when it passes. A run directory the
    audit cannot read is itself a failure to report."""
    from audit.api import audit_run
    from audit.safedir import UnusableRunDir

    try:
        result = audit_run(run_dir)
    except (UnusableRunDir, OSError) as exc:
        return [f"the audit cannot read the run directory: {exc}"]
    return [f"{f.code} — {f.message[:SUMMARY_CHARS]}" for f in result.findings if f.severity == "error"]


SUMMARY_CHARS = 1000  # the audit message names the accepted evidence: keep it whole


def failure_lines(run_dir: Path) -> list[str]:
    """The audit's first cause in one line (the run's, not one replica's view of it), and the
    nodes a preflight found unfit, as the line to resubmit without them."""
    from audit.api import audit_run
    from audit.safedir import UnusableRunDir

    try:
        result = audit_run(run_dir)
    except (UnusableRunDir, OSError):
        return []
    fc = result.first_cause
    lines = []
    if fc is not None:
        log = f" (log {fc.log})" if fc.log else ""
        lines.append(f"first cause: rank {fc.rank} {fc.kind} in {fc.phase or '?'}: {fc.cause}{log}")
    if result.unfit:
        hosts = ", ".join(f"rank {n['rank']} on {n['host']}" for n in result.unfit["nodes"][:8])
        lines.append(f"unfit node(s): {hosts}; {result.unfit['exclude']}")
    return lines


def _refuse(*_: object) -> NoReturn:
    raise UsageError(NOT_A_SCHEDULER)


LOCAL = Backend("local", "Local", render=_refuse, submit=_refuse, preflight=_refuse, schedules=False)
