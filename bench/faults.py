"""The fault matrix: inject each fault into real agents from the outside, N times, and report.

    make faults                          # every fault, 3 trials each (the Slurm rows once)
    python -m bench.faults --only driver-exit sigkill-agent --trials 1 --json

Each trial starts real `gym-agent` processes (or `gym-launch local` for the launcher's faults) on
127.0.0.x with a small coordination-only spec (no Ray: seconds per trial), waits until every rank
runs the driver, injects the fault, and measures: the exit codes, the time from the fault to the
last exit of any process of the run, each rank's failure and cleanup record, orphans (the
processes of the run still alive, as tests.harness.orphans finds them: in a session of the run,
or its directory or uuid in the command line or environment; never by name), and whether
`gym-audit`'s text names the expected rank and kind under its verdict, in its first lines
(tests/harness/audit_head.py, the check `make test` applies too). A row passes when every trial does.

Two kinds of rows measure more than one launch or more than the agents:
- restart rows (`refused_at`): the run is relaunched after each failure as a scheduler restarts a
  job, until the restart caps refuse an attempt; the fault is that relaunch, its exit codes are the
  refused agents' (2 each), the ending names attempts/N/refused.json and its cap.
- Slurm rows (`slurm`, bench/faults_slurm.py): the job on the local Slurm cluster, ended by the
  scheduler; the exit code is the job's, the ending its state and the time to its end. The cluster
  is started for them after the other rows (or the rows are skipped, saying why)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from agent.proc import tempdirs
from bench import faults_slurm, measurement
from schemas import names
from schemas.vocab import ResumeEnv
from tests.harness import audit_head, doorbell_fuzz, fullfs, fuse_install, ledger, orphans
from tests.harness.agents import assert_artifacts_valid, read, start_agent
from tests.harness.engines import engine_env, engine_python, tiny_model, vllm_judge_tables
from tests.harness.nfs_model import NfsClient, nfs_clients
from tests.harness.specs import JUDGE_TABLES, judge_tables, result_driver, small_spec, uid

BIN = Path(sys.executable).parent
SKEW_ENV = "GYM_TEST_CLOCK_SKEW_S"  # agent/ground/clock.py's test hook
REPO = Path(__file__).resolve().parents[1]
REPLICAS = 3
HB_TIMEOUT = 4.0

SLEEPY = 'command = ["python", "-c", "import time; time.sleep(120)"]'
RESULT = result_driver(2)
EXIT1 = 'command = ["python", "-c", "import time; time.sleep(3); raise SystemExit(1)"]'
STUBBORN = (
    'command = ["python", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]'
)
SETSID = (
    "command = [\"python\", \"-c\", \"import subprocess, time; subprocess.Popen(['setsid', 'sleep', '300']); "
    'time.sleep(3); raise SystemExit(1)"]'
)


@dataclass
class Run:
    """One trial's processes and paths."""

    root: Path
    uuid: str
    spec: Path
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    launcher: subprocess.Popen | None = None
    extra: list[subprocess.Popen] = field(default_factory=list)
    fault_at: float = 0.0

    @property
    def run_dir(self) -> Path:
        return self.root / "out" / "cluster" / self.uuid

    tmp: Path | None = None  # the agents' local temp root (short: Ray's socket paths live below it)
    clients: list[NfsClient] = field(default_factory=list)  # hung-filesystem rows: the mounted clients
    client_of: tuple[int, ...] = ()  # rank -> its client
    holders: list[subprocess.Popen] = field(default_factory=list)  # outside the run (a GPU's foreign holder)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, tempdirs.ROOT_ENV: str(self.tmp), "CUDA_VISIBLE_DEVICES": "0,1", **(extra or {})}

    def agent(
        self,
        rank: int,
        *,
        replicas: int = REPLICAS,
        address: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        stdout: int | None = None,
    ) -> subprocess.Popen:
        log = stdout if stdout is not None else open(self.root / f"agent-{rank}-{len(self.extra)}.out", "wb")  # noqa: SIM115
        addr = address or f"127.0.0.{rank + 2}"
        if self.client_of:
            args = ("--output-root", str(self.clients[self.client_of[rank]].mnt), *args)
        return start_agent(
            self.root, self.spec, self.uuid, rank, replicas, addr, env=env, args=args, stdout=log, temp_root=self.tmp
        )

    def start_agents(self, **per_rank: dict) -> None:
        for r in range(REPLICAS):
            self.procs[r] = self.agent(r, **per_rank.get(f"r{r}", {}))
            if f"twin{r}" in per_rank:  # a second agent for this rank, started at the same instant
                self.extra.append(self.agent(r, **per_rank[f"twin{r}"]))

    def start_launcher(self) -> None:
        cmd = [str(BIN / "gym-launch"), "local", str(self.spec), "--uuid", self.uuid]
        cmd += ["--output-root", str(self.root / "out")]
        log = open(self.root / "launcher.out", "wb")  # noqa: SIM115
        self.launcher = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env())

    def agent_pid(self, rank: int) -> int:
        return int(read(self.run_dir, names.address(rank))["pid"])

    def wait_phase(self, phase: str = "driver", ranks: range = range(REPLICAS), timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        for r in ranks:
            while True:
                try:
                    if any(p["phase"] == phase for p in read(self.run_dir, names.phases(r))["phases"]):
                        break
                except (OSError, ValueError, KeyError):
                    pass
                if time.monotonic() > end:
                    raise TimeoutError(f"rank {r} never reached {phase}")
                time.sleep(0.05)

    def fault(self) -> None:
        self.fault_at = time.monotonic()

    def sessions(self) -> tuple[int, ...]:
        """The sessions this trial started: every agent's (the launcher shares the bench's)."""
        return tuple(p.pid for p in (*self.procs.values(), *self.extra))


def run_processes(run: Run) -> list[psutil.Process]:
    """Live processes of the trial's run (tests.harness.orphans: by session and PID, never by
    name); the agents' temp root marks Ray's daemons, which name their temp dir."""
    return orphans.run_processes(run.run_dir, sessions=run.sessions(), marks=(str(run.tmp),))


# -- the faults --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    name: str
    driver: str
    inject: Callable[[Run], None]
    expect: str  # "fail" or "pass"
    rank: int | None = None
    kinds: tuple[str, ...] = ()
    launcher: bool = False
    needs_root: bool = False
    ray: bool = False
    judges: bool = False
    words: tuple[str, ...] = ()  # what the audit's first lines must also say, every one
    launch_keys: str = ""  # lines for the spec's [launch] table (the restart caps)
    refused_at: int | None = None  # restart rows: the attempt the caps must refuse
    slurm: bool = False  # on the local Slurm cluster (bench/faults_slurm.py): one trial by default
    check: Callable[[Path], list[str]] | None = None  # more problems, read from the run directory
    # Hung-filesystem rows: each rank's output root is an NFS-model client (tests/harness/nfs_model.py)
    # of the trial's out/, rank r on client mounts[r]; the injection stalls and resumes clients.
    mounts: tuple[int, ...] = ()
    coordination: str = ""  # lines for the spec's [launch.coordination] table
    preflight: str = ""  # lines for the spec's [launch.preflight] table
    # Called before the agents start: per-rank agent() arguments (merged over SETUP's), e.g. the
    # fake NVML a rank loads; what it starts goes to run.holders (ended after the trial).
    prepare: Callable[[Run], dict[str, dict]] | None = None
    judge_timeout: int | None = None  # the managed judge's per-request timeout (default: the harness's)
    engine: bool = False  # the managed judge is a real vLLM (`make engines`; the row skips without it)
    startup_timeout: float | None = None  # the run's startup bound (default: 60 s with Ray, else 30 s)
    trainer_nodes: int = 1  # nodes that train (the rest roll out)
    resumed: bool = False  # resume rows: the injection ends attempt 1, the run is relaunched with --resume


def _sig_agent(rank: int, sig: signal.Signals, phase: str = "driver") -> Callable[[Run], None]:
    def inject(run: Run) -> None:
        run.wait_phase(phase, range(rank, rank + 1))
        run.fault()
        os.kill(run.agent_pid(rank), sig)

    return inject


def _sigstop(run: Run) -> None:
    run.wait_phase()
    run.fault()
    pid = run.agent_pid(1)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(HB_TIMEOUT + 4)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def _never_starts(run: Run) -> None:
    run.procs[2].kill()  # killed before it could claim anything: a replica that never started
    run.procs[2].wait()
    del run.procs[2]
    run.fault()


def _wait_then(fn: Callable[[Run], None]) -> Callable[[Run], None]:
    def inject(run: Run) -> None:
        run.wait_phase()
        run.fault()
        fn(run)

    return inject


def _driver_exits(run: Run) -> None:
    """The fault is the driver's own exit, 3 s into the driver phase."""
    run.wait_phase("driver", range(0, 1))
    time.sleep(3.0)
    run.fault()


def _kill_driver_node_agent(run: Run) -> None:
    time.sleep(1.0)  # the stubborn driver ignores SIGTERM by now
    os.kill(run.agent_pid(1), signal.SIGKILL)


def _garbage(run: Run) -> None:
    end = time.monotonic() + HB_TIMEOUT + 3
    hb = run.run_dir / names.heartbeat(1)
    while time.monotonic() < end:
        try:
            with open(hb, "r+b") as f:  # in place: the agent's next atomic write replaces it
                f.write(b"\x00garbage\xff" * 8)
        except OSError:
            pass
        time.sleep(0.05)


def _warns(run_dir: Path, code: str, rank: int) -> list[str]:
    """The audit's JSON has a finding `code` about `rank` (else the problem)."""
    done = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True)
    try:
        findings = json.loads(done.stdout).get("findings") or []
    except ValueError:
        return [f"gym-audit --json printed no JSON (exit {done.returncode})"]
    if any(f.get("code") == code and f.get("rank") == rank for f in findings):
        return []
    return [f"the audit has no {code} finding for rank {rank}"]


def _reuse(run: Run) -> None:
    for p in run.procs.values():
        p.wait(60)
    run.fault()
    p = run.agent(1, args=())
    run.extra.append(p)
    p.wait(30)


def _dup_late(run: Run) -> None:
    run.fault()
    p = run.agent(1, address="127.0.0.9")
    run.extra.append(p)


def _node_lost(run: Run) -> None:
    """Everything of rank 1 vanishes at once (agent, reaper, children): a lost host."""
    orphans.kill_node(run.run_dir, 1, sessions=run.sessions(), marks=(str(run.tmp),))


def _launcher_sig(sig: signal.Signals) -> Callable[[Run], None]:
    def inject(run: Run) -> None:
        run.wait_phase()
        run.fault()
        assert run.launcher is not None
        run.launcher.send_signal(sig)

    return inject


def _kill_raylet(run: Run) -> None:
    run.wait_phase()
    raylets = [p for p in psutil.Process(run.agent_pid(1)).children(recursive=True) if p.name().startswith("raylet")]
    if not raylets:
        raise OSError("rank 1 has no raylet")
    run.fault()
    for p in raylets:
        p.kill()


def _judge_sig(sig: signal.Signals, ready_within: float = 60) -> Callable[[Run], None]:
    def inject(run: Run) -> None:
        run.wait_phase(timeout=ready_within)
        pid = int(read(run.run_dir, names.judge_endpoint("general", 2))["pid"])
        run.fault()
        os.kill(pid, sig)

    return inject


# -- a real inference engine as the managed judge (vLLM's CPU build, tests/harness/engines.py) ----------

ENGINE_STARTUP = 900.0  # s: vLLM starts in 68-126 s on idle cores, far slower beside other work
ENGINE_SLOW_START = 20.0  # s: a startup_timeout the engine cannot meet here (its start takes minutes)


def _engine_agents(_run: Run) -> dict[str, dict]:
    python = engine_python()
    assert python is not None  # run_trial skips the row without one
    return {f"r{r}": {"env": engine_env(python)} for r in range(REPLICAS)}


def _kill_engine_core(run: Run) -> None:
    """SIGKILL to the engine's EngineCore, a child of its API server, mid-run."""
    run.wait_phase(timeout=ENGINE_STARTUP)
    server = psutil.Process(int(read(run.run_dir, names.judge_endpoint("general", 2))["pid"]))
    # Which child is which, by the titles vLLM gives its own processes; each is killed by its PID.
    cores = [p for p in server.children(recursive=True) if "EngineCore" in " ".join(p.cmdline())]
    if not cores:
        raise OSError(f"the judge's engine (pid {server.pid}) has no EngineCore process")
    run.fault()
    for p in cores:
        p.kill()


def _engine_starting(run: Run) -> None:
    """The fault is the engine's own start outlasting startup_timeout: it counts from its first log line."""
    log = run.run_dir / names.judge_log("general", 2)
    end = time.monotonic() + 60
    while not log.exists() and time.monotonic() < end:
        time.sleep(0.1)
    run.fault()


def _close_stdout(run: Run) -> None:
    run.wait_phase()
    run.fault()
    for p in run.procs.values():
        if p.stdout is not None:
            p.stdout.close()  # the reader is gone: the agents' next line meets EPIPE


def _doorbell_fuzz(run: Run) -> None:
    """A foreign process sprays every agent's doorbell until the run ends (tests/harness/doorbell_fuzz.py)."""
    ports = doorbell_fuzz.doorbell_ports(run.run_dir, REPLICAS)
    run.fault()
    stop, sent = threading.Event(), [0]
    targets = {r: (f"127.0.0.{r + 2}", port) for r, port in ports.items()}
    threading.Thread(target=doorbell_fuzz.spray, args=(run.run_dir, targets, stop, sent), daemon=True).start()

    def until_exit() -> None:
        for p in run.procs.values():
            p.wait()
        stop.set()

    threading.Thread(target=until_exit, daemon=True).start()


def _disk_full(run: Run) -> None:
    run.wait_phase()
    run.fault()
    filler = fullfs.fill(run.root / "out")
    time.sleep(HB_TIMEOUT)
    filler.unlink()


FAULTS: tuple[Fault, ...] = (
    Fault("sigkill-agent-rendezvous", SLEEPY, _sig_agent(1, signal.SIGKILL, "rendezvous"), "fail", 1, ("agent_died",)),
    Fault("sigkill-agent-driver", SLEEPY, _sig_agent(1, signal.SIGKILL), "fail", 1, ("agent_died",)),
    Fault("sigkill-agent-driver-node", SLEEPY, _sig_agent(0, signal.SIGKILL), "fail", 0, ("agent_died",)),
    Fault("sigterm-agent", SLEEPY, _sig_agent(2, signal.SIGTERM), "fail", 2, ("signal",)),
    Fault("sigstop-sigcont-agent", SLEEPY, _sigstop, "fail", 1, ("agent_died", "silent")),
    Fault("replica-never-starts", SLEEPY, _never_starts, "fail", None, ("startup_timeout",)),
    Fault("driver-exit-1", EXIT1, _driver_exits, "fail", 0, ("driver_exit",)),
    Fault("driver-ignores-sigterm", STUBBORN, _wait_then(_kill_driver_node_agent), "fail", 1, ("agent_died",)),
    Fault("setsid-grandchild", SETSID, _driver_exits, "fail", 0, ("driver_exit",)),
    # Another writer garbles rank 1's heartbeat file while its agent is healthy (agent/coord/heartbeat_age.py):
    # with beacons it is alive on the doorbell, so the run goes on and the audit warns; files only, the
    # garbled file is still and rank 1 is silent (its watchers' record or its reaper's fence, both naming it).
    Fault(
        "heartbeat-garbage",
        result_driver(HB_TIMEOUT + 6),
        _wait_then(_garbage),
        "pass",
        check=lambda run_dir: _warns(run_dir, "heartbeat.corrupt", 1),
    ),
    Fault(
        "heartbeat-garbage-files-only",
        SLEEPY,
        _wait_then(_garbage),
        "fail",
        1,
        ("silent", "agent_died"),
        coordination="doorbell = false",
    ),
    Fault("uuid-reuse", RESULT, _reuse, "pass"),
    # A late duplicate must not join nor disturb the run: it exits 2, the run succeeds.
    Fault("duplicate-rank-late", RESULT, _wait_then(_dup_late), "pass"),
    Fault("node-lost", SLEEPY, _wait_then(_node_lost), "fail", 1, ("silent",)),
    Fault("launcher-sigterm", SLEEPY, _launcher_sig(signal.SIGTERM), "fail", None, ("signal",), launcher=True),
    Fault("launcher-sigint", SLEEPY, _launcher_sig(signal.SIGINT), "fail", None, ("signal",), launcher=True),
    Fault("launcher-sighup", SLEEPY, _launcher_sig(signal.SIGHUP), "fail", None, ("signal",), launcher=True),
    Fault("launcher-sigkill", SLEEPY, _launcher_sig(signal.SIGKILL), "fail", None, ("signal",), launcher=True),
    # The disk fills mid-run: the preflight's bound is below the 3 MB tmpfs (preflight-full-disk is at start).
    Fault(
        "disk-full", SLEEPY, _disk_full, "fail", None, ("run_dir",), needs_root=True, preflight='min_free_disk = "1MiB"'
    ),
)
# Faults whose agents are started with something unusual: (rank -> agent() keyword arguments).
# Checkpoints when told (GYM_STOP_FILE appears) and exits 0, within its checkpoint grace.
CHECKPOINTS = (
    'command = ["python", "-c", "import os, time\\nwhile not os.path.exists(os.environ[\'GYM_STOP_FILE\']): '
    "time.sleep(0.1)\\nopen(os.path.join(os.environ['GYM_CHECKPOINT_DIR'], 'ckpt'), 'w').write('1')\"]\n"
    "checkpoint_grace = 10"
)
GRADES = f'command = ["python", "{REPO / "tests" / "data" / "grading_driver.py"}"]'
# The reference judge answers the canaries' 12 chat completions and two of the driver's, then only invalid replies.
DEGRADING = {"GYM_REFERENCE_JUDGE_FAULTS": "invalid-after=14", "GRADES": "20"}


def _walltime_warning(run: Run) -> None:
    """What the rendered Slurm job's trap writes when Slurm sends its --signal warning."""
    run.wait_phase()
    run.fault()
    (run.run_dir / names.WALLTIME_WARNING).write_text("SIGUSR1 at (fault matrix)\n")


SETUP: dict[str, dict[str, dict]] = {
    "judge-degraded": {f"r{r}": {"env": DEGRADING} for r in range(REPLICAS)},
    "duplicate-address": {"r2": {"address": "127.0.0.3"}},
    "spec-mismatch": {"r2": {"args": ("--set", "launch.coordination.ack_timeout=21")}},
    "replicas-mismatch": {"r2": {"replicas": 4}},
    "clock-skew-1h": {"r1": {"env": {SKEW_ENV: "3600"}}, "r2": {"env": {SKEW_ENV: "-3600"}}},
    "duplicate-rank-racing": {"twin1": {"address": "127.0.0.9"}},
    "broken-stdout-pipe": {f"r{r}": {"stdout": subprocess.PIPE} for r in range(REPLICAS)},
}
FAULTS += (
    Fault("duplicate-address", SLEEPY, lambda r: r.fault(), "fail", None, ("address_conflict",)),
    Fault("spec-mismatch", SLEEPY, lambda r: r.fault(), "fail", None, ("plan_mismatch",)),
    Fault("replicas-mismatch", SLEEPY, lambda r: r.fault(), "fail", None, ("plan_mismatch",)),
    Fault("clock-skew-1h", RESULT, lambda r: r.fault(), "pass"),
    Fault("duplicate-rank-racing", RESULT, lambda r: r.fault(), "pass"),
    Fault("broken-stdout-pipe", EXIT1, _close_stdout, "fail", 0, ("driver_exit",)),
    Fault("raylet-killed", SLEEPY, _kill_raylet, "fail", 1, ("child_exit",), ray=True),
    Fault("judge-killed", SLEEPY, _judge_sig(signal.SIGKILL), "fail", 2, ("judge",), judges=True),
    Fault("judge-hung", SLEEPY, _judge_sig(signal.SIGSTOP), "fail", 2, ("judge_health",), judges=True),
    Fault("judge-degraded", GRADES, _wait_then(lambda _r: None), "fail", 0, ("judge_degraded",), judges=True),
    Fault("walltime-warning", CHECKPOINTS, _walltime_warning, "fail", None, ("time_limit",)),
    Fault(
        "vllm-enginecore-killed",
        SLEEPY,
        _kill_engine_core,
        "fail",
        2,
        ("judge",),
        words=("engine died",),
        judges=True,
        engine=True,
        prepare=_engine_agents,
        startup_timeout=ENGINE_STARTUP,
    ),
    Fault(
        "vllm-engine-stopped",
        SLEEPY,
        _judge_sig(signal.SIGSTOP, ENGINE_STARTUP),
        "fail",
        2,
        ("judge_health",),
        judges=True,
        engine=True,
        prepare=_engine_agents,
        startup_timeout=ENGINE_STARTUP,
    ),
    Fault(
        "vllm-slow-start",
        SLEEPY,
        _engine_starting,
        "fail",
        2,
        ("startup_timeout",),
        judges=True,
        engine=True,
        prepare=_engine_agents,
        startup_timeout=ENGINE_SLOW_START,
        words=("judge general",),
    ),
    Fault(
        "doorbell-fuzz",
        RESULT,
        _doorbell_fuzz,
        "pass",
        check=lambda run_dir: doorbell_fuzz.drop_problems(run_dir, range(REPLICAS)),
    ),
)


FAKE_NVML = REPO / "tests" / "harness" / "fake_nvml"


def _foreign_gpu_holder(run: Run) -> dict[str, dict]:
    """Rank 1's GPU 0 is held by a process of another job (GPUs cannot exist here: that rank loads
    the fake NVML module, whose holder is a real process started outside the run)."""
    from tests.harness.fake_nvml import pynvml as fake

    holder = subprocess.Popen(["sleep", "300"], start_new_session=True)
    run.holders.append(holder)
    devices = [fake.gpu(0), fake.gpu(1)]
    devices[0]["holders"] = [{"pid": holder.pid, "used": 60 << 30}]
    state = run.root / "nvml.json"
    fake.write_state(str(state), devices)
    pythonpath = f"{FAKE_NVML}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    return {"r1": {"env": {fake.STATE_ENV: str(state), "PYTHONPATH": pythonpath}}}


FAULTS += (
    Fault(
        "preflight-foreign-gpu",
        SLEEPY,
        lambda r: r.fault(),
        "fail",
        1,
        ("preflight",),
        words=("gpus", "another job", "resubmit with sbatch --exclude="),
        prepare=_foreign_gpu_holder,
    ),
    Fault(
        "preflight-missing-interface",
        SLEEPY,
        lambda r: r.fault(),
        "fail",
        2,
        ("preflight",),
        words=("network", "NCCL_SOCKET_IFNAME", "resubmit with sbatch --exclude="),
        prepare=lambda _run: {"r2": {"env": {"NCCL_SOCKET_IFNAME": "ib-does-not-exist"}}},
    ),
    # The driver takes its key by reference (issue 47); rank 1's job lacks the variable: the run fails
    # at rendezvous, before any process starts, naming it.
    Fault(
        "missing-referenced-variable",
        'command = ["python", "-c", "import time; time.sleep(120)", "--api-key=${runtime:GYM_FAULT_KEY}"]',
        lambda r: r.fault(),
        "fail",
        1,
        ("environment",),
        words=("GYM_FAULT_KEY",),
        prepare=lambda _run: {f"r{r}": {"env": {"GYM_FAULT_KEY": "k-47"}} for r in (0, 2)},
    ),
    # A 3 MB output disk at start: below the default min_free_disk (10 GiB) on every node.
    Fault(
        "preflight-full-disk",
        SLEEPY,
        lambda r: r.fault(),
        "fail",
        None,
        ("preflight",),
        needs_root=True,
        words=("disk", "min_free_disk"),
    ),
)


def _stall(client: int, seconds: float, then: Callable[[Run], None] | None = None) -> Callable[[Run], None]:
    """Every rank in its driver phase, then NFS-model client `client` hangs for `seconds` (its
    daemon stopped, as a server that stops answering); `then` runs 1 s into the hang."""

    def inject(run: Run) -> None:
        run.wait_phase()
        hung = run.clients[client]
        hung.stall()
        run.fault()
        try:
            if then is not None:
                time.sleep(1.0)
                then(run)
            time.sleep(max(0.0, seconds - (time.monotonic() - run.fault_at)))
        finally:
            hung.resume()

    return inject


def _sigterm(rank: int) -> Callable[[Run], None]:
    return lambda run: run.procs[rank].send_signal(signal.SIGTERM)


STALL_BOUND = 2 * HB_TIMEOUT  # fs_stall_timeout of the rows that end as fs_stall
FAULTS += (
    # The shared filesystem hangs for every rank; a SIGTERM to rank 0 during it.
    Fault("fs-hung-sigterm", SLEEPY, _stall(0, HB_TIMEOUT + 3, _sigterm(0)), "fail", 0, ("signal",), mounts=(0, 0, 0)),
    # A hang longer than heartbeat_timeout, shorter than fs_stall_timeout: ridden out.
    Fault(
        "fs-stall-ridden-out",
        result_driver(4),
        _stall(0, HB_TIMEOUT + 3),
        "pass",
        mounts=(0, 0, 0),
        coordination="fs_stall_timeout = 60",
    ),
    Fault(
        "fs-stall-past-bound",
        SLEEPY,
        _stall(0, STALL_BOUND + 5),
        "fail",
        None,
        ("fs_stall",),
        mounts=(0, 0, 0),
        coordination=f"fs_stall_timeout = {STALL_BOUND:g}",
    ),
    # Only rank 2's mount hangs: its peers keep it alive on the doorbell, then it fails as fs_stall.
    Fault(
        "fs-stall-one-node",
        SLEEPY,
        _stall(1, STALL_BOUND + 8),
        "fail",
        2,
        ("fs_stall",),
        mounts=(0, 0, 1),
        coordination=f"fs_stall_timeout = {STALL_BOUND:g}",
    ),
)

# Hangs (issue 34): the driver's node calls the hang, every node keeps its processes' stacks first.
HANG_TIMEOUT = 4
SILENT_HANG = (
    'command = ["python", "-c", "import time\\nfor i in range(3): print(\'step\', i, flush=True); time.sleep(0.3)'
    '\\ndef wait_for_peer():\\n    time.sleep(3600)\\nwait_for_peer()"]\n'
    f"progress_timeout = {HANG_TIMEOUT}\nfirst_progress_timeout = {HANG_TIMEOUT}"
)
CHATTER_HANG = (
    'command = ["python", "-c", "import time\\nfor i in range(1, 4): print(\'step\', i, \'loss\', 0.5, flush=True); '
    "print('published policy', i, flush=True); time.sleep(0.3)\\n"
    "while True: print('waiting for the rollout queue', flush=True); time.sleep(0.2)\"]\n"
    f"progress_timeout = {HANG_TIMEOUT}\n"
    'evidence = { log_step_pattern = "^step (?P<step>\\\\d+) loss (?P<loss>\\\\S+)", '
    'log_refresh_pattern = "^published policy" }'
)
RAY_STUCK = (
    f'command = ["python", "{REPO / "tests" / "data" / "ray_stuck_actor_driver.py"}"]\n'
    "progress_timeout = 6\ntrains = false"
)
# Grades through a judge that answers the canaries and two grades, then never again; the client's
# timeout (3 s, 4 attempts) ends the grade at ~16 s, later than progress_timeout: the grade in
# flight postpones the hang, and the driver's exit names the judge.
JUDGE_WEDGED = f"{GRADES}\nprogress_timeout = 8"
WEDGED_ENV = {"GYM_REFERENCE_JUDGE_FAULTS": "hang-after=14", "GRADES": "5", "DEGRADED": "strict"}


def _stacks_name(function: str, ranks: range = range(REPLICAS)) -> Callable[[Path], list[str]]:
    """Every rank kept stacks-RANK.json, and some process's main thread is in `function`."""

    def check(run_dir: Path) -> list[str]:
        docs = {r: _try(run_dir, names.stacks(r)) for r in ranks}
        problems = [f"no {names.stacks(r)}" for r, d in docs.items() if d is None]
        frames = {
            f["function"]
            for d in docs.values()
            if d
            for p in d["processes"]
            for t in p["threads"][:1]
            for f in t["frames"]
        }
        if function not in frames:
            problems.append(f"no process's stacks show {function}")
        return problems

    return check


def _odd_one_out(words: str) -> Callable[[Path], list[str]]:
    def check(run_dir: Path) -> list[str]:
        done = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True)
        try:
            odd = json.loads(done.stdout)["stacks"]["odd_ones_out"]
        except (ValueError, KeyError, TypeError):
            return ["gym-audit --json has no stacks summary"]
        return [] if any(words in o for o in odd) else [f"the odd one out is not {words!r}: {odd}"]

    return check


def _judge_named(run_dir: Path, judge: str) -> list[str]:
    """The driver's exit names the judge that left its grade unanswered; no hang was called."""
    rec = _try(run_dir, names.failure(0)) or {}
    problems = [] if rec.get("judge") == judge and "unanswered" in str(rec.get("cause")) else [f"rank 0: {rec}"]
    return problems + ([f"a hang was called ({names.stacks(0)})"] if _try(run_dir, names.stacks(0)) else [])


def _both(*checks: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
    return lambda run_dir: [p for c in checks for p in c(run_dir)]


# The real trainer (examples/torch_trainer.py, issue 49): gloo across the three nodes, one rank each.
# Its collective timeout (300 s) is far beyond progress_timeout (the agent calls the hang first) and
# the trial's bound (the teardown ends the ranks); a peer that vanished fails gloo at once anyway.
TRAINER = REPO / "examples" / "torch_trainer.py"
TRAINER_UP_S = 240.0  # three Ray nodes and three ranks importing torch on a loaded 2-core host


def _trainer(progress_timeout: int, **env: str) -> str:
    settings = ", ".join(f'{k} = "{v}"' for k, v in {**env, "TRAINER_COLLECTIVE_TIMEOUT": "300"}.items())
    return (
        f'command = ["python", "{TRAINER}"]\nprogress_timeout = {progress_timeout}\ncollective_trace = true\n'
        f"env = {{{settings}}}"
    )


def _trainer_stepped(run: Run) -> str:
    """Wait until the trainer logged its first step; its log so far."""
    end = time.monotonic() + TRAINER_UP_S + 120  # the startup bound, then the ranks' torch import
    while time.monotonic() < end:
        with contextlib.suppress(OSError):
            text = (run.run_dir / names.driver_log(0)).read_text(errors="replace")
            if "\nstep 1:" in text:
                return text
        time.sleep(0.2)
    raise TimeoutError(f"the trainer logged no step within {TRAINER_UP_S + 120:g}s")


def _trainer_fault(run: Run) -> None:
    """The fault is in the trainer itself (a skipped all_reduce, a wrong size): from its first step."""
    _trainer_stepped(run)
    run.fault()


def _kill_trainer_rank(run: Run) -> None:
    """SIGKILL rank 1's process (its pid from the trainer's log) while it sleeps inside step 2."""
    text = _trainer_stepped(run)
    pid = next(int(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith("rank 1: ") and " pid " in ln)
    time.sleep(1.0)
    run.fault()
    os.kill(pid, signal.SIGKILL)


def _no_hang(run_dir: Path) -> list[str]:
    """A failed process group is an error, not a hang: no stacks or collectives were kept."""
    kept = [n for r in range(REPLICAS) for n in (names.stacks(r), names.collectives(r)) if (run_dir / n).exists()]
    return [f"a hang was called ({', '.join(kept)})"] if kept else []


def _trainer_row(
    name: str,
    driver: str,
    inject: Callable[[Run], None],
    kind: str,
    words: tuple[str, ...],
    check: Callable[[Path], list[str]],
) -> Fault:
    """A trainer row: the first cause on rank 0 (the driver's node), of `kind`, its first lines saying `words`."""
    return Fault(
        name, driver, inject, "fail", 0, (kind,), ray=True, words=words, check=check, startup_timeout=TRAINER_UP_S
    )


def _collectives_kept(run_dir: Path) -> list[str]:
    docs = {r: _try(run_dir, names.collectives(r)) for r in range(REPLICAS)}
    return [f"no {names.collectives(r)}" for r, d in docs.items() if not d]


SETUP["judge-never-answers"] = {f"r{r}": {"env": WEDGED_ENV} for r in range(REPLICAS)}
FAULTS += (
    Fault(
        "hang-silent",
        SILENT_HANG,
        lambda r: r.fault(),
        "fail",
        0,
        ("hang",),
        words=("no progress for",),
        check=_stacks_name("wait_for_peer"),
    ),
    Fault(
        "hang-chatter-evidence-stalls",
        CHATTER_HANG,
        lambda r: r.fault(),
        "fail",
        0,
        ("hang",),
        words=("[driver.evidence]", "step 3"),
    ),
    Fault(
        "ray-actor-stuck",
        RAY_STUCK,
        lambda r: r.fault(),
        "fail",
        0,
        ("hang",),
        ray=True,
        check=_both(_stacks_name("load_weights"), _odd_one_out("rank 2, Ray worker")),
    ),
    Fault(
        "judge-never-answers",
        JUDGE_WEDGED,
        _wait_then(lambda _r: None),
        "fail",
        0,
        ("driver_exit",),
        judges=True,
        judge_timeout=3,
        check=lambda run_dir: _judge_named(run_dir, "general"),
    ),
    _trainer_row(
        "trainer-skips-all-reduce",
        _trainer(8, TRAINER_SKIP="1:2"),
        _trainer_fault,
        "hang",
        ("rank 1 never entered all_reduce #4 of default_pg",),
        _collectives_kept,
    ),
    _trainer_row(
        "trainer-sizes-differ",
        _trainer(120, TRAINER_SIZE_MISMATCH="1:2"),
        _trainer_fault,
        "driver_exit",
        ("process group error", "Received data size doesn't match expected size"),
        _no_hang,
    ),
    _trainer_row(
        "trainer-rank-killed",
        _trainer(120, TRAINER_STEP_SLEEP="4"),
        _kill_trainer_rank,
        "driver_exit",
        ("a rank's process died: Rank pid", "its peers failed in all_reduce"),
        _no_hang,
    ),
)

# Restart rows: the driver fails at once (exit 3) each attempt; PROGRESSES first writes a new
# checkpoint file. The fault is the relaunch the caps must refuse (exit REFUSED, attempts/N/refused.json).
REFUSED = 2
FAILS = 'command = ["python", "-c", "raise SystemExit(3)"]'
PROGRESSES = (
    'command = ["python", "-c", "import os, pathlib; a = os.environ[\'GYM_ATTEMPT\']; '
    "(pathlib.Path(os.environ['GYM_CHECKPOINT_DIR']) / ('step-' + a)).write_text(a); raise SystemExit(3)\"]"
)
NO_PROGRESS_CAP = 2
RETRIES_CAP = 2
FAULTS += (
    # The same failure K times in a row: attempt K + 1 is refused.
    Fault(
        "crash-loop",
        FAILS,
        lambda r: r.fault(),
        "fail",
        None,
        ("attempt.refused",),
        words=("max_no_progress_attempts",),
        launch_keys=f"max_no_progress_attempts = {NO_PROGRESS_CAP}",
        refused_at=NO_PROGRESS_CAP + 1,
    ),
    # Progress every attempt (so the no-progress stop of 1 never trips): only the cap stops it.
    Fault(
        "retries-exhausted",
        PROGRESSES,
        lambda r: r.fault(),
        "fail",
        None,
        ("attempt.refused",),
        words=("max_retries",),
        launch_keys=f"max_retries = {RETRIES_CAP}\nmax_no_progress_attempts = 1",
        refused_at=RETRIES_CAP + 2,
    ),
)


# Resume rows (issue 52): the sample ledger across a node lost mid-run and a scheduler's restart.
LEDGER_UP_S = 120.0  # three agents and the trainer's torch import on a loaded 2-core host
LEDGER_SEED = 52  # [driver.ledger] shuffle_seed: every epoch in its own order (the e2e tests' bugs: the file's)


def _kill_driver_node(run: Run) -> None:
    """Every process of the driver's node SIGKILLed while the trainer is between two checkpoints."""
    ledger.wait_mid_interval(run.run_dir, LEDGER_UP_S, alive=lambda: all(p.poll() is None for p in run.procs.values()))
    run.fault()
    orphans.kill_node(run.run_dir, ledger.DRIVER_RANK, sessions=run.sessions(), marks=(str(run.tmp),))


def _ledger_row(loader: str, code: str) -> Fault:
    """The demo trainer's loader with a resume bug, its epochs shuffled: the resumed run exits 0, and the
    audit names the ids it repeated or skipped (and where the gap opened), as the killed attempt's
    ledger predicts."""
    return Fault(
        f"ledger-loader-{loader}",
        ledger.driver_table(loader, LEDGER_SEED),
        _kill_driver_node,
        "fail",
        ledger.DRIVER_RANK,
        (code,),
        trainer_nodes=REPLICAS,
        resumed=True,
        check=lambda run_dir: ledger.run_problems(run_dir, loader, LEDGER_SEED),
    )


FAULTS += (_ledger_row("restarts-epoch", "data.repeated"), _ledger_row("skips-ahead", "data.skipped"))
# The scheduler's endings, on the local Slurm cluster; what the audit's first lines must say.
FAULTS += tuple(
    Fault(
        name,
        "",
        lambda r: r.fault(),
        "fail",
        None,
        (e.kind,),
        words=((f"slurm (the scheduler), {e.kind}",) if e.by_scheduler else ()) + e.words,
        slurm=True,
    )
    for name, e in faults_slurm.ENDINGS.items()
)


# -- one trial ---------------------------------------------------------------------------------


@dataclass
class Trial:
    fault: str
    ok: bool
    exit_codes: list[int | None]
    seconds_to_last_exit: float | None
    records: dict[str, dict[str, str | None]]  # rank -> failure kind/writer, cleanup outcome
    orphans: list[str]
    audit_verdict: str
    audit_names_cause: bool
    problems: list[str]
    ending: str | None = None  # what ended the run beyond the exit codes: a refused attempt, the job's state
    skipped: str | None = None  # why the row did not run here


def run_trial(fault: Fault, base: Path, timeout: float = 90, cluster: faults_slurm.Cluster | None = None) -> Trial:
    if fault.slurm:
        return _slurm_trial(fault, base, cluster)
    root = Path(tempfile.mkdtemp(prefix="f", dir=base))
    uuid = uid(fault.name, "fault")
    spec = root / "run.toml"
    text = small_spec(
        name="faults",
        replicas=REPLICAS,
        trainer_nodes=fault.trainer_nodes,
        driver=fault.driver,
        # Three Ray nodes start in 20 s on a loaded 2-core host.
        startup_timeout=fault.startup_timeout or (60 if fault.ray else 30),
        heartbeat_timeout=HB_TIMEOUT,
        teardown_grace=3.0,
        ray=fault.ray,
        judges=fault.judges,
    )
    text = text.replace("[launch]\n", f"[launch]\n{fault.launch_keys}\n", 1)
    if fault.judge_timeout is not None:
        text = text.replace(JUDGE_TABLES, judge_tables(timeout=fault.judge_timeout))
    if fault.engine:
        python = engine_python()
        if python is None:
            return Trial(fault.name, False, [], None, {}, [], "skipped", False, [], skipped="no vLLM: `make engines`")
        # Random weights fail the canaries (tests/test_vllm_engine_e2e.py): these rows are about the engine.
        text = text.replace(JUDGE_TABLES, vllm_judge_tables(*tiny_model(python), canary=False))
    text = text.replace("[launch.coordination]\n", f"[launch.coordination]\n{fault.coordination}\n", 1)
    spec.write_text(text + (f"\n[launch.preflight]\n{fault.preflight}\n" if fault.preflight else ""))
    run = Run(root, uuid, spec, tmp=Path(tempfile.mkdtemp(prefix="gf", dir="/tmp")))
    problems: list[str] = []
    mounted = fault.needs_root and fullfs.mount_tmpfs(root / "out", "3m") is None
    if fault.needs_root and not mounted:
        return Trial(fault.name, False, [], None, {}, [], "skipped", False, ["needs root for a tmpfs mount"])
    with contextlib.ExitStack() as stack:
        if fault.mounts:
            try:
                fuse_install.ensure_installed()
            except fuse_install.FuseUnavailable as exc:
                return Trial(fault.name, False, [], None, {}, [], "skipped", False, [], skipped=str(exc))
            mnts = [root / f"client{c}" for c in range(max(fault.mounts) + 1)]
            stack.callback(shutil.rmtree, root, ignore_errors=True)  # after the unmount below
            run.clients = stack.enter_context(nfs_clients(root / "out", mnts, dir_ttl=1.0, neg_ttl=1.0))
            run.client_of = fault.mounts
        return _trial_body(fault, run, root, problems, timeout, mounted)


def _trial_body(fault: Fault, run: Run, root: Path, problems: list[str], timeout: float, mounted: bool) -> Trial:
    try:
        ending = None
        if fault.refused_at is not None:
            codes, ending = _relaunch_until_refused(run, fault, problems, timeout)
        elif fault.resumed:
            codes, ending = _killed_then_resumed(run, fault, problems, timeout)
        else:
            if fault.launcher:
                run.start_launcher()
            else:
                prepared = fault.prepare(run) if fault.prepare is not None else {}
                run.start_agents(**{**SETUP.get(fault.name, {}), **prepared})
            try:
                fault.inject(run)
            except (TimeoutError, OSError, subprocess.SubprocessError) as exc:
                problems.append(f"injection: {type(exc).__name__}: {exc}")
                run.fault()
            codes = _wait_exits(_all_procs(run), timeout)
        last = _wait_no_processes(run, timeout)
        seconds = None if last is None else round(last - run.fault_at, 2)
        left = orphans.describe(run_processes(run))
        _kill(run)
        # A resume row's failures are the killed attempt's (the resumed one ends well: only the audit fails it).
        records = _records(run.run_dir / names.attempt_dir(1) if fault.resumed else run.run_dir)
        verdict, unnamed = _audit(run.run_dir, fault)
        names_cause = unnamed is None
        problems += _expectations(fault, codes, seconds, left, verdict, unnamed)
        if fault.check is not None:
            problems += fault.check(run.run_dir)
        trial = Trial(fault.name, not problems, codes, seconds, records, left, verdict, names_cause, problems, ending)
        return trial
    finally:
        _kill(run)
        for holder in run.holders:
            holder.kill()
            holder.wait()
        if mounted:
            fullfs.unmount(root / "out")
        if not run.clients:  # else after the clients' unmount (run_trial)
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(run.tmp or root, ignore_errors=True)


def _expectations(
    fault: Fault, codes: list[int | None], seconds: float | None, left: list[str], verdict: str, unnamed: str | None
) -> list[str]:
    """What the row's model asks of every trial: the audit's verdict or cause, no orphans, the exits."""
    problems = []
    if fault.expect == "pass":
        if verdict != "pass":
            problems.append(f"audit {verdict}, expected pass")
    elif unnamed is not None:
        said = "|".join(fault.kinds) + "".join(f" + {w!r}" for w in fault.words)
        problems.append(f"audit does not name rank {fault.rank} / {said} under its verdict: {unnamed}")
    if left:
        problems.append(f"{len(left)} orphan(s)")
    if seconds is None:
        problems.append("processes still ran at the timeout")
    if fault.refused_at is not None:
        if any(c != REFUSED for c in codes):
            problems.append(f"exit codes {codes}, expected {REFUSED} from every agent of the refused attempt")
    elif fault.resumed:
        if any(c != 0 for c in codes):
            problems.append(f"exit codes {codes}, expected 0 from every agent of the resumed attempt")
    elif fault.expect == "fail" and any(c in (None, 0) for c in codes):
        problems.append(f"exit codes {codes}")
    if fault.expect == "pass" and any(c not in (0, 2) for c in codes):
        problems.append(f"exit codes {codes}")
    return problems


def _relaunch_until_refused(
    run: Run, fault: Fault, problems: list[str], timeout: float
) -> tuple[list[int | None], str | None]:
    """Relaunch the run after each failure as a scheduler restarts a job (GYM_RESUME=1 from the
    second launch on, a new GYM_ATTEMPT_TOKEN each time) until its agents refuse an attempt, at most
    one launch past the expected one. The fault is the launch the caps must refuse; returns that
    launch's exit codes and what refused it."""
    assert fault.refused_at is not None
    codes: list[int | None] = []
    for n in range(1, fault.refused_at + 2):
        env = {ResumeEnv.TOKEN: f"{run.uuid}-launch-{n}", **({ResumeEnv.RESUME: "1"} if n > 1 else {})}
        run.extra += run.procs.values()  # earlier launches' agents stay in the orphan search
        run.procs = {}
        if n == fault.refused_at:
            run.fault()
        run.start_agents(**{f"r{r}": {"env": env} for r in range(REPLICAS)})
        codes = _wait_exits(list(run.procs.values()), timeout)
        refused = _try(run.run_dir, names.attempt_refused(n))
        if refused is None and REFUSED not in codes:
            if any(c != 1 for c in codes):
                problems.append(f"attempt {n}: exit codes {codes}, expected 1 from each (the driver failed)")
            # A scheduler restarts a job once it has ended: every process of the attempt is gone.
            _wait_no_processes(run, timeout)
            continue
        if n != fault.refused_at:
            problems.append(f"attempt {n} refused, expected attempt {fault.refused_at}")
            run.fault()
        if refused is None:
            problems.append(f"{names.attempt_refused(n)} missing")
            return codes, f"attempt {n} refused without a record"
        if names.attempt_claim(n) in _listing(run.run_dir, names.attempt_dir(n)):
            problems.append(f"the refused attempt {n} has a claim")
        problems += _invalid_artifacts(run.run_dir)
        return codes, f"{names.attempt_refused(n)}: {str(refused.get('reason', '')).split(':', 1)[0]}"
    problems.append(f"no attempt refused up to attempt {fault.refused_at + 1}")
    return codes, None


def _killed_then_resumed(
    run: Run, fault: Fault, problems: list[str], timeout: float
) -> tuple[list[int | None], str | None]:
    """Attempt 1 ended by the fault; once every process of it is gone, the run is relaunched as a
    scheduler restarts a job (GYM_RESUME=1, a new GYM_ATTEMPT_TOKEN). Returns attempt 2's exit codes."""
    first = {ResumeEnv.TOKEN: f"{run.uuid}-launch-1"}
    run.start_agents(**{f"r{r}": {"env": first} for r in range(REPLICAS)})
    try:
        fault.inject(run)
    except (TimeoutError, OSError) as exc:
        problems.append(f"injection: {type(exc).__name__}: {exc}")
        run.fault()
        return _wait_exits(list(run.procs.values()), timeout), None
    ended = _wait_exits(list(run.procs.values()), timeout)
    if _wait_no_processes(run, timeout) is None:
        problems.append("attempt 1's processes still ran at the timeout")
    if any(c in (None, 0) for c in ended):
        problems.append(f"attempt 1: exit codes {ended}, expected a failure from each (a node lost)")
    run.extra += run.procs.values()  # attempt 1's agents stay in the orphan search
    again = {ResumeEnv.TOKEN: f"{run.uuid}-launch-2", ResumeEnv.RESUME: "1"}
    run.procs = {}
    run.start_agents(**{f"r{r}": {"env": again} for r in range(REPLICAS)})
    codes = _wait_exits(list(run.procs.values()), timeout)
    try:
        k = ledger.killed(run.run_dir)
    except (OSError, ValueError) as exc:
        problems.append(f"attempt 1's ledger: {exc}")
        return codes, None
    return codes, f"resumed from checkpoint {k.checkpoint} (attempt 1 killed at step {k.last_step})"


def _slurm_trial(fault: Fault, base: Path, cluster: faults_slurm.Cluster | None) -> Trial:
    """A Slurm row on the local cluster (bench/faults_slurm.py), judged by the same model: the
    job's exit code stands for the agents' (they are the scheduler's children, not ours)."""
    if cluster is None:
        return Trial(fault.name, False, [], None, {}, [], "skipped", False, [], skipped="no Slurm cluster given")
    try:
        out = faults_slurm.run(fault.name, base, cluster)
    except (faults_slurm.RowError, OSError, subprocess.SubprocessError) as exc:
        return Trial(fault.name, False, [], None, {}, [], "error", False, [str(exc)])
    try:
        verdict, unnamed = _audit(out.run_dir, fault)
        problems = out.problems + _expectations(
            fault, out.exit_codes, out.seconds_to_last_exit, out.orphans, verdict, unnamed
        )
        records = _records(out.run_dir)
    finally:
        shutil.rmtree(out.run_dir.parents[2], ignore_errors=True)
    return Trial(
        fault.name,
        not problems,
        out.exit_codes,
        out.seconds_to_last_exit,
        records,
        out.orphans,
        verdict,
        unnamed is None,
        problems,
        out.ending,
    )


def _listing(run_dir: Path, rel: str) -> set[str]:
    try:
        return {f"{rel}/{leaf.name}" for leaf in (run_dir / rel).iterdir()}
    except OSError:
        return set()


def _invalid_artifacts(run_dir: Path) -> list[str]:
    """Every artifact of the run against its schema (tests.harness's check), as problems."""
    try:
        assert_artifacts_valid(run_dir)
    except (AssertionError, OSError, ValueError) as exc:
        return [f"artifacts: {exc}"]
    return []


def _all_procs(run: Run) -> list[subprocess.Popen]:
    return ([run.launcher] if run.launcher else []) + list(run.procs.values()) + run.extra


def _wait_exits(procs: list[subprocess.Popen], timeout: float) -> list[int | None]:
    end = time.monotonic() + timeout
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def _wait_no_processes(run: Run, timeout: float) -> float | None:
    left = orphans.wait_gone(run.run_dir, timeout, sessions=run.sessions(), marks=(str(run.tmp),))
    return None if left else time.monotonic()


def _kill(run: Run) -> None:
    orphans.kill_all(run_processes(run))


def _records(run_dir: Path) -> dict[str, dict[str, str | None]]:
    out: dict[str, dict[str, str | None]] = {}
    for r in range(REPLICAS):
        f = _try(run_dir, names.failure(r))
        c = _try(run_dir, names.cleanup(r))
        out[str(r)] = {
            "failure": f"{f['kind']}/{f['writer']}" if f else None,
            "cleanup": f"{c['outcome']}/{c['writer']}{'' if not c['leftover_pids'] else ' LEFTOVER'}" if c else None,
        }
    return out


def _try(run_dir: Path, rel: str) -> dict | None:
    try:
        return read(run_dir, rel)
    except (OSError, ValueError):
        return None


def _audit(run_dir: Path, fault: Fault) -> tuple[str, str | None]:
    """The audit's verdict, and what its first lines fail to say of the row's ending (None: all)."""
    done = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, check=False)
    verdict = "pass" if done.returncode == 0 else "fail" if done.returncode == 1 else f"error {done.returncode}"
    if fault.expect == "pass":
        return verdict, None if verdict == "pass" else f"audit {verdict}, expected pass"
    return verdict, audit_head.first_cause_problem(done.stdout, rank=fault.rank, kinds=fault.kinds, words=fault.words)


# -- the matrix --------------------------------------------------------------------------------


def run_matrix(
    faults: list[Fault], trials: int, base: Path, out: Callable[[str], None] = print, slurm_trials: int = 1
) -> list[Trial]:
    """Every row `trials` times (a Slurm row `slurm_trials` times, on a local cluster started
    for them after the other rows, or skipped with the reason when it cannot run here)."""
    results = []

    def row(fault: Fault, n: int, cluster: faults_slurm.Cluster | None = None) -> None:
        for i in range(n):
            t = run_trial(fault, base, cluster=cluster)
            said = "ok" if t.ok else f"skipped: {t.skipped}" if t.skipped else "FAIL: " + "; ".join(t.problems)
            out(f"  {fault.name} #{i + 1}: {said}")
            results.append(t)

    for fault in faults:
        if not fault.slurm:
            row(fault, trials)
    on_slurm = [f for f in faults if f.slurm]
    if on_slurm:
        with faults_slurm.local_cluster() as cluster:
            for fault in on_slurm:
                if isinstance(cluster, str):
                    out(f"  {fault.name}: skipped: {cluster}")
                    results.append(Trial(fault.name, False, [], None, {}, [], "skipped", False, [], skipped=cluster))
                else:
                    row(fault, slurm_trials, cluster)
    return results


COLUMNS = (
    "fault",
    "passed",
    "exit codes",
    "fault → last exit (s)",
    "failure records (rank: kind/writer)",
    "ending",
    "orphans",
    "audit names cause",
)


def table_rows(results: list[Trial]) -> list[list[str]]:
    """One row per fault (COLUMNS): seconds the slowest trial's; codes, records, ending the last's."""
    rows: list[list[str]] = []
    by: dict[str, list[Trial]] = {}
    for t in results:
        by.setdefault(t.fault, []).append(t)
    for name, ts in by.items():
        if all(t.skipped for t in ts):
            rows.append([name, f"skipped: {ts[-1].skipped}", "", "", "", "", "", ""])
            continue
        ts = [t for t in ts if not t.skipped]
        secs = [t.seconds_to_last_exit for t in ts if t.seconds_to_last_exit is not None]
        recs = ts[-1].records
        rec_txt = ", ".join(f"{r}: {v['failure'] or '-'}" for r, v in recs.items())
        rows.append(
            [
                name,
                f"{sum(t.ok for t in ts)}/{len(ts)}",
                str(ts[-1].exit_codes),
                str(max(secs)) if secs else "-",
                rec_txt,
                ts[-1].ending or "-",
                str(sum(len(t.orphans) for t in ts)),
                f"{sum(t.audit_names_cause for t in ts)}/{len(ts)}",
            ]
        )
    return rows


def table(results: list[Trial]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    return "\n".join(lines)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument(
        "--slurm-trials", type=int, default=1, help="trials of each Slurm row (a minute or more each; default 1)"
    )
    ap.add_argument("--only", nargs="*", metavar="FAULT", help="fault names (default: all)")
    ap.add_argument("--json", action="store_true", help="print every trial as JSON instead of the table")
    ap.add_argument("--list", action="store_true", help="list the faults and exit")
    ap.add_argument(
        "--record",
        metavar="FILE",
        help="also write the table with date, commit and machine to FILE (`make faults`: measurements/faults.json, "
        "the documentation's source)",
    )
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(f.name for f in FAULTS))
        return 0
    known = {f.name: f for f in FAULTS}
    unknown = [n for n in args.only or () if n not in known]
    if unknown:
        print(f"faults: unknown fault(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    chosen = [known[n] for n in args.only] if args.only else list(FAULTS)
    # SIGTERM (a user's `kill`, a CI's cancel) unwinds like Ctrl-C: each trial's `finally` ends its agents.
    signal.signal(signal.SIGTERM, _terminated)
    started = time.time()
    base = Path(tempfile.mkdtemp(prefix="gym-faults-", dir="/tmp"))
    progress = (lambda _line: None) if args.json else print
    try:
        results = run_matrix(chosen, args.trials, base, progress, args.slurm_trials)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.record:
        title = f"make faults: {args.trials} trials per fault, the Slurm rows {args.slurm_trials}"
        command = shlex.join(["python", "-m", "bench.faults", *(sys.argv[1:] if argv is None else argv)])
        doc = measurement.record(title, command, started, columns=list(COLUMNS), rows=table_rows(results))
        measurement.write(Path(args.record), doc)
    if args.json:
        print(json.dumps([asdict(t) for t in results], indent=2))
    else:
        print(table(results))
    for t in results:
        if t.skipped:
            print(f"faults: {t.fault} skipped: {t.skipped}", file=sys.stderr)
    return 0 if all(t.ok or t.skipped for t in results) else 1


if __name__ == "__main__":
    sys.exit(main())
