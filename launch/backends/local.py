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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, NoReturn

from launch.backends._local_stragglers import straggler_bound, wait_agents
from launch.backends._local_verdict import verdict
from launch.backends.base import Backend, agent_argv, container_problems
from launch.backends.job_vars import host_values, unexported_problems
from launch.backends.rundir import claim_run_dir
from launch.spec.config import RunConfig
from launch.spec.errors import Problem, SpecError, UsageError
from launch.spec.plan import Plan
from schemas import RunDir, names
from schemas.vocab import ResumeEnv

__all__ = [
    "AGENT",
    "FIRST_LOCAL_ADDRESS",
    "LOCAL",
    "LocalReplica",
    "NOT_A_SCHEDULER",
    "ORPHAN_MARGIN_S",
    "PR_SET_CHILD_SUBREAPER",
    "job_environment",
    "job_variable_problems",
    "local_hosts",
    "local_replicas",
    "run_local",
]

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
        address = local_hosts(replicas)[rank]
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
    problems = [*container_problems(config, "gym-launch local"), *job_variable_problems(config, plan)]
    if problems:
        raise SpecError(problems)
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
    out(f"gym-launch: run {uuid}: {plan.replicas} replica(s) x {plan.gpus_per_replica} GPUs -> {run.path}")
    env_base = _agents_environment(resume)
    agents = _Agents(out)
    # Agents watch this pipe's read end: its EOF (our death, even by SIGKILL) stops them cleanly.
    # The write end stays with us alone (close_fds keeps it out of the agents).
    alive_r, alive_w = os.pipe()
    _become_subreaper()
    ours_before = set(_children())
    # A closed terminal (SIGHUP) stops the run like ^C: the agents get SIGTERM and record it.
    # Installed before the first agent starts, so no signal finds an agent we do not pass it to.
    old = {s: signal.signal(s, agents.forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    replicas = local_replicas(
        run.path / names.SPEC,
        uuid,
        root,
        plan.replicas,
        [n.gpus for n in plan.nodes],
        extra_env=job_environment(config, plan),
        launcher_fd=alive_r,
    )
    for rep in replicas:
        if agents.stopping:
            break  # told to stop while starting: the agents already started were passed it
        agents.start(rep.argv, {**env_base, **dict(rep.env), **per_rank_env.get(rep.rank, {})}, alive_r)
    os.close(alive_r)
    try:
        # A frozen agent (SIGSTOPped with its children) would keep us here while it stays frozen.
        codes = wait_agents(agents.procs, straggler_bound(config), agents.say, time.monotonic, partial(_beat, run))
        # An agent that was killed leaves its reaper to record and clean up after it: the run is
        # over (and its files final) only once that is done too.
        grace = config.coordination.teardown_grace + ORPHAN_MARGIN_S
        left = _wait_for_orphans(time.monotonic() + grace, ours_before)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    os.close(alive_w)
    agents.join_pumps()
    if left:
        out(f"gym-launch: still running after the agents exited (pids {left}): they end by themselves")
    return verdict(run.path, codes, out)


def local_hosts(replicas: int) -> list[str]:
    """Each replica's loopback address, by rank: its host."""
    return [str(FIRST_LOCAL_ADDRESS + rank) for rank in range(replicas)]


def job_environment(config: RunConfig, plan: Plan) -> dict[str, str]:
    """The job variables a Slurm job exports (job_vars), each replica's loopback address as its host:
    the agents order nodes by address, so planned node i is rank i's."""
    return host_values(config, plan, local_hosts(plan.replicas))


def job_variable_problems(config: RunConfig, plan: Plan) -> list[Problem]:
    """A reference to the Ray head's address, which only the head knows here once it started."""
    return unexported_problems(config, plan, job_environment(config, plan), "gym-launch local")


def _beat(run: RunDir, rank: int) -> tuple[object, object] | None:
    """A token of rank's heartbeat that changes with each one it writes."""
    doc = run.read_json(names.heartbeat(rank), attempts=1)
    return (doc.get("seq"), doc.get("incarnation")) if doc is not None else None


def _agents_environment(resume: bool) -> dict[str, str]:
    """What every agent of this launch gets beside its own replica's variables."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    # Every agent of this launch joins the same attempt; another launch started at once cannot.
    env[ResumeEnv.TOKEN] = f"local-{secrets.token_hex(6)}"
    if resume:
        env[ResumeEnv.RESUME] = "1"
    return env


@dataclass
class _Agents:
    """The agents of one launch as they start: their processes, the threads streaming their lines
    to ``out``, and the signals passed on to them (mutable: it grows as they start)."""

    out: Callable[[str], None]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    pumps: list[threading.Thread] = field(default_factory=list)
    stopping: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, argv: Sequence[str], env: dict[str, str], alive_r: int) -> None:
        # Own session: a terminal ^C reaches us, and we pass it on as SIGTERM to every agent.
        p = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            pass_fds=(alive_r,),
        )
        self.procs.append(p)
        t = threading.Thread(target=self._pump, args=(p.stdout,), daemon=True)
        t.start()
        self.pumps.append(t)

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            with self.lock:
                self.out(line.rstrip("\n"))

    def say(self, line: str) -> None:
        with self.lock:  # never inside an agent's line
            self.out(line)

    def forward(self, signum: int, _frame: object) -> None:
        self.stopping.append(signum)
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def join_pumps(self) -> None:
        for t in self.pumps:
            t.join(timeout=5)


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


def _refuse(*_: object) -> NoReturn:
    raise UsageError(NOT_A_SCHEDULER)


LOCAL = Backend("local", "Local", render=_refuse, submit=_refuse, preflight=_refuse, schedules=False)
