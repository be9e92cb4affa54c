"""Starting this node's Ray (head or worker) and checking the live layout against the plan.

Several Ray nodes can share one host (tests, `gym-launch local`) when each has its own loopback
address, its own short local temp dir and its own ports: GCS and raylet listen on every
interface, so distinct addresses alone do not separate ports (docs/runtime-notes.md, "Ray").
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.ground.waits import Progress, poll_until
from agent.proc import ports, signals, tempdirs
from agent.proc.procgroup import sweep_session
from agent.ray._probe import PROGRESS_MARK
from schemas import credentials, port_grid
from schemas.errors import EXIT_RUN_FAILED, GymError
from schemas.tracebacks import last_traceback

__all__ = [
    "BLOCK_USED",
    "HEAD_ONLY_FLAGS",
    "LayoutCheck",
    "PORT_BLOCK",
    "PROBE_CONNECT_S",
    "PortsError",
    "RayNodeSpec",
    "RayPorts",
    "STARTED_FILE",
    "WORKER_PORT_SPAN",
    "compare_layout",
    "dashboard_missing",
    "forget_started",
    "hold_fixed_block",
    "listening",
    "pick_ports",
    "probe_live_nodes",
    "probe_progress",
    "ray_client_installed",
    "ray_env",
    "ray_executable",
    "ray_start_command",
    "ray_is_up",
    "ray_start_argv",
    "ray_started",
    "short_temp_dir",
    "traceback_exception",
    "worker_extra_args",
]

WORKER_PORT_SPAN = 40


class PortsError(GymError):
    """No free port (block) could be allocated on this host: the run fails as `ports` (exit 1)."""

    exit_code = EXIT_RUN_FAILED


@dataclass(frozen=True)
class RayPorts:
    gcs: int
    node_manager: int
    object_manager: int
    dashboard_agent_listen: int
    dashboard_agent_grpc: int
    metrics_export: int
    runtime_env_agent: int
    min_worker: int
    max_worker: int

    @property
    def dashboard(self) -> int:
        """The block's spare port, between the singles and the worker range (checked free with them).
        Bound by the head even with the dashboard off (Ray's minimal API server)."""
        return self.min_worker - 1

    @property
    def spare(self) -> int:
        """The block's last port: Ray never binds it; a trainer's torch.distributed rendezvous may
        (GYM_TRAINER_RENDEZVOUS). Checked free with the others and held with the block."""
        return self.gcs + PORT_BLOCK - 1

    @property
    def client_server(self) -> int:
        """The head's Ray Client server, after the worker range: Ray's fixed default (10001) would
        be shared by every head on a host, and the second one's `ray start --block` ends the node."""
        return self.max_worker + 1


PORT_BLOCK = ports.PORT_BLOCK  # ports per node: 7 singles, the dashboard, the worker range, the client server
BLOCK_USED = 8 + WORKER_PORT_SPAN + 2  # ... and the spare port (RayPorts.spare)


def pick_ports(run_key: str, slot: int, slots: int, ephemeral: tuple[int, int] | None = None) -> RayPorts:
    """A free port block for one start of one node.

    Every agent of a run hashes the same `run_key` to the same starting block and offsets it by
    its `slot` (rank and attempt): replicas sharing a host then never pick each other's blocks,
    even before Ray has bound them. A block another run already uses is skipped in strides of
    `slots`, which keeps this run's slots apart. Ray exiting at once (another process won a race)
    is still detected by the caller, which retries with its next slot.

    The block is held (agent.proc.ports) from this check until Ray has bound it and after:
    another agent on this host whose run hashes to the same block skips it instead of racing
    this node's Ray for it. A new pick by this process releases the block of its last one."""
    # If the ephemeral range covers every block, use them all: the retry on an early exit remains.
    order = ports.walk(run_key, slot, slots, ephemeral)
    base = ports.hold_block("ray", order, _block_free)
    if base is None:
        raise PortsError("no free block of ports for Ray outside the ephemeral port range")
    return _ports_at(base)


def _block_free(base: int) -> bool:
    return all(_ray_can_bind(p) for p in range(base, base + BLOCK_USED))


def _ray_can_bind(port: int) -> bool:
    """Ray binds every port with SO_REUSEADDR, so a port left in TIME_WAIT by an ended node is
    free to it: the fixed head block, started again after Ray's registration wait ended its first
    start, was refused as taken for those 60 s (a loaded `make test` saw it)."""
    return ports.free(port, reuse_addr=True)


def hold_fixed_block(base: int, why: str) -> RayPorts:
    """The port block the job fixed for this node's Ray (the head's, exported to the job as its
    host:port, seed 001), held as pick_ports holds a chosen one. There is no other block to try: its
    address is already in every node's environment. ``why`` names where the block came from."""
    if not port_grid.on_grid(base):
        raise PortsError(f"{why}: port {base} does not start a block of the agents' port grid")
    if ports.hold_block("ray", [base], _block_free) is None:
        taken = [p for p in range(base, base + BLOCK_USED) if not _ray_can_bind(p)]
        held = f"port(s) {', '.join(map(str, taken[:5]))} taken" if taken else "held by another agent on this host"
        raise PortsError(f"{why}: its port block {base}-{base + PORT_BLOCK - 1} is {held} on this node")
    return _ports_at(base)


def _ports_at(base: int) -> RayPorts:
    return RayPorts(
        gcs=base,
        node_manager=base + 1,
        object_manager=base + 2,
        dashboard_agent_listen=base + 3,
        dashboard_agent_grpc=base + 4,
        metrics_export=base + 5,
        runtime_env_agent=base + 6,
        min_worker=base + 8,
        max_worker=base + 8 + WORKER_PORT_SPAN - 1,
    )


def connect_problem(address: str, port: int, timeout: float) -> str | None:
    """None when ``address:port`` accepts a TCP connection within ``timeout``, else why not."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def listening(address: str, port: int) -> bool:
    return connect_problem(address, port, 0.5) is None


def ray_is_up(address: str, ports: RayPorts, is_head: bool) -> bool:
    """Every port this Ray node binds when healthy is accepting: GCS (head), raylet, object
    manager and the runtime-env agent, whose failure would make the raylet exit later."""
    wanted = [ports.node_manager, ports.object_manager, ports.runtime_env_agent]
    return all(listening(address, p) for p in ([ports.gcs] if is_head else []) + wanted)


# `ray start` writes this file in its temp dir once its node registered with the GCS (Ray's own
# `write_ray_address`); until then the node may still die of Ray's fixed 30 s registration wait.
STARTED_FILE = "ray_current_cluster"
# A readiness probe that has read no live nodes this long after its start is started again.
# Importing Ray and connecting takes a probe 5-20 s on a loaded 2-core host.
PROBE_CONNECT_S = 60.0


def ray_started(temp_dir: str) -> bool:
    """`ray start` finished starting this node: its raylet registered with the GCS."""
    return os.path.exists(os.path.join(temp_dir, STARTED_FILE))


def forget_started(temp_dir: str) -> None:
    """Before a (re)start: an earlier attempt's file must not vouch for this one."""
    try:
        os.unlink(os.path.join(temp_dir, STARTED_FILE))
    except FileNotFoundError:
        pass


def ray_executable() -> str:
    local = os.path.join(os.path.dirname(sys.executable), "ray")
    return local if os.path.exists(local) else (shutil.which("ray") or "ray")


def ray_start_command() -> list[str]:
    """How this node runs `ray start`: through the lean entry (agent/ray/_lean_start.py, ~2.5 CPU s
    less per node) where Ray is installed beside this interpreter, else the `ray` found on PATH."""
    if os.path.exists(os.path.join(os.path.dirname(sys.executable), "ray")):
        return [sys.executable, "-m", "agent.ray._lean_start"]
    return [ray_executable()]


HEAD_CONNECT_S = 2.0  # one question to the head's GCS; the wait as a whole is the startup deadline's


def head_answers(address: str, timeout: float = HEAD_CONNECT_S) -> str | None:
    """Ask the Ray head at ``address`` (host:port of its GCS) from this node: None when its GCS
    accepts a connection, else why not. Seed 001's workers ask with `ray status`; that CLI costs
    1.7 CPU s and 4 s on an idle 2-core machine per worker, all at once while a run starts, while
    the head's agent publishes its address only after its own ports answered: what is left to
    prove is that this node reaches it."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return f"ValueError: no port in {address!r}"
    return connect_problem(host, int(port), timeout)


def ray_client_installed() -> bool:
    """Whether this node's `ray start` can serve Ray Client (its grpcio, `ray[client]`). A plain
    `pip install ray` has none, and Ray refuses a client-server port then; with it, Ray would bind
    its one-per-host default unless given ours. Located, not imported (as Ray's own check imports it)
    where Ray runs beside this interpreter; an image's `ray` elsewhere keeps the port (`ray[default]`
    brings grpcio)."""
    if ray_start_command()[0] != sys.executable:
        return True
    return importlib.util.find_spec("grpc") is not None


def traceback_exception(text: str) -> str | None:
    """The exception line (`ValueError: ...`) of the last Python traceback `text` ends in, or None:
    where a `ray start` that raised says why it ended."""
    lines = text.splitlines()
    span = last_traceback(lines)
    if span is None or span[1] >= len(lines):
        return None
    return lines[span[1]].strip()


def dashboard_missing(timeout: float = 60.0) -> str | None:
    """Why Ray's dashboard cannot start here (a minimal `ray` without `ray[default]`'s packages),
    or None. Asked of a child, as Ray itself asks it, so that Ray is never imported in the agent."""
    probe = "import ray.dashboard.optional_deps"
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None  # undecided: let `ray start` try and report
    if proc.returncode == 0:
        return None
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def short_temp_dir() -> str:
    """AF_UNIX paths are limited to 107 bytes: keep Ray's temp dir short and on local disk."""
    return tempdirs.make(tempdirs.RAY_PREFIX)


@dataclass(frozen=True)
class RayNodeSpec:
    is_head: bool
    address: str
    head_address: str
    ports: RayPorts
    num_gpus: int
    num_cpus: int | None
    object_store_memory: int | None
    temp_dir: str
    resources: Mapping[str, float]
    extra_args: Sequence[str]
    dashboard: bool = False
    # The head's Ray Client server (ray:// addresses): only where Ray can run it (`ray_client_installed`).
    client_server: bool = True


# Flags only `ray start --head` accepts; every one takes a value (tests/test_ray_ports.py checks both
# against the installed Ray's own `ray start --help`).
HEAD_ONLY_FLAGS = (
    "--port",
    "--redis-shard-ports",
    "--include-dashboard",
    "--dashboard-port",
    "--dashboard-host",
    "--ray-client-server-port",
)


def worker_extra_args(extra: Sequence[str]) -> list[str]:
    """``extra`` without the head-only flags, in both spellings: ``--flag=value`` and ``--flag value``."""
    out: list[str] = []
    skip_value = False
    for arg in extra:
        if skip_value:
            skip_value = False
            if not arg.startswith("-"):
                continue  # the value of the head-only flag before it
        flag, eq, _ = arg.partition("=")
        if flag in HEAD_ONLY_FLAGS:
            skip_value = not eq
            continue
        out.append(arg)
    return out


def ray_start_argv(spec: RayNodeSpec, image_ray: bool = False) -> list[str]:
    """``image_ray``: the `ray` on the PATH of the service's container (ray.container), not this agent's."""
    p = spec.ports
    argv = [
        *(["ray"] if image_ray else ray_start_command()),
        "start",
        "--block",
        "--disable-usage-stats",
        f"--node-ip-address={spec.address}",
        f"--num-gpus={spec.num_gpus}",
        f"--node-manager-port={p.node_manager}",
        f"--object-manager-port={p.object_manager}",
        f"--dashboard-agent-listen-port={p.dashboard_agent_listen}",
        f"--dashboard-agent-grpc-port={p.dashboard_agent_grpc}",
        f"--metrics-export-port={p.metrics_export}",
        f"--runtime-env-agent-port={p.runtime_env_agent}",
        f"--min-worker-port={p.min_worker}",
        f"--max-worker-port={p.max_worker}",
        # Every node needs its own temp dir on a shared host, workers included: without it a
        # worker falls back to the default and its raylet never registers.
        f"--temp-dir={spec.temp_dir}",
    ]
    if spec.is_head:
        argv += ["--head", f"--port={p.gcs}", f"--dashboard-port={p.dashboard}"]
        if spec.client_server:
            argv.append(f"--ray-client-server-port={p.client_server}")
        if spec.dashboard:
            argv += ["--include-dashboard=true", f"--dashboard-host={spec.address}"]
        else:
            argv.append("--include-dashboard=false")
    else:
        argv += [f"--address={spec.head_address}"]
    if spec.num_cpus is not None:
        argv.append(f"--num-cpus={spec.num_cpus}")
    if spec.object_store_memory is not None:
        argv.append(f"--object-store-memory={spec.object_store_memory}")
    if spec.resources:
        argv.append("--resources=" + json.dumps(dict(spec.resources), sort_keys=True))
    # Flags only a head accepts are dropped from workers (as the pools seed does).
    extra = list(spec.extra_args) if spec.is_head else worker_extra_args(spec.extra_args)
    return argv + credentials.substitute(extra, os.environ)  # references: values only in the exec


def ray_env(base: Mapping[str, str], cuda_visible_devices: str, temp_dir: str) -> dict[str, str]:
    env = dict(base)
    env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    env["RAY_TMPDIR"] = temp_dir
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


@dataclass(frozen=True)
class LayoutCheck:
    expected: dict[str, float]
    actual: dict[str, float]
    live_nodes: list[Mapping[str, Any]]
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems


def compare_layout(expected: Mapping[str, float], live_nodes: Sequence[Mapping[str, Any]]) -> LayoutCheck:
    """Exact GPUs per live node address (not the sum); two live nodes on one address is an error."""
    problems: list[str] = []
    actual: dict[str, float] = {}
    for node in live_nodes:
        addr = str(node["address"])
        if addr in actual:
            problems.append(f"two live Ray nodes share address {addr}")
        actual[addr] = actual.get(addr, 0.0) + float(node["gpus"])
    for addr, gpus in expected.items():
        if addr not in actual:
            problems.append(f"no live Ray node at planned address {addr}")
        elif actual[addr] != gpus:
            problems.append(f"Ray node {addr} advertises {actual[addr]:g} GPUs, the plan says {gpus:g}")
    for addr in actual:
        if addr not in expected:
            problems.append(f"unplanned live Ray node at {addr}")
    return LayoutCheck(dict(expected), actual, list(live_nodes), problems)


def probe_progress(err: bytes) -> str | None:
    """The probe's last "live nodes a/b" line, as "a/b"."""
    mark = PROGRESS_MARK.encode()
    at = err.rfind(mark)
    if at < 0:
        return None
    return err[at + len(mark) :].split(b"\n", 1)[0].decode(errors="replace").strip() or None


def probe_live_nodes(
    gcs_address: str,
    node_ip: str,
    expect: int,
    timeout: float,
    log_fd: int | None,
    abort: Callable[[], bool],
    progress: Callable[[str], None] | None = None,
    progress_every: float = 30.0,
    connect_s: float = PROBE_CONNECT_S,
) -> list[dict[str, Any]]:
    """Ask Ray for its live nodes from a short-lived child (keeps Ray out of the agent process).

    Polled, not waited on: a failure elsewhere (`abort`) must not wait for the probe's timeout.
    A probe that has read no live nodes within `connect_s` (doubled at each new start) is started
    again: one that met the GCS frozen (stopped, swapping) can stay in its connect after the GCS is
    back (seen: 120 s, until startup_timeout), while a new one connects at once."""
    deadline = time.monotonic() + timeout
    started = 0
    while True:
        started += 1
        left = deadline - time.monotonic()
        argv = [
            sys.executable,
            "-m",
            "agent.ray._probe",
            "--address",
            gcs_address,
            "--node-ip",
            node_ip,
            "--expect",
            str(expect),
            "--timeout",
            str(max(1.0, left - 5)),
        ]
        window = connect_s * 2 ** (started - 1)  # doubled each time: a host too slow for it still gets through
        ended = _run_probe(argv, left, abort, progress, progress_every, window)
        if ended is not None:
            break
        again = (
            f"Ray probe read no live nodes within {window:g} s of its start {started} "
            f"(still connecting to the GCS at {gcs_address}); starting it again\n"
        )
        if log_fd is not None:
            os.write(log_fd, credentials.redact_text(again).encode())
        if progress is not None:
            progress(again.rstrip())
    returncode, stdout, stderr = ended
    stderr = "".join(ln for ln in stderr.splitlines(keepends=True) if not ln.startswith(PROGRESS_MARK))
    if log_fd is not None and stderr:
        os.write(log_fd, credentials.redact_text(stderr).encode()[-20000:])
    if returncode != 0:
        raise RuntimeError(f"Ray probe failed (exit {returncode}): {stderr.strip()[-500:]}")
    nodes: list[dict[str, Any]] = json.loads(stdout.strip().splitlines()[-1])
    return nodes


def _run_probe(
    argv: list[str],
    timeout: float,
    abort: Callable[[], bool],
    progress: Callable[[str], None] | None,
    progress_every: float,
    connect_s: float,
) -> tuple[int, str, str] | None:
    """The probe child in its own session, polled until it ends; an abort or the timeout raises.
    Its session is swept either way. Returns its exit code, stdout and stderr, or None when it
    read no live nodes within `connect_s` (and time is left to start it again)."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        t0 = time.monotonic()
        with signals.unblocked():
            proc = subprocess.Popen(argv, stdout=out_f, stderr=err_f, start_new_session=True)
        try:

            def seen() -> str | None:
                err_f.flush()
                return probe_progress(
                    os.pread(err_f.fileno(), 1 << 16, max(0, os.fstat(err_f.fileno()).st_size - (1 << 16)))
                )

            def describe(left: float) -> str:
                now = seen()
                return f"Ray: {now} nodes; {left:.0f} s left" if now else f"Ray: connecting; {left:.0f} s left"

            state = {"connected": False, "stuck": False}

            def stuck() -> bool:
                # Checked once the window is over, while enough time is left for a new probe.
                now = time.monotonic()
                if state["connected"] or now - t0 < connect_s or t0 + timeout - now < connect_s / 2:
                    return False
                state["connected"] = seen() is not None
                state["stuck"] = not state["connected"]
                return state["stuck"]

            poll_until(
                lambda: abort() or proc.poll() is not None or stuck(),
                deadline=t0 + timeout,
                interval=0.1,
                progress=Progress(describe, progress, progress_every) if progress else None,
            )
            if proc.poll() is None:
                if state["stuck"] and not abort():
                    return None
                raise RuntimeError(f"Ray probe {'interrupted' if abort() else f'timed out after {timeout:g}s'}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            sweep_session(proc.pid)
        out_f.seek(0)
        err_f.seek(0)
        return proc.returncode, out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace")
