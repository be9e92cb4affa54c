"""Shared fixtures and hooks.

`judge_server` starts real reference judge servers (see _judge_server.py). When a test that ran
real agents fails, the report carries `gym-audit`'s text for each run directory under its
tmp_path, plus every failure record and the tail of every log: a failure seen only on CI can
then be diagnosed from CI's output alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _judge_server import RunningServer, server_factory
from agent_harness import forget_agent_tmp_root
from hypothesis import HealthCheck, settings

from schemas import names

LOG_TAIL_LINES = 15

# Property tests check correctness, not speed: on a loaded 2-core CI host example generation can
# be slow, which must not fail a run (speed is measured by `make bench`).
settings.register_profile("gym", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gym")


@pytest.fixture(autouse=True)
def _own_agent_temp_root(request: pytest.FixtureRequest) -> Iterator[None]:
    """Agents started by a test keep their local temp dirs under that test's own root
    (agent_harness.agent_tmp_root); it is removed once the test is over."""
    yield
    tmp = getattr(request.node, "funcargs", {}).get("tmp_path")
    root = forget_agent_tmp_root(tmp) if isinstance(tmp, Path) else None
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def judge_server(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """A factory for real reference judge servers, each stopped by its PID at teardown."""
    yield from server_factory(tmp_path)


def run_dir_diagnostics(run_dir: Path) -> str:
    """gym-audit's text report, the failure records and log tails of one run directory."""
    from audit import report_text
    from audit.api import audit_run
    from audit.load import SafeDir
    from audit.logs import list_logs, read_tail

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
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if not isinstance(tmp, Path):
        return
    for run_dir in sorted(tmp.glob("**/cluster/*")):
        if run_dir.is_dir() and not run_dir.is_symlink():
            report.sections.append((f"run directory {run_dir.name}", run_dir_diagnostics(run_dir)))
