"""A shared filesystem that hangs (its FUSE daemon stopped, as an NFS server that stops answering):
a SIGTERM to the driver's node during the hang still stops its driver within teardown_grace plus a
few seconds, every agent exits once the filesystem is back, nothing is left, and the audit names
the signalled rank (issue 24, acceptance (a)). One NFS-model client (tests/harness/nfs_model.py)
serves every agent, so the hang is everyone's."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import psutil
import pytest

from schemas import names
from tests.harness import (
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    result_driver,
    small_spec,
    uid,
    wait_phase,
)
from tests.harness.netfs import start
from tests.harness.nfs_model import NfsClient, nfs_clients
from tests.harness.orphans import kill_tree_by_session

pytestmark = pytest.mark.slow
TEARDOWN_GRACE = 3.0
HEARTBEAT_TIMEOUT = 6.0
SLEEPY = 'command = ["python", "-c", "import time; time.sleep(300)"]'


def _driver_pid(agent: subprocess.Popen) -> int | None:
    try:
        for child in psutil.Process(agent.pid).children(recursive=True):
            if "time.sleep(300)" in " ".join(child.cmdline()):
                return child.pid
    except psutil.Error:
        return None
    return None


def _hung_spec(name: str, driver: str, ray: bool = False, fs_stall_timeout: float | None = None) -> str:
    spec_text = small_spec(
        name=name,
        driver=driver,
        ray=ray,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        heartbeat_interval=1.0,
        poll_interval=0.5,
        teardown_grace=TEARDOWN_GRACE,
    )
    if fs_stall_timeout is None:
        return spec_text
    return spec_text.replace(
        "[launch.coordination]\n", f"[launch.coordination]\nfs_stall_timeout = {fs_stall_timeout}\n", 1
    )


@contextmanager
def three_agents_on_one_client(
    tmp_path: Path, driver: str, fs_stall_timeout: float | None = None, ray: bool = False
) -> Iterator[tuple[NfsClient, list[subprocess.Popen], Path]]:
    """Three agents on one NFS-model client, every one in its driver phase; killed by session and
    unmounted on the way out."""
    src, mnt = tmp_path / "src", tmp_path / "client"
    spec_text = _hung_spec("hung", driver, ray, fs_stall_timeout)
    uuid = uid("hung")
    run_dir = src / "cluster" / uuid
    with nfs_clients(src, [mnt], dir_ttl=1.0, neg_ttl=1.0) as [client]:
        spec_file = tmp_path / "hung.toml"
        spec_file.write_text(spec_text)
        procs = [start(tmp_path, mnt, spec_file, uuid, r, 3, [], run_dir) for r in range(3)]
        try:
            for r in range(3):
                wait_phase(run_dir, r, "driver", 120)
            yield client, procs, run_dir
        finally:
            for p in procs:
                kill_tree_by_session(p)


def _driver_holder(procs: list[subprocess.Popen]) -> tuple[int, int]:
    """(rank, driver pid) of the agent whose tree runs the driver."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        for r, p in enumerate(procs):
            pid = _driver_pid(p)
            if pid is not None:
                return r, pid
        time.sleep(0.1)
    raise AssertionError("no driver process found")


def _sigterm_during_hang(client: NfsClient, agent: subprocess.Popen, pids: list[int], hang_s: float) -> float:
    """Hang the filesystem, SIGTERM `agent` 1 s into it, and return how long `pids` took to be gone
    (bounded by teardown_grace + 5 s, else this fails); the hang lasts `hang_s` from the SIGTERM."""
    client.stall()
    try:
        time.sleep(1.0)
        agent.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        while any(psutil.pid_exists(p) for p in pids) and time.monotonic() - t0 < TEARDOWN_GRACE + 5:
            time.sleep(0.05)
        stopped_after = time.monotonic() - t0
        left = [p for p in pids if psutil.pid_exists(p)]
        assert not left, f"{left} still alive {stopped_after:.1f}s after SIGTERM"
        time.sleep(max(0.0, hang_s - (time.monotonic() - t0)))
    finally:
        client.resume()
    return stopped_after


def test_a_sigterm_during_a_hang_stops_the_driver_and_the_run_ends_after_it(tmp_path: Path) -> None:
    with three_agents_on_one_client(tmp_path, SLEEPY) as (client, procs, run_dir):
        holder, driver = _driver_holder(procs)
        # Longer than heartbeat_timeout: nobody can read or write the run directory meanwhile.
        stopped_after = _sigterm_during_hang(client, procs[holder], [driver], HEARTBEAT_TIMEOUT + 2)
        codes = [p.wait(120) for p in procs]
    print(f"\nhung filesystem: driver stopped {stopped_after:.2f}s after SIGTERM; exit codes {codes}")
    assert all(c != 0 for c in codes), codes
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    # The signalled rank is the first cause; its peers react to it (by its record, or by its
    # silence while the filesystem hung: which one is the order the caches hand them out in).
    result = audit(run_dir, verdict="fail", rank=holder, kind="signal")
    assert all(c.reacting_to == holder for c in result.cascade), result.cascade


def _stalled_run(tmp_path: Path, *, stall_s: float, fs_stall_timeout: float, driver: str) -> tuple[Path, list[int]]:
    """Once every rank runs the driver the filesystem hangs for `stall_s` (nobody fails), then
    comes back."""
    with three_agents_on_one_client(tmp_path, driver, fs_stall_timeout) as (client, procs, run_dir):
        client.stall()
        try:
            time.sleep(stall_s)
        finally:
            client.resume()
        codes = [p.wait(120) for p in procs]
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    return run_dir, codes


def test_a_stall_shorter_than_the_bound_is_ridden_out(tmp_path: Path) -> None:
    # Longer than heartbeat_timeout: without riding it out every peer would look silent.
    run_dir, codes = _stalled_run(
        tmp_path, stall_s=HEARTBEAT_TIMEOUT + 3, fs_stall_timeout=60, driver=result_driver(14)
    )
    assert codes == [0, 0, 0], codes
    audit(run_dir, verdict="pass")
    logs = "".join((run_dir / f"agent-{r}.log").read_text() for r in range(3))
    assert "the shared filesystem stalled for" in logs


def test_a_stall_past_the_bound_ends_the_run_as_fs_stall(tmp_path: Path) -> None:
    run_dir, codes = _stalled_run(tmp_path, stall_s=9, fs_stall_timeout=4, driver=SLEEPY)
    assert all(c == 1 for c in codes), codes
    result = audit(run_dir, verdict="fail", rank=(0, 1, 2), kind="fs_stall")
    fc = result.first_cause
    assert fc is not None and "the shared filesystem has not answered for" in fc.cause, fc
    assert "fs_stall_timeout 4s" in fc.cause and str(run_dir.name) in fc.cause, fc.cause


def _raylets(agent: subprocess.Popen) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(agent.pid).children(recursive=True) if "raylet" in c.name()]
    except psutil.Error:
        return []


@pytest.mark.ray
def test_a_sigterm_to_a_node_without_the_driver_during_a_hang_stops_its_ray_at_once(tmp_path: Path) -> None:
    # That node's lifecycle waits for the driver's acknowledgement by listing acks/: with the
    # filesystem hung the listing does not return, and the teardown must not wait for it.
    with three_agents_on_one_client(tmp_path, SLEEPY, ray=True) as (client, procs, run_dir):
        holder, _ = _driver_holder(procs)
        other = next(r for r in range(3) if r != holder and _raylets(procs[r]))
        # The hang outlasts the bound.
        stopped_after = _sigterm_during_hang(client, procs[other], _raylets(procs[other]), 12)
        codes = [p.wait(120) for p in procs]
    print(f"\nhung filesystem: rank {other}'s raylet stopped {stopped_after:.2f}s after SIGTERM; codes {codes}")
    assert all(c != 0 for c in codes), codes
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    audit(run_dir, verdict="fail", rank=other, kind="signal")


def test_one_nodes_mount_stalls_its_peers_keep_it_alive_on_the_doorbell_then_it_fails_as_fs_stall(
    tmp_path: Path,
) -> None:
    """Ranks 0 and 1 on one NFS-model client, rank 2 on another whose daemon stops (a partial
    stall: only rank 2's mount hangs). Its watchers (0 and 1) see its heartbeat file stand still
    past heartbeat_timeout but its beacons arrive: no peer_silent. At fs_stall_timeout rank 2's
    own stall watch fails it as fs_stall and its doorbell rings the others, who stop while its
    mount still hangs. Once the mount is back rank 2 writes its record; the audit names it."""
    stall_bound = 2 * HEARTBEAT_TIMEOUT  # past heartbeat_timeout: silence would have been called
    spec_text = _hung_spec("partial", SLEEPY, fs_stall_timeout=stall_bound)
    src, uuid = tmp_path / "src", uid("partial")
    run_dir = src / "cluster" / uuid
    spec_file = tmp_path / "partial.toml"
    spec_file.write_text(spec_text)
    with nfs_clients(src, [tmp_path / "a", tmp_path / "b"], dir_ttl=1.0, neg_ttl=1.0) as [a, b]:
        mounts = (a.mnt, a.mnt, b.mnt)
        procs = [start(tmp_path, mounts[r], spec_file, uuid, r, 3, [], run_dir) for r in range(3)]
        try:
            for r in range(3):
                wait_phase(run_dir, r, "driver", 120)
            b.stall()
            stalled_at = time.time()
            try:
                codes_01 = [procs[r].wait(stall_bound + 30) for r in (0, 1)]
                others_gone = time.time() - stalled_at
                assert procs[2].poll() is None  # rank 2 cannot finish its teardown records yet
            finally:
                b.resume()
            code_2 = procs[2].wait(120)
        finally:
            for p in procs:
                kill_tree_by_session(p)
    print(f"\npartial stall: ranks 0 and 1 gone {others_gone:.1f}s into rank 2's stall (bound {stall_bound}s)")
    assert codes_01 == [1, 1] and code_2 == 1, (codes_01, code_2)
    assert stall_bound - 1 < others_gone < stall_bound + 10, others_gone
    recs = failures(run_dir)
    assert recs[2]["kind"] == "fs_stall", recs[2]
    for r in (0, 1):
        assert recs[r]["kind"] == "peer_failure" and recs[r]["reacting_to"]["kind"] == "fs_stall", recs[r]
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
    audit(run_dir, verdict="fail", rank=2, kind="fs_stall")
    beacons = [orjson.loads((run_dir / names.cleanup(r)).read_bytes())["doorbell"]["beacons_received"] for r in (0, 1)]
    assert min(beacons) > 0, beacons
