"""The fault matrix's Slurm rows: the endings only a real scheduler causes, on the project's own
local cluster (tests/slurm/cluster.py, started here and stopped by PID afterwards).

Each row submits tests/test_slurm_endings.py's job (the demo driver made to run long, one trainer
node, Ray across n1..n3, the reference judge) with `gym-launch submit --backend slurm` and ends it
the scheduler's way: its time limit, `scancel`, or its node n2 set DOWN. Measured: the job's state
and exit code, the time from the fault to the job's end and to the last process of the run gone
(run directory, uuid, and every node's namespace), and whether `gym-audit` names the scheduler's
ending (kind and words) as the first cause. The submission, waiting and node-cleanliness helpers
are the tests' own, imported from tests/ (their modules import each other by bare name, as
pytest's rootdir puts tests/ on sys.path: so it is put there for them here).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.harness import orphans
from tests.harness.agents import BIN, assert_artifacts_valid, wait_phase
from tests.harness.specs import uid

TESTS = Path(__file__).resolve().parents[1] / "tests"
Cluster = Any  # tests/slurm/cluster.py's Cluster: imported only when a Slurm row runs
DRIVER_PHASE_TIMEOUT = 180.0
GONE_TIMEOUT = 60.0
DOWN_NODE = "n2"


def _tests(module: str) -> ModuleType:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return __import__(module)


def _cluster_module() -> ModuleType:
    return _tests("slurm.cluster").cluster


@contextmanager
def local_cluster() -> Iterator[Cluster | str]:
    """The local cluster, up; or why it cannot run here (a str). Taken down by its daemons' PIDs
    afterwards; a guard in its own session does it should this process die first."""
    slurm = _cluster_module()
    reason = slurm.unavailable_reason()
    if reason:
        yield f"no local Slurm cluster here: {reason}"
        return
    d = slurm.new_dir()
    guard = slurm.start_guard(os.getpid(), d)
    atexit.register(slurm.down, d, log=lambda _line: None)  # no-op once the finally below ran
    try:
        try:
            c = slurm.up(d, log=lambda _line: None)
        except (slurm.ClusterError, slurm.SlurmUnavailable) as exc:
            yield f"the local Slurm cluster did not start: {exc}"
            return
        yield c
    finally:
        slurm.stop_pid(guard, grace=2)  # first, so it does not race us taking the cluster down
        slurm.down(d, log=lambda _line: None)


@dataclass(frozen=True)
class Ending:
    """How a row ends its job, and what the audit must then say."""

    kind: str  # gym-audit --json's first_cause.kind
    words: tuple[str, ...]  # the scheduler's own words the audit's first lines must show
    submit_args: tuple[str, ...]
    inject: Callable[[Cluster, int, Path], float]  # ends the job; returns the fault's time (monotonic)
    # The job's spec, when not the demo's (tmp dir, row name -> spec file), and whether the audit's
    # first cause is the scheduler's ending (else a rank's own, e.g. a hang the warning found).
    spec: Callable[[Path, str], Path] | None = None
    by_scheduler: bool = True


def _at_time_limit(c: Cluster, job: int, _run_dir: Path) -> float:
    """No action: the fault is the job's scheduled end (its EndTime while it runs)."""
    end = time.monotonic() + DRIVER_PHASE_TIMEOUT
    while time.monotonic() < end:
        info = c.job(job)
        if info.get("JobState") == "RUNNING":
            scheduled = time.mktime(time.strptime(info["EndTime"], "%Y-%m-%dT%H:%M:%S"))
            return time.monotonic() + (scheduled - time.time())
        time.sleep(0.5)
    raise TimeoutError(f"job {job} never ran")


def _scancel(c: Cluster, job: int, run_dir: Path) -> float:
    wait_phase(run_dir, 0, "driver", DRIVER_PHASE_TIMEOUT)
    at = time.monotonic()
    c.run(["scancel", str(job)])
    return at


def _node_down(c: Cluster, job: int, run_dir: Path) -> float:
    wait_phase(run_dir, 0, "driver", DRIVER_PHASE_TIMEOUT)
    at = time.monotonic()
    c.run(["scontrol", "update", f"nodename={DOWN_NODE}", "state=down", "reason=gym-faults"])
    return at


STUCK_PROGRESS_TIMEOUT = 10


def _stuck_spec(tmp: Path, name: str) -> Path:
    """Three nodes whose driver never makes progress (it prints nothing, calls nothing) while its
    first_progress_timeout is an hour: only the walltime warning can find it stuck. No restart is
    allowed: the job the warning requeues is refused at its start (the agents exit 2)."""
    driver = tmp / "stuck_driver.py"
    driver.write_text("import time\n\ndef load_checkpoint():\n    time.sleep(3600)\n\nload_checkpoint()\n")
    path = _tests("test_slurm_endings")._plain_spec(tmp, name, str(driver), nodes=3, extra="max_retries = 0")
    text = path.read_text().replace(
        "checkpoint_grace = 30",
        f"checkpoint_grace = 5\nprogress_timeout = {STUCK_PROGRESS_TIMEOUT}\nfirst_progress_timeout = 3600\n"
        "trains = false",
        1,
    )
    path.write_text(text)
    return path


def _warned_while_stuck(c: Cluster, job: int, run_dir: Path) -> float:
    """What Slurm sends at --signal=B:USR1@SECONDS, sent once the driver made no progress for
    progress_timeout. The warning's trap requeues the job; its next start (Slurm's two-minute hold
    skipped, as the tests do) is refused by the restart caps, which ends the job."""
    wait_phase(run_dir, 0, "driver", DRIVER_PHASE_TIMEOUT)
    time.sleep(STUCK_PROGRESS_TIMEOUT + 3)
    at = time.monotonic()
    c.run(["scancel", "--batch", "--signal=USR1", str(job)])
    _tests("test_slurm_endings")._requeued(c, job)
    return at


ENDINGS: dict[str, Ending] = {
    "slurm-time-limit": Ending(
        "time_limit",
        ("DUE TO TIME LIMIT",),
        ("--set", 'launch.slurm.time="00:01:00"'),
        _at_time_limit,
    ),
    "slurm-scancel": Ending("cancelled", ("CANCELLED AT",), (), _scancel),
    # Without a requeue the job ends NODE_FAIL (with one, it would wait for the node, pending).
    "slurm-node-down": Ending(
        "node_failure",
        ("DUE TO NODE FAILURE", f"node {DOWN_NODE}"),
        ("--set", 'launch.slurm.directives=["--no-requeue"]'),
        _node_down,
    ),
    # The walltime warning on a stuck run: a hang (not time_limit), every node's stacks kept.
    "slurm-walltime-stuck": Ending(
        "hang",
        ("no progress for", "walltime warning"),
        (),
        _warned_while_stuck,
        spec=_stuck_spec,
        by_scheduler=False,
    ),
}


@dataclass(frozen=True)
class Outcome:
    """One Slurm trial as the matrix reports it."""

    run_dir: Path
    exit_codes: list[int | None]  # the job's: its exit code, or minus the signal that ended it
    seconds_to_last_exit: float | None
    orphans: list[str]
    ending: str
    problems: list[str]


class RowError(RuntimeError):
    """The row could not run to its measurement: the submission or a cluster call failed."""


def run(name: str, base: Path, c: Cluster) -> Outcome:
    """Submit the row's job, end it, and measure; the run directory stays for the caller's audit."""
    try:
        return _run(name, base, c)
    except (AssertionError, TimeoutError, _cluster_module().ClusterError) as exc:
        raise RowError(f"{type(exc).__name__}: {exc}") from exc


def _run(name: str, base: Path, c: Cluster) -> Outcome:
    rendered, endings = _tests("test_slurm_rendered"), _tests("test_slurm_endings")
    wait_nodes_clean = _tests("test_slurm_cluster").wait_nodes_clean
    e = ENDINGS[name]
    tmp = Path(tempfile.mkdtemp(prefix="s", dir=base))
    uuid, root = uid(name, "fault"), tmp / "out"
    run_dir = root / "cluster" / uuid
    problems: list[str] = []
    spec = e.spec(tmp, name) if e.spec else rendered.spec(tmp, name, body=endings.BODY, driver_env=endings.LONG)
    job = rendered.submit(c, spec, root, uuid, *e.submit_args)
    try:
        try:
            fault_at = e.inject(c, job, run_dir)
        except (TimeoutError, AssertionError, _cluster_module().ClusterError) as exc:
            problems.append(f"injection: {type(exc).__name__}: {exc}")
            fault_at = time.monotonic()
        info = c.wait_job(job, rendered.JOB_TIMEOUT_S)
        ended = time.monotonic() - fault_at
    finally:
        if e.inject is _node_down:
            c.run(["scontrol", "update", f"nodename={DOWN_NODE}", "state=resume"], check=False)
    left = orphans.wait_gone(run_dir, GONE_TIMEOUT)
    try:
        wait_nodes_clean(c, list(rendered.NODES), timeout=GONE_TIMEOUT)
    except AssertionError as exc:
        problems.append(str(exc))
    last = None if left else round(time.monotonic() - fault_at, 2)
    described = orphans.describe(left)
    orphans.kill_all(left)
    state, code = info.get("JobState", "?"), info.get("ExitCode", "?")
    if state == "COMPLETED" and e.by_scheduler:
        problems.append(f"job {job} COMPLETED: the fault did not end it")
    try:
        assert_artifacts_valid(run_dir)
    except (AssertionError, OSError, ValueError) as exc:
        problems.append(f"artifacts: {exc}")
    problems += _audit_json(run_dir, job, e)
    _wait_idle(c, problems)
    ending = f"job {state} {code}, ended {ended:.1f}s after the fault"
    return Outcome(run_dir, [_exit_code(code)], last, described, ending, problems)


def _exit_code(code: str) -> int | None:
    """Slurm's ExitCode "N:S": N, or -S when a signal ended the batch script."""
    try:
        n, sig = (int(x) for x in code.split(":"))
    except ValueError:
        return None
    return -sig if sig else n


def _audit_json(run_dir: Path, job: int, e: Ending) -> list[str]:
    """`gym-audit --json`'s first cause: the scheduler's kind, and the scheduler's own line."""
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True, timeout=120)
    try:
        fc = json.loads(cli.stdout)["first_cause"] or {}
    except (ValueError, KeyError, TypeError):
        return [f"gym-audit --json exited {cli.returncode} without a report: {cli.stderr.strip()[-300:]}"]
    if not e.by_scheduler:
        said = all(w in str(fc.get("cause")) for w in e.words)
        if fc.get("kind") != e.kind or not said:
            return [f"gym-audit --json's first cause is {fc.get('kind')!r} ({fc.get('cause')!r}), expected {e.kind}"]
        return []
    named = f"slurm ended job {job}" in str(fc.get("cause"))
    if fc.get("kind") != e.kind or fc.get("scheduler") != "slurm" or not named:
        return [f"gym-audit --json's first cause is {fc.get('kind')!r} ({fc.get('cause')!r}), expected {e.kind}"]
    return []


def _wait_idle(c: Cluster, problems: list[str], timeout: float = 60) -> None:
    """The next trial needs every node back (a node set DOWN is resumed above)."""
    end = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < end:
        states = c.node_states()
        if set(states.values()) == {"idle"}:
            return
        time.sleep(0.5)
    problems.append(f"nodes not idle {timeout:.0f}s after the job: {states}")
