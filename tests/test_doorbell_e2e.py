"""The doorbell against real agents: a foreign process cannot stop a run by spraying datagrams at
it, and a failure reaches peers whose filesystem hides the record, in milliseconds instead of the
cache's bound (and only at that bound with `doorbell = false`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit import _report_html as report_html
from audit import _report_text as report_text
from schemas import names
from tests.harness import (
    agent_pid,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    kill_tree_by_session,
    read,
    result_driver,
    small_spec,
    start_agent,
    uid,
    wait_all,
    wait_for_file,
    wait_phase,
)
from tests.harness.doorbell_fuzz import doorbell_ports, drop_problems, spray

pytestmark = pytest.mark.slow

RESULT_DRIVER = result_driver(3)


def test_foreign_datagrams_never_stop_a_run_and_are_counted(tmp_path: Path) -> None:
    spec = tmp_path / "fuzz.toml"
    spec.write_text(small_spec(name="fuzz", ray=False, replicas=2, driver=RESULT_DRIVER))
    u = uid("fuzz")
    run_dir = tmp_path / "out" / "cluster" / u
    procs = [start_agent(tmp_path, spec, u, r, 2, f"127.0.0.{r + 2}") for r in range(2)]
    stop, sent = threading.Event(), [0]
    try:
        targets = {r: (f"127.0.0.{r + 2}", port) for r, port in doorbell_ports(run_dir, 2).items()}
        sprayer = threading.Thread(target=spray, args=(run_dir, targets, stop, sent), daemon=True)
        sprayer.start()
        codes = wait_all(procs, 120)
    finally:
        stop.set()
        for p in procs:
            kill_tree_by_session(p)
    out = "".join(p.stdout.read() for p in procs if p.stdout)
    assert codes == [0, 0], out[-4000:]
    assert sent[0] > 200
    assert not failures(run_dir)
    assert_artifacts_valid(run_dir)
    result = audit(run_dir, verdict="pass")
    assert not drop_problems(run_dir, range(2))
    # The audit sums what the doorbells counted: the spray's drops, both ranks' beacons.
    bell = result.doorbell
    assert bell is not None and bell["ranks"] == [0, 1] and sum(bell["dropped"].values()) > 0, bell
    assert bell["beacons_received"] > 0 and bell["rings"] == 0, bell
    assert "doorbell: 2 rank(s); 0 failure ring(s)" in report_text.render(result)
    assert "dropped: " in report_html.render(result).split('id="coordination"')[1]
    for r in range(2):
        assert "doorbell: dropped a datagram" in (run_dir / names.agent_log(r)).read_text()
    # The secret is in its own file only: in no artifact, no log, nowhere on the console.
    secret = (run_dir / names.DOORBELL_SECRET).read_text().strip()
    assert secret not in out
    for f in run_dir.rglob("*"):
        if f.is_file() and f.name != names.DOORBELL_SECRET:
            assert secret.encode() not in f.read_bytes(), f
    assert_nothing_left(run_dir)


# --- propagation when the filesystem cannot tell in time --------------------------------------

HIDDEN_S = 4  # how long the readers' FUSE mount keeps a "no such file" answer


@pytest.fixture()
def mounts(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """src, a: a FUSE mirror of src whose readers keep negative lookups for HIDDEN_S (as an NFS
    client keeps "no such file" for a name it looked up), b: a plain mirror (inotify on a never
    sees b's writes: another client)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("bindfs") is None:
        pytest.skip("needs root, /dev/fuse and bindfs (apt-get install bindfs)")
    src, a, b = tmp_path / "src", tmp_path / "a", tmp_path / "b"
    for d in (src, a, b):
        d.mkdir()
    mounted: list[Path] = []
    cached = f"attr_timeout={HIDDEN_S},entry_timeout={HIDDEN_S},negative_timeout={HIDDEN_S}"
    try:
        for mnt, opts in ((a, ["-o", cached]), (b, [])):
            done = subprocess.run(["bindfs", *opts, str(src), str(mnt)], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"bindfs mount failed: {done.stderr.strip()}")
            mounted.append(mnt)
        yield src, a, b
    finally:
        for mnt in mounted:
            subprocess.run(["fusermount", "-u", str(mnt)], check=False, capture_output=True)
            if os.path.ismount(mnt):
                subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize(
    ("fault", "doorbell"),
    [("driver", True), ("driver", False), ("sigkill", True)],
    ids=["doorbell", "files-only", "reaper-rings"],
)
def test_a_failure_the_filesystem_hides_reaches_every_agent_through_the_doorbell(
    tmp_path: Path, mounts: tuple[Path, Path, Path], fault: str, doorbell: bool
) -> None:
    """Rank 0 (mount b) fails; ranks 1 and 2 read through mount a, whose cache answers "no such
    file" for failures/failure-0.json for HIDDEN_S after it was looked up. With the doorbell they
    stop within a second; files only, when the cache lets go (the file-bound time). A SIGKILLed
    agent's reaper rings for it."""
    src, a, b = mounts
    trigger = tmp_path / "fail-now"
    driver = (
        'command = ["python", "-c", "import os, time\\nwhile not os.path.exists('
        f"'{trigger}'"
        '): time.sleep(0.01)\\nraise SystemExit(1)"]'
    )
    spec = tmp_path / "hidden.toml"
    text = small_spec(name="hidden", ray=False, driver=driver, heartbeat_timeout=4 * HIDDEN_S, heartbeat_interval=1.0)
    spec.write_text(
        text.replace("[launch.coordination]\n", f"[launch.coordination]\ndoorbell = {str(doorbell).lower()}\n")
    )
    u = uid("hidden")
    run_dir = src / "cluster" / u
    roots = (b, a, a)
    procs = [
        start_agent(tmp_path, spec, u, r, 3, f"127.0.0.{r + 2}", args=("--output-root", str(roots[r] / "")))
        for r in range(3)
    ]
    try:
        for r in range(3):
            wait_phase(run_dir, r, "driver", 60)
        # The readers' client looks the name up before it exists: "no such file", kept HIDDEN_S.
        assert not (a / "cluster" / u / names.failure(0)).exists()
        if fault == "driver":
            trigger.write_text("now")
        else:
            os.kill(agent_pid(run_dir, 0), signal.SIGKILL)
        codes = wait_all(procs, 120)
    finally:
        for p in procs:
            kill_tree_by_session(p)
    out = "".join(p.stdout.read() for p in procs if p.stdout)
    assert codes == ([1, 1, 1] if fault == "driver" else [-9, 1, 1]), out[-4000:]
    wait_for_file(run_dir / names.cleanup(0), 30)  # a killed agent's reaper writes its records last
    recs = failures(run_dir)
    root = recs[0]
    kind = "driver_exit" if fault == "driver" else "agent_died"
    assert root["kind"] == kind
    noticed = {r: d["wall_time"] - root["wall_time"] for r, d in recs.items() if r != 0}
    print(f"\ndoorbell={doorbell}: noticed {', '.join(f'rank {r} {s:.3f}s' for r, s in sorted(noticed.items()))}")
    if doorbell:
        assert max(noticed.values()) < 1.0, noticed
        for r in (1, 2):
            # To rank 0's failure, or (a failure wave) to the other reaction to it.
            named = recs[r]["reacting_to"]
            assert recs[r]["kind"] == "peer_failure" and named["rank"] in (0, 3 - r), recs[r]
            assert named["rank"] == 0 or recs[named["rank"]]["reacting_to"]["rank"] == 0, recs
        assert sum(read(run_dir, names.cleanup(r))["doorbell"]["accepted"] for r in (1, 2)) >= 1
    else:
        assert min(noticed.values()) > HIDDEN_S - 2, noticed
        assert "doorbell" not in read(run_dir, names.cleanup(1))
        assert names.leaf(names.DOORBELL_SECRET) not in os.listdir(run_dir)
    assert_artifacts_valid(run_dir)
    audit(run_dir, verdict="fail", rank=0, kind=kind)
    # Above all the SIGKILLed agent's driver, even one forked just before the kill (seen orphaned
    # for an hour, waiting for its trigger, before the reaper stopped marked children too).
    assert_nothing_left(run_dir, marks=(str(trigger),))


def test_a_failure_during_rendezvous_rings_the_peers_read_so_far(
    tmp_path: Path, mounts: tuple[Path, Path, Path]
) -> None:
    """Ranks 0 (mount b) and 1 (mount a) wait in rendezvous for rank 2, which never comes. Rank 0
    gets SIGTERM: rank 1, whose mount hides failures/failure-0.json for HIDDEN_S, stops within a
    second, rung by rank 0's doorbell with the peers its rendezvous had read so far."""
    src, a, b = mounts
    spec = tmp_path / "early.toml"
    spec.write_text(small_spec(name="early", ray=False, startup_timeout=120, heartbeat_timeout=4 * HIDDEN_S))
    u = uid("early")
    run_dir = src / "cluster" / u
    roots = (b, a)
    procs = [
        start_agent(tmp_path, spec, u, r, 3, f"127.0.0.{r + 2}", args=("--output-root", str(roots[r] / "")))
        for r in range(2)
    ]
    try:
        for r in range(2):
            wait_for_file(run_dir / names.address(r), 60)
        time.sleep(4)  # 16 rendezvous polls (0.25 s): each agent has read the other's address record
        assert all(p.poll() is None for p in procs)  # still waiting for rank 2
        assert not (a / "cluster" / u / names.failure(0)).exists()  # rank 1's client: "no such file"
        os.kill(agent_pid(run_dir, 0), signal.SIGTERM)
        codes = wait_all(procs, 60)
    finally:
        for p in procs:
            kill_tree_by_session(p)
    out = "".join(p.stdout.read() for p in procs if p.stdout)
    assert codes == [1, 1], out[-4000:]
    recs = failures(run_dir)
    assert recs[0]["kind"] == "signal" and recs[0]["phase"] == "rendezvous", recs[0]
    assert recs[1]["kind"] == "peer_failure" and recs[1]["reacting_to"]["rank"] == 0, recs[1]
    took = recs[1]["wall_time"] - recs[0]["wall_time"]
    print(f"\nfailure during rendezvous: rank 1 stopped {took:.3f}s after rank 0's record")
    assert took < 1.0, (took, out[-3000:])
    assert read(run_dir, names.cleanup(1))["doorbell"]["accepted"] >= 1
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)
