"""A worker's `ray start` that misses Ray's own registration wait is started again, not a failure.

Ray's `ray start` gives its raylet a fixed 30 s to register with the GCS and then exits, taking its
node down ("The current node timed out during startup", or "Failed to connect to GCS"). On a busy
host that happens after the node's ports are open; the agent keeps such a start on probation until
Ray says the node registered (its address file) and starts it again on new ports. Here the GCS is
stopped (SIGSTOP) the moment the worker's raylet exists and continued after Ray's wait has run out.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from schemas import names
from tests.harness import assert_artifacts_valid, kill_tree_by_session, launch_local, read, uid
from tests.harness.specs import small_spec

WORKER = "127.0.0.3"  # rank 1 of a local run
STOPPED_S = 38.0  # past Ray's fixed 30 s registration wait


def _find(root: psutil.Process, deadline: float) -> tuple[psutil.Process | None, psutil.Process | None]:
    """The head's GCS and the worker's raylet, once the raylet exists."""
    gcs = None
    while time.monotonic() < deadline:
        for p in root.children(recursive=True):
            try:
                name, cmd = p.name(), " ".join(p.cmdline())
            except psutil.Error:
                continue
            if name == "gcs_server":
                gcs = p
            elif name == "raylet" and f"node_ip_address={WORKER}" in cmd and gcs is not None:
                return gcs, p
        time.sleep(0.01)
    return gcs, None


@pytest.mark.ray(seconds=80)
@pytest.mark.slow
def test_a_worker_that_misses_rays_registration_wait_is_started_again(tmp_path: Path) -> None:
    driver = 'command = ["python", "examples/demo_driver.py"]'
    run = launch_local(tmp_path, small_spec(replicas=2, driver=driver), uid("rayreg"), env={"DEMO_STEPS": "2"})
    try:
        gcs, raylet = _find(psutil.Process(run.proc.pid), time.monotonic() + 150)
        assert gcs is not None and raylet is not None, "the worker's raylet never started"
        gcs.send_signal(signal.SIGSTOP)
        try:
            time.sleep(STOPPED_S)
        finally:
            gcs.send_signal(signal.SIGCONT)
        code = run.wait(240)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 0, run.text[-4000:]
    assert_artifacts_valid(run.run_dir)
    log = (run.run_dir / names.agent_log(1)).read_text()
    (line,) = [ln for ln in log.splitlines() if "ray_start ok" in ln]
    # Which of Ray's waits ran out first (its ports' or its registration's) depends on the moment the
    # GCS stopped; either ended a `ray start` that was started again. On a loaded host an earlier
    # start may also have ended (the head's GCS too slow to answer), so the start that stayed up is
    # the second or the third, each ended one named.
    started = re.search(r" at start (\d) \((exit code [^;)]+(?:; exit code [^;)]+)*)\)", line)
    assert started is not None and int(started[1]) in (2, 3), line
    assert started[2].count("exit code") == int(started[1]) - 1, line
    layout = read(run.run_dir, names.RAY_LAYOUT)
    assert layout["passed"] and sorted(n["address"] for n in layout["live_nodes"]) == ["127.0.0.2", WORKER]
