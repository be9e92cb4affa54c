"""A real Slurm 22.05 cluster on this one machine: controller, 3 GPU nodes, 1 CPU node.

    python -m tests.slurm.cluster up [DIR]      install when missing, start, wait until idle
    python -m tests.slurm.cluster status [DIR]  daemons and `sinfo`
    python -m tests.slurm.cluster down [DIR]    stop everything by pid, remove DIR

How it works:
- Debian's `slurmctld slurmd slurm-client munge` are installed when missing (root only; a
  temporary policy-rc.d keeps the packages from starting daemons: there is no init system).
- Everything lives in DIR: slurm.conf, gres.conf, a hosts file, state, spool, logs, pid files,
  a private munged (own key and socket: other clusters on the machine are not touched) and the fake
  GPUs (inert character devices: gres needs `File=` naming devices to set CUDA_VISIBLE_DEVICES).
- Each daemon runs in its own UTS + mount namespace (`unshare`): its own hostname (gymctl, n1..n3,
  c1), and DIR/hosts bind-mounted over /etc/hosts inside that namespace only, mapping every name
  to its own loopback address 127.0.10.x. Jobs inherit the namespace: `hostname` and
  `hostname --ip-address` differ per node. The filesystem is otherwise the host's, so any
  directory (a pytest tmp dir) is shared by all nodes, as a cluster filesystem would be.
- The UTS namespace is also how a node's processes are found again: everything a job started on
  n1 (slurmstepd, tasks, Ray, judges) shares n1's namespace. `down` stops the daemons by their
  recorded pids, then kills whatever is left in their namespaces, then munged; never by name.
  The bind mounts exist only in those namespaces and vanish with their last process.
- DIR/state.json is written after every start, so `down` also works after a partial `up`.

Beside this module: layout.py (the shape and the files, pure), procs.py (pids and namespaces),
install.py (Debian packages), errors.py. Standard library only: the CLI must run before the
project's venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ClusterError, SlurmUnavailable
from .install import SYSTEM_PATH, ensure_installed, which
from .install import unavailable_reason as unavailable_reason  # re-exported: the fixture's skip decision
from .layout import DEFAULT_LAYOUT, Layout, render_gres_conf, render_hosts, render_slurm_conf
from .procs import alive, ancestors, cmdline, namespace_members, stop_pid, sweep_namespace, uts_namespace

DEFAULT_DIR = Path("/tmp/gym-slurm")
# Below Ray's port blocks (agent/ray/node.py PORT_FLOOR = 10000) and the kernel's ephemeral range,
# so nothing the agents start can take a Slurm daemon's port.
PORT_RANGE = (6800, 9900)
UP_TIMEOUT = 60.0
CLIENT_TIMEOUT = 30.0
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
Log = Callable[[str], None]


# --- state ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Daemon:
    name: str  # munged, slurmctld, or a node name
    pid: int
    namespace: str | None  # UTS namespace of a Slurm daemon; None for munged


def _state_path(d: Path) -> Path:
    return d / "state.json"


def read_state(d: Path) -> list[Daemon]:
    try:
        doc = json.loads(_state_path(d).read_text())
        return [Daemon(x["name"], int(x["pid"]), x.get("namespace")) for x in doc["daemons"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _record(d: Path, daemon: Daemon) -> None:
    daemons = [x for x in read_state(d) if x.name != daemon.name] + [daemon]
    tmp = _state_path(d).with_suffix(".tmp")
    tmp.write_text(json.dumps({"daemons": [x.__dict__ for x in daemons]}, indent=1))
    os.replace(tmp, _state_path(d))


def _ours(daemon: Daemon, d: Path) -> bool:
    """The recorded pid still runs one of this cluster's daemons (pids can be reused)."""
    return alive(daemon.pid) and str(d) in cmdline(daemon.pid)


# --- the running cluster -------------------------------------------------------------------


def _parse_kv(text: str) -> dict[str, str]:
    """`scontrol show ... -o` output: Key=Value pairs separated by spaces (values without spaces
    except a few free-text fields, which are not needed here)."""
    return dict(re.findall(r"(\w[\w:/.]*)=(\S*)", text))


@dataclass(frozen=True)
class Cluster:
    """A running cluster, for tests: `sbatch` a script, `wait_job`, read `job`/`partition`/`queue`,
    and `node_processes` to check that a job left nothing behind on a node."""

    dir: Path
    layout: Layout

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Our environment for client calls: SLURM_CONF points here; a surrounding job's SLURM_*
        variables (a session started inside an allocation) must not leak into submissions."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = env.get("PATH", "") + os.pathsep + SYSTEM_PATH
        return {**env, **(extra or {})}

    def run(self, argv: Sequence[str], timeout: float = CLIENT_TIMEOUT, check: bool = True) -> str:
        """A client call, bounded: clients hang while the controller is down."""
        try:
            r = subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"`{' '.join(argv)}` did not answer within {timeout:.0f}s") from None
        if check and r.returncode != 0:
            raise ClusterError(f"`{' '.join(argv)}` failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
        return r.stdout

    def sbatch(self, script: Path, *args: str) -> int:
        out = self.run(["sbatch", "--parsable", *args, str(script)])
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        return _parse_kv(self.run(["scontrol", "show", "job", "-o", str(job_id)]))

    def wait_job(self, job_id: int, timeout: float) -> dict[str, str]:
        """Until the job reaches a terminal state; on timeout it is cancelled and this raises."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            info = self.job(job_id)
            if info.get("JobState") in TERMINAL_STATES:
                return info
            time.sleep(0.5)
        self.run(["scancel", str(job_id)], check=False)
        raise ClusterError(f"job {job_id} did not finish within {timeout:.0f}s (cancelled): {self.job(job_id)}")

    def queue(self) -> list[str]:
        """Ids of jobs pending, running or completing (squeue's default states)."""
        return self.run(["squeue", "-h", "-o", "%i"]).split()

    def partition(self, name: str) -> dict[str, str]:
        return _parse_kv(self.run(["scontrol", "show", "partition", "-o", name]))

    def node_states(self) -> dict[str, str]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"])
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def node_processes(self, node: str) -> list[int]:
        """Every live process on `node` except its slurmd: what jobs left behind."""
        daemon = next(x for x in read_state(self.dir) if x.name == node)
        if daemon.namespace is None:
            raise ClusterError(f"no namespace recorded for node {node}")
        return [p for p in namespace_members(daemon.namespace, self.dir) if p != daemon.pid]

    def daemon_rss_kb(self) -> dict[str, int]:
        out = {}
        for x in read_state(self.dir):
            try:
                with open(f"/proc/{x.pid}/status") as f:
                    out[x.name] = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
            except (OSError, StopIteration):
                continue
        return out


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _free_port(port: int) -> bool:
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        with s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def pick_ports(count: int) -> list[int]:
    """`count` consecutive free ports from a random start: parallel clusters rarely race."""
    low, high = PORT_RANGE
    starts = list(range(low, high - count, count))
    random.shuffle(starts)
    for s in starts:
        block = list(range(s, s + count))
        if all(_free_port(p) for p in block):
            return block
    raise ClusterError(f"no {count} consecutive free ports in {low}-{high}")


def _spawn(argv: list[str], log: Path, **kw: object) -> int:
    with open(log, "ab") as out:
        p = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kw
        )  # type: ignore[call-overload]
    return p.pid


def _in_namespace(hostname: str, hosts: Path, argv: Sequence[str]) -> list[str]:
    """argv run with its own hostname and `hosts` as /etc/hosts, in fresh UTS+mount namespaces.
    Propagation is private: the bind mount never reaches the host's /etc/hosts."""
    script = f"hostname {shlex.quote(hostname)} && mount --bind {shlex.quote(str(hosts))} /etc/hosts && exec " + (
        " ".join(shlex.quote(a) for a in argv)
    )
    return [which("unshare") or "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script]


def _wait(what: str, ok: Callable[[], bool], timeout: float, watch: Sequence[tuple[int, Path]] = ()) -> None:
    """Until ok(); fails at once when a watched daemon has died, showing its log."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        for pid, log in watch:
            if not alive(pid):
                raise ClusterError(f"{what}: daemon {pid} exited; {log}:\n{_tail(log)}")
        time.sleep(0.2)
    logs = "\n".join(f"--- {log}\n{_tail(log)}" for _, log in watch)
    raise ClusterError(f"{what}: not within {timeout:.0f}s\n{logs}")


def _munge_ok(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        enc = subprocess.run(
            [which("munge") or "munge", "-n", "-S", str(sock)], capture_output=True, timeout=5, check=True
        ).stdout
        subprocess.run(
            [which("unmunge") or "unmunge", "-S", str(sock)], input=enc, capture_output=True, timeout=5, check=True
        )
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def is_up(d: Path) -> bool:
    daemons = read_state(d)
    names = {x.name for x in daemons if _ours(x, d)}
    return (d / "slurm.conf").exists() and {"munged", "slurmctld"} <= names and len(names) == len(daemons) > 2


def up(d: Path = DEFAULT_DIR, layout: Layout = DEFAULT_LAYOUT, log: Log = print) -> Cluster:
    """Start the cluster in `d` and wait until every node is idle. A live cluster in `d` is
    reused; leftovers of a dead or partial one are taken down first."""
    d = Path(d).absolute()
    cluster = Cluster(d, layout)
    if is_up(d):
        _wait("nodes idle", lambda: _all_idle(cluster), UP_TIMEOUT)
        return cluster
    if read_state(d) or _unrecorded_daemons(d, set()):
        down(d, log=log, remove_dir=False)  # leftovers of a dead or partial cluster
    ensure_installed(log)
    try:
        _start(cluster, log)
    except BaseException:
        down(d, log=log, remove_dir=False)  # the caller owns `d` (and maybe a guard watching it)
        raise
    return cluster


def _all_idle(c: Cluster) -> bool:
    try:
        states = c.node_states()
    except ClusterError:
        return False
    return sorted(states) == sorted(n.name for n in c.layout.nodes) and set(states.values()) == {"idle"}


def _start(c: Cluster, log: Log) -> None:
    d, layout = c.dir, c.layout
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)  # munged (user munge) must reach its directory below
    for sub in ("state", "run", "log", "dev", *(f"spool/{n.name}" for n in layout.nodes)):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for i in range(max((n.gpus for n in layout.nodes), default=0)):
        dev = d / "dev" / f"gpu{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # inert: same numbers as /dev/null
    ports = pick_ports(1 + len(layout.nodes))
    node_ports = {n.name: ports[1 + i] for i, n in enumerate(layout.nodes)}
    c.conf.write_text(render_slurm_conf(layout, d, ports[0], node_ports))
    (d / "gres.conf").write_text(render_gres_conf(layout, d))
    hosts = d / "hosts"
    hosts.write_text(render_hosts(layout, Path("/etc/hosts").read_text()))

    # munged: our own instance and socket, as the munge user (it refuses root-owned state).
    mdir = d / "munge"
    mdir.mkdir(exist_ok=True)
    shutil.chown(mdir, "munge", "munge")
    mdir.chmod(0o755)  # munged insists that everyone may reach its socket
    # A key of our own: nothing depends on (or changes) the machine's /etc/munge.
    key = mdir / "munge.key"
    if not key.exists():
        r = subprocess.run(
            [which("mungekey") or "mungekey", "--create", f"--keyfile={key}"], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise ClusterError(f"mungekey --create failed: {(r.stderr or r.stdout).strip()}")
    shutil.chown(key, "munge", "munge")
    key.chmod(0o600)
    sock = mdir / "munge.socket"
    mlog = d / "log" / "munged.console"
    margv = [
        which("munged") or "munged",
        "--foreground",
        f"--socket={sock}",
        f"--pid-file={mdir / 'munged.pid'}",
        f"--log-file={mdir / 'munged.log'}",
        f"--seed-file={mdir / 'munged.seed'}",
        f"--key-file={key}",
    ]
    pid = _spawn(margv, mlog, user="munge", group="munge", extra_groups=[])
    _record(d, Daemon("munged", pid, None))
    _wait("munged answering", lambda: _munge_ok(sock), 20, [(pid, mlog)])

    clog = d / "log" / "slurmctld.console"
    cargv = [which("slurmctld") or "slurmctld", "-D", "-f", str(c.conf)]
    pid = _spawn(_in_namespace(layout.controller, hosts, cargv), clog)
    _record(d, Daemon("slurmctld", pid, _namespace_after_unshare(pid, clog)))
    watch = [(pid, clog), (pid, d / "log" / "slurmctld.log")]

    def ctl_up() -> bool:
        try:
            return "is UP" in c.run(["scontrol", "ping"], timeout=5, check=False)
        except ClusterError:
            return False

    _wait("slurmctld answering", ctl_up, 30, watch)

    for n in layout.nodes:
        nlog = d / "log" / f"slurmd-{n.name}.console"
        nargv = [which("slurmd") or "slurmd", "-D", "-N", n.name, "-f", str(c.conf)]
        pid = _spawn(_in_namespace(n.name, hosts, nargv), nlog)
        _record(d, Daemon(n.name, pid, _namespace_after_unshare(pid, nlog)))
        watch += [(pid, nlog), (pid, d / "log" / f"slurmd-{n.name}.log")]
    _wait("every node idle", lambda: _all_idle(c), UP_TIMEOUT, watch)
    log(f"slurm cluster up in {d}: {', '.join(n.name for n in layout.nodes)}; SLURM_CONF={c.conf}")


def _namespace_after_unshare(pid: int, log: Path, timeout: float = 5.0) -> str:
    """The UTS namespace `pid` runs in once `unshare` has made it (it differs from ours)."""
    host = uts_namespace(os.getpid())
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ns = uts_namespace(pid)
        if ns is None:
            break
        if ns != host:
            return ns
        time.sleep(0.02)
    raise ClusterError(
        f"process {pid} did not get its own UTS namespace: `unshare --uts --mount` needs root with "
        f"CAP_SYS_ADMIN (not available in an unprivileged container); {log}:\n{_tail(log)}"
    )


def _host_mounts_under(d: Path) -> list[str]:
    """Mount points on the host whose source lies in d (there should be none: see _in_namespace)."""
    out = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            root, point = fields[3], fields[4]
            if root.startswith(str(d)) or point.startswith(str(d)):
                out.append(point)
    return out


def _unrecorded_daemons(d: Path, known: set[int]) -> list[int]:
    marks = (str(d / "slurm.conf"), str(d / "munge" / "munge.socket"))
    skip = known | ancestors()
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and int(e) not in skip and any(m in cmdline(int(e)) for m in marks) and alive(int(e))
    ]


def down(d: Path = DEFAULT_DIR, log: Log = print, remove_dir: bool = True) -> list[str]:
    """Stop everything of the cluster in `d` by pid and namespace, then remove `d` (or only its
    contents). Works after a partial `up` and when nothing runs; returns what it did."""
    d = Path(d).absolute()
    done: list[str] = []
    daemons = read_state(d)
    ctl = next((x for x in daemons if x.name == "slurmctld"), None)
    if ctl and _ours(ctl, d) and (d / "slurm.conf").exists():
        c = Cluster(d, DEFAULT_LAYOUT)
        with contextlib.suppress(ClusterError):
            jobs = c.queue()
            if jobs:
                # A clean end for whatever still runs: SIGTERM to its steps, as a user's scancel.
                c.run(["scancel", *jobs], check=False)
                done.append(f"cancelled jobs {' '.join(jobs)}")
                end = time.monotonic() + 20
                while c.queue() and time.monotonic() < end:
                    time.sleep(0.5)
    nodes = [x for x in daemons if x.name not in ("munged", "slurmctld")]
    # Nodes first (their slurmd may still talk to the controller), then the controller, then munge.
    for group in (nodes, [x for x in daemons if x.name == "slurmctld"], [x for x in daemons if x.name == "munged"]):
        for x in group:
            how = stop_pid(x.pid) if _ours(x, d) else "already gone"
            swept = sweep_namespace(x.namespace, d) if x.namespace else 0
            done.append(f"{x.name} (pid {x.pid}): {how}" + (f", {swept} left-over process(es) killed" if swept else ""))
    # A daemon started by an `up` killed before it could record the pid: found by this cluster's
    # own config or socket path in its argv (unique to `d`), never by a program name.
    for pid in _unrecorded_daemons(d, {x.pid for x in daemons}):
        ns = uts_namespace(pid)
        how = stop_pid(pid)
        swept = sweep_namespace(ns, d) if ns and ns != uts_namespace(os.getpid()) else 0
        done.append(f"unrecorded daemon {pid}: {how}" + (f", {swept} left-over process(es) killed" if swept else ""))
    for point in _host_mounts_under(d):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)
        done.append(f"unmounted {point}")
    if d.exists() and remove_dir:
        shutil.rmtree(d, ignore_errors=True)
        done.append(f"removed {d}")
    elif d.exists():
        for entry in d.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    for line in done:
        log(line)
    return done


def status(d: Path = DEFAULT_DIR) -> str:
    d = Path(d).absolute()
    daemons = read_state(d)
    if not daemons:
        return f"no cluster in {d}"
    lines = [f"{x.name}: pid {x.pid} {'running' if _ours(x, d) else 'NOT running'}" for x in daemons]
    if is_up(d):
        with contextlib.suppress(ClusterError):
            lines.append(Cluster(d, DEFAULT_LAYOUT).run(["sinfo"], timeout=10).rstrip())
    lines.append(f"export SLURM_CONF={d / 'slurm.conf'}")
    return "\n".join(lines)


def guard(owner: int, d: Path, poll: float = 1.0) -> None:
    """Take the cluster down once `owner` (a test session) is gone, even if it was SIGKILLed;
    return quietly when `d` disappears (the session took it down itself)."""
    while d.exists():
        if not alive(owner):
            down(d, log=lambda _line: None)
            return
        time.sleep(poll)


def start_guard(owner: int, d: Path) -> int:
    """The guard in its own session, so a signal to the test session's group does not reach it."""
    # Run as a module of this package, however it was imported (`slurm` in pytest, `tests.slurm` from the CLI).
    top = Path(__file__).resolve().parents[len(__package__.split("."))]
    argv = [sys.executable, "-m", f"{__package__}.cluster", "guard", str(d), "--owner", str(owner)]
    p = subprocess.Popen(
        argv,
        cwd=top,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return p.pid


def new_dir() -> Path:
    """A short, unique cluster directory (munge's socket path must stay under 108 bytes)."""
    return Path(tempfile.mkdtemp(prefix="gym-slurm-", dir="/tmp"))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.slurm.cluster", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("up", "down", "status", "guard"))
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help=f"cluster directory (default {DEFAULT_DIR})")
    ap.add_argument("--owner", type=int, help="guard: the pid whose exit takes the cluster down")
    args = ap.parse_args(argv)
    d = Path(args.dir).absolute()

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        if args.command == "up":
            t0 = time.monotonic()
            up(d, log=say)
            say(f"up in {time.monotonic() - t0:.1f}s")
            say(f"export SLURM_CONF={d / 'slurm.conf'}")
        elif args.command == "down":
            if not down(d, log=say):
                say(f"nothing to do in {d}")
        elif args.command == "status":
            say(status(d))
        elif args.command == "guard":
            if args.owner is None:
                ap.error("guard needs --owner PID")
            guard(args.owner, d)
    except SlurmUnavailable as exc:
        print(f"slurm cluster: unavailable: {exc}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"slurm cluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
