"""A node that freezes is known in seconds (issue 34), with real agents: rank 1's agent and its
reaper SIGSTOPped (a kernel hang, a power loss) stop every other agent within beacon_timeout + 1 s
although heartbeat_timeout is 120 s, and the audit says "no beacon and no heartbeat for N s". A
30 s filesystem stall on one node while its beacons flow ends nothing (its file is still, its
doorbell is not). The rules on a fake clock: tests/test_frozen_peer.py; measured at N = 16 and 128
agents: `make bench` (bench/hang.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from audit._report_text import render
from audit.api import audit_run
from tests.harness import (
    agent_pid,
    assert_nothing_left,
    failures,
    fuse_install,
    result_driver,
    small_spec,
    start_agent,
    uid,
    wait_all,
    wait_phase,
)
from tests.harness.netfs import Placement, run_split
from tests.harness.nfs_model import NfsClient, nfs_clients
from tests.harness.orphans import kill_all, run_processes

pytestmark = pytest.mark.slow
BEACON_TIMEOUT = 3.0
HEARTBEAT_INTERVAL = 0.5
SLEEPY = 'command = ["python", "-c", "import time; time.sleep(300)"]\ntrains = false'


def _spec(driver: str, extra: str = "") -> str:
    text = small_spec(
        driver=driver, ray=False, heartbeat_timeout=120, heartbeat_interval=HEARTBEAT_INTERVAL, poll_interval=0.25
    )
    return text.replace(
        "[launch.coordination]\n", f"[launch.coordination]\nbeacon_timeout = {BEACON_TIMEOUT}\n{extra}", 1
    )


def _reaper_of(agent: int) -> int:
    """The agent's reaper: its child running `python -m agent.reaper` (found from the agent's pid)."""
    for child in psutil.Process(agent).children():
        if "agent.reaper" in child.cmdline():
            return child.pid
    raise AssertionError(f"agent {agent} has no reaper child")


def test_a_frozen_node_stops_every_other_agent_within_beacon_timeout(tmp_path: Path) -> None:
    spec = tmp_path / "frozen.toml"
    spec.write_text(_spec(SLEEPY))
    uuid = uid("frozen")
    run_dir = tmp_path / "out" / "cluster" / uuid
    procs = [start_agent(tmp_path, spec, uuid, r, 3, f"127.0.0.{r + 2}") for r in range(3)]
    try:
        for r in range(3):
            wait_phase(run_dir, r, "driver", 60)
        time.sleep(2 * HEARTBEAT_INTERVAL)  # beacons flow both ways by now
        agent = agent_pid(run_dir, 1)
        reaper = _reaper_of(agent)
        stopped_at = time.monotonic()
        os.kill(reaper, signal.SIGSTOP)
        os.kill(agent, signal.SIGSTOP)
        for r in (0, 2):
            assert procs[r].wait(60) == 1
        recs = failures(run_dir)
        assert set(recs) == {0, 2}, recs  # the frozen node wrote nothing
        took = {r: recs[r]["monotonic_time"] - stopped_at for r in (0, 2)}  # one host: one monotonic clock
        silent = [r for r in (0, 2) if recs[r]["kind"] == "peer_silent"]
        assert silent, recs
        assert all(recs[r]["reacting_to"]["rank"] == 1 for r in silent)
        assert "no beacon and no heartbeat for" in recs[silent[0]]["cause"]
        # Its last beacon and heartbeat came up to one interval before the stop: never earlier than
        # that; within beacon_timeout + 1 s (and a loaded host's margin of one more second).
        assert all(BEACON_TIMEOUT - HEARTBEAT_INTERVAL <= t <= BEACON_TIMEOUT + 1.0 + 1.0 for t in took.values()), took
        # The node is lost for good: its agent, reaper and driver die with it.
        os.kill(agent, signal.SIGKILL)
        os.kill(reaper, signal.SIGKILL)
        kill_all(run_processes(run_dir))
        text = render(audit_run(run_dir))
        first = text[text.index("First cause:") :].splitlines()[1]
        assert "rank 1, silent" in first and "no beacon and no heartbeat for" in first, first
    finally:
        wait_all(procs, 30)
        for p in procs:
            p.wait(10)
    assert_nothing_left(run_dir)


@pytest.fixture()
def two_clients(tmp_path: Path) -> Iterator[tuple[Path, list[Path], list[NfsClient]]]:
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)
    src, mounts = tmp_path / "src", [tmp_path / "client0", tmp_path / "client1"]
    with nfs_clients(src, mounts, dir_ttl=1.0, neg_ttl=1.0) as clients:
        yield src, mounts, clients


def test_a_30s_filesystem_stall_on_one_node_with_its_beacons_flowing_ends_nothing(
    tmp_path: Path, two_clients: tuple[Path, list[Path], list[NfsClient]]
) -> None:
    """Rank 2's mount hangs for 30 s (ten beacon_timeouts) while the driver on rank 0 trains on;
    its beacons keep it alive, and the run succeeds once the mount is back."""
    src, mounts, clients = two_clients
    uuid = uid("stall-beacons")
    run_dir = src / "cluster" / uuid
    stalled: list[float] = []

    def stall_then_resume() -> None:
        wait_phase(run_dir, 2, "driver", 90)
        clients[1].stall()
        stalled.append(time.monotonic())
        time.sleep(30.0)
        clients[1].resume()

    injector = threading.Thread(target=stall_then_resume, daemon=True)
    injector.start()
    split = run_split(tmp_path, src, mounts, Placement((0, 0, 1)), _spec(result_driver(45)), uuid, timeout=240)
    injector.join(60)
    assert stalled, "the stall was never injected"
    assert split.codes == [0, 0, 0] and not split.records, (split.codes, split.records, split.output[-3000:])
    assert audit_run(split.run_dir).verdict == "pass"
    assert_nothing_left(split.run_dir)
