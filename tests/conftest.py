"""Shared fixtures and hooks.

`judge_server` starts real reference judge servers (see _judge_server.py). `slurm_cluster` is a
real Slurm cluster on this machine (tests/slurm/cluster.py), brought up once per session by the
first test that asks for it and taken down at the session's end; under pytest-xdist (`make test`)
each worker that runs a Slurm test has its own (own directory, munged and ports, which the cluster
picks free at random). A session that dies anyway still
takes it down: an atexit hook covers an interpreter that exits without finalizers, and a guard
process in its own session (`cluster.py guard`) covers SIGTERM/SIGKILL of pytest, taking the
cluster down within a second of the session's pid disappearing. When a test that ran
real agents fails, the report carries `gym-audit`'s text for each run directory under its
tmp_path, plus every failure record and the tail of every log: a failure seen only on CI can
then be diagnosed from CI's output alone; a failing Slurm test also carries the tail of every
Slurm daemon's log.

Running in parallel (docs/development/tests.md): a test marked `ray` holds one of a few Ray slots, one marked
`quiet` all of them (tests/harness/slots.py); long tests are collected first.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _judge_server import RunningServer, server_factory
from hypothesis import HealthCheck, settings
from slurm import cluster as slurm

# tests.harness is shared with bench/ and imported from the repository root, however pytest runs.
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from schemas import names  # noqa: E402
from tests.harness import slots  # noqa: E402
from tests.harness.agents import forget_agent_tmp_root  # noqa: E402

LOG_TAIL_LINES = 15

# Property tests check correctness, not speed: on a loaded 2-core CI host example generation can
# be slow, which must not fail a run (speed is measured by `make bench`).
settings.register_profile("gym", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gym")


def _slots_wanted(item: pytest.Item) -> int:
    if item.get_closest_marker("quiet"):
        return slots.count()
    return 1 if item.get_closest_marker("ray") else 0


@pytest.fixture(autouse=True)
def _ray_slots(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `ray` holds one of the session's Ray slots, one marked `quiet` all of them
    (tests/harness/slots.py); the harness refuses to start Ray nodes for a test holding none."""
    with slots.holding(_slots_wanted(request.node)):
        yield


@pytest.fixture(autouse=True)
def _own_agent_temp_root(request: pytest.FixtureRequest) -> Iterator[None]:
    """Agents started by a test keep their local temp dirs under that test's own root
    (tests.harness.agents.agent_tmp_root); it is removed once the test is over."""
    yield
    tmp = getattr(request.node, "funcargs", {}).get("tmp_path")
    root = forget_agent_tmp_root(tmp) if isinstance(tmp, Path) else None
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def judge_server(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """A factory for real reference judge servers, each stopped by its PID at teardown."""
    yield from server_factory(tmp_path)


SLURM_STATS: dict[str, float] = {}  # for the terminal summary: how long the Slurm part took


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[slurm.Cluster]:
    """A real Slurm cluster: n1..n3 (8 fake GPUs each, partition gpu) and c1 (partition cpu).

    Skips only where it cannot exist (not root; no Slurm and no apt-get). As root with apt-get
    (CI), any failure to install or start is a test error, never a skip."""
    reason = slurm.unavailable_reason()
    if reason:
        pytest.skip(reason)
    d = slurm.new_dir()
    guard = slurm.start_guard(os.getpid(), d)
    atexit.register(slurm.down, d, log=lambda _line: None)  # no-op once the finalizer ran
    try:
        t0 = time.monotonic()
        SLURM_STATS["install_s"] = slurm.ensure_installed(log=lambda _line: None)
        t1 = time.monotonic()
        cluster = slurm.up(d, log=lambda _line: None)
        SLURM_STATS["up_s"] = time.monotonic() - t1
        SLURM_STATS["setup_s"] = time.monotonic() - t0
        SLURM_STATS["daemons_rss_mb"] = sum(cluster.daemon_rss_kb().values()) / 1024
        SLURM_STATS["clusters"] = 1
        yield cluster
    finally:
        t2 = time.monotonic()
        slurm.stop_pid(guard, grace=2)  # first, so it does not race us taking the cluster down
        slurm.down(d, log=lambda _line: None)
        SLURM_STATS["down_s"] = time.monotonic() - t2


RAY_RUN_S = 40.0  # what a test marked `ray` costs when its mark does not say: a 3-node Ray run on 2 cores


def ray_seconds(item: pytest.Item) -> float:
    """About how long a test marked `ray` holds its lane: `@pytest.mark.ray(seconds=N)` where the
    test is far from a 3-node Ray run (one that stops before Ray starts, a Slurm job of several
    steps), RAY_RUN_S otherwise. Only the lanes' balance depends on it."""
    mark = item.get_closest_marker("ray")
    return float(mark.kwargs.get("seconds", RAY_RUN_S)) if mark else 0.0


def ray_lanes(items: list[pytest.Item], lanes: int) -> dict[str, int]:
    """Each Ray test's lane, by node id: tests that share an xdist_group (a module fixture's run)
    as one unit, the units longest first, each to the lane with the least work so far; ties go
    in collection order, so that every worker computes the same lanes."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.get_closest_marker("ray"):
            groups = sorted(str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args)
            units.setdefault("_".join(groups) or item.nodeid, []).append(item)
    costs = [(sum(ray_seconds(i) for i in unit), unit) for unit in units.values()]
    load = [0.0] * lanes
    lane_of: dict[str, int] = {}
    for cost, unit in sorted(costs, key=lambda c: -c[0]):  # stable
        lane = load.index(min(load))
        load[lane] += cost
        lane_of.update((i.nodeid, lane) for i in unit)
    return lane_of


@pytest.hookimpl(trylast=True)  # after `-m` deselected: the lanes hold only what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (make test), the tests that start Ray run in one lane per Ray slot: an
    xdist group each, which one worker runs in order, so that no worker waits for a slot; the
    lanes are balanced by each test's expected time (ray_lanes). Then the long tests first, so
    that the run does not end waiting for one that started last. The order is stable: every
    worker must collect the same one."""
    lane_of = ray_lanes(items, slots.count())
    for item in items:
        if item.nodeid in lane_of:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "xdist_group"]
            item.add_marker(pytest.mark.xdist_group(f"ray-lane-{lane_of[item.nodeid]}"))

    if getattr(config.option, "loadgroup", False):  # an xdist worker of `--dist loadgroup`
        for item in items:
            _group_in_nodeid(item)

    def long_first(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("slow") or item.get_closest_marker("slurm") else 1

    items.sort(key=long_first)


def _group_in_nodeid(item: pytest.Item) -> None:
    """`--dist loadgroup` sends the tests whose node ids end in the same "@GROUP" to one worker.
    pytest-xdist 3.8 writes that suffix into `item._nodeid`, which pytest 9 no longer reads (a node's
    id is `item._id`), so its groups silently do nothing; this writes it where pytest 9 reads it."""
    names = sorted(
        {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    )
    if names and "@" not in item.nodeid and hasattr(item, "_id"):
        from _pytest.nodeid import NodeId  # pytest 9's structured node id

        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker hands its Slurm figures to the controller, which prints the summary.
    output = getattr(session.config, "workeroutput", None)
    if output is not None and SLURM_STATS:
        output["slurm_stats"] = dict(SLURM_STATS)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent when pytest runs without xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    stats = getattr(node, "workeroutput", {}).get("slurm_stats")
    if stats:  # each worker that ran a Slurm test had its own cluster: count them, keep the slowest figures
        for key, value in stats.items():
            before = SLURM_STATS.get(key, 0)
            SLURM_STATS[key] = before + value if key == "clusters" else max(before, value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SLURM_STATS:
        s = SLURM_STATS
        terminalreporter.write_line(
            f"slurm cluster: install {s.get('install_s', 0):.1f}s, up {s.get('up_s', 0):.1f}s, "
            f"down {s.get('down_s', 0):.1f}s, daemons {s.get('daemons_rss_mb', 0):.0f} MB RSS"
            + (f" (the slowest of {s['clusters']:.0f}, one per worker)" if s.get("clusters", 1) > 1 else "")
        )


def run_dir_diagnostics(run_dir: Path) -> str:
    """gym-audit's text report, the failure records and log tails of one run directory."""
    from audit import _report_text as report_text
    from audit._logs import list_logs, read_tail
    from audit.api import audit_run
    from audit.safedir import SafeDir

    parts: list[str] = []
    try:
        parts.append(report_text.render(audit_run(run_dir), show_info=False))
    except Exception as exc:  # noqa: BLE001 - diagnostics must never mask the test's own failure
        parts.append(f"gym-audit raised {type(exc).__name__}: {exc}")
    try:
        with SafeDir(run_dir) as safe:
            for f in sorted((run_dir / names.FAILURES_DIR).glob("*.json")):
                rel = f"{names.FAILURES_DIR}/{f.name}"
                parts.append(f"--- {rel}\n" + "\n".join(read_tail(safe, rel)))
            for log in list_logs(safe):
                tail = read_tail(safe, log.relpath)[-LOG_TAIL_LINES:]
                parts.append(f"--- {log.relpath} (last {LOG_TAIL_LINES} lines)\n" + "\n".join(tail))
    except Exception as exc:  # noqa: BLE001 - diagnostics must never mask the test's own failure
        parts.append(f"reading the run directory stopped: {type(exc).__name__}: {exc}")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    cluster = getattr(item, "funcargs", {}).get("slurm_cluster")
    if isinstance(cluster, slurm.Cluster):
        for log in sorted((cluster.dir / "log").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"slurm {log.name} (last {LOG_TAIL_LINES} lines)", "\n".join(tail)))
    funcargs = getattr(item, "funcargs", {})
    tmp = funcargs.get("tmp_path")
    run_dirs = sorted(tmp.glob("**/cluster/*")) if isinstance(tmp, Path) else []
    # A run a module-scoped fixture shared with this test (it lives outside the test's tmp_path).
    run_dirs += [v.run_dir for v in funcargs.values() if isinstance(getattr(v, "run_dir", None), Path)]
    for run_dir in dict.fromkeys(run_dirs):
        if run_dir.is_dir() and not run_dir.is_symlink():
            report.sections.append((f"run directory {run_dir.name}", run_dir_diagnostics(run_dir)))
