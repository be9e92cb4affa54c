"""The coordination protocol through two FUSE mounts of one output root with NFS-like caches.

Debian's bindfs mirrors a directory through FUSE; one mount gets `attr_timeout=30,
entry_timeout=30,negative_timeout=30` (a name looked up before it existed stays "missing" for up
to 30 s, harsher than Linux NFS), the other the defaults. Agents are split across the two
mounts. Needs root, /dev/fuse and bindfs; skipped otherwise (and says why). Mounts are removed by
path afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.proc import tempdirs
from schemas import names
from tests.harness import (
    BIN,
    agent_tmp_root,
    assert_artifacts_valid,
    audit,
    failures,
    kill_tree_by_session,
    read,
    small_spec,
    uid,
)

pytestmark = pytest.mark.slow
CACHED = "attr_timeout=30,entry_timeout=30,negative_timeout=30"
RESULT_DRIVER = (
    'command = ["python", "-c", "import time; time.sleep(3); from agent import driver_api; '
    "driver_api.write_result(optimizer_steps=1, final_loss=0.5, policy_version=1, policy_refreshes=1, "
    'judge_replies=0)"]'
)
EXIT_DRIVER = 'command = ["python", "-c", "import time; time.sleep(4); raise SystemExit(1)"]'


def spec(driver: str) -> str:
    return small_spec(
        name="netfs",
        driver=driver,
        heartbeat_timeout=15,
        heartbeat_interval=1.0,
        poll_interval=0.5,
        teardown_grace=3.0,
        ack_timeout=60.0,
        ray=False,
    )


@pytest.fixture()
def mounts(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("bindfs") is None:
        pytest.skip("needs root, /dev/fuse and bindfs (apt-get install bindfs)")
    src, a, b = tmp_path / "src", tmp_path / "a", tmp_path / "b"
    for d in (src, a, b):
        d.mkdir()
    mounted: list[Path] = []
    try:
        for mnt, opts in ((a, ["-o", CACHED]), (b, [])):
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


def start(tmp: Path, root: Path, spec_file: Path, uuid: str, rank: int) -> subprocess.Popen:
    cmd = [str(BIN / "gym-agent"), "--uuid", uuid, "--config", str(spec_file), "--output-root", str(root)]
    cmd += ["--rank", str(rank), "--replicas", "3", "--address", f"127.0.0.{rank + 2}"]
    env = {**os.environ, tempdirs.ROOT_ENV: str(agent_tmp_root(tmp)), "CUDA_VISIBLE_DEVICES": "0,1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def run_split(tmp: Path, mounts: tuple[Path, Path, Path], driver: str) -> tuple[Path, list[int], list[float], str]:
    src, a, b = mounts
    spec_file = tmp / "netfs.toml"
    spec_file.write_text(spec(driver))
    uuid = uid("netfs")
    # Rank 0 (the driver's node) writes through the plain mount; ranks 1 and 2 read everything it
    # writes through the cached one (and rank 0 reads theirs through its own).
    procs = [start(tmp, root, spec_file, uuid, r) for r, root in enumerate((b, a, a))]
    exited: list[float] = []
    try:
        codes = []
        for p in procs:
            codes.append(p.wait(240))
            exited.append(time.time())
        out = "".join(p.stdout.read() for p in procs if p.stdout)
    finally:
        for p in procs:
            kill_tree_by_session(p)
    return src / "cluster" / uuid, codes, exited, out


def test_the_cached_mount_hides_a_new_name_it_looked_up_before(mounts: tuple[Path, Path, Path]) -> None:
    """The caches are real: a name probed through the cached mount before it existed stays
    unopenable there after the other mount created it (it is listed, though)."""
    _, a, b = mounts
    with pytest.raises(FileNotFoundError):
        (a / "probe").read_text()
    (b / "probe").write_text("x")
    assert "probe" in os.listdir(a)
    with pytest.raises(FileNotFoundError):
        (a / "probe").read_text()


def test_success_through_two_cached_mounts(tmp_path: Path, mounts: tuple[Path, Path, Path]) -> None:
    run_dir, codes, _, out = run_split(tmp_path, mounts, RESULT_DRIVER)
    assert codes == [0, 0, 0], out[-4000:]
    assert not failures(run_dir)  # no false failure
    assert_artifacts_valid(run_dir)
    audit(run_dir, verdict="pass")


def test_failure_propagation_through_two_cached_mounts(tmp_path: Path, mounts: tuple[Path, Path, Path]) -> None:
    """The driver fails on rank 0 (cached mount): the bound measured here is one poll interval
    plus what the caches allow; it is printed for the README."""
    run_dir, codes, exited, out = run_split(tmp_path, mounts, EXIT_DRIVER)
    assert codes == [1, 1, 1], out[-4000:]
    recs = failures(run_dir)
    root = read(run_dir, names.failure(0))
    assert root["kind"] == "driver_exit"
    reactions = {r: d for r, d in recs.items() if r != 0}
    assert {d["kind"] for d in reactions.values()} == {"peer_failure"}, recs
    noticed = {r: round(d["wall_time"] - root["wall_time"], 2) for r, d in reactions.items()}
    last_exit = round(max(exited) - root["wall_time"], 2)
    print(f"\nnetfs propagation: noticed after {noticed} s; last agent exit {last_exit} s after the root record")
    # poll 0.5 s; attr/entry/negative caches 30 s: a reaction must come within one poll + 30 s.
    assert max(noticed.values()) < 0.5 + 30 + 2, noticed
    audit(run_dir, verdict="fail", rank=0, kind="driver_exit")
