"""The coordination protocol through two NFS-like clients of one output root.

Each client is a mount of the NFS model (tests/harness/nfs_model.py): a listing is served from
that client's cache for TTL s after it was read, a name found missing stays missing as long, open
always reaches the file. Rank 0 (the driver's node) runs on client 0, ranks 1 and 2 on client 1,
so every record one side writes reaches the other only through its caches, and inotify never
sees it (the agents there poll). TTL is small here to keep `make test` short; `make bench`
measures the same with NFS's 30 s (bench/netfs.py). Needs root and /dev/fuse; skipped otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    fuse_install,
    result_driver,
    small_spec,
    uid,
)
from tests.harness.netfs import Placement, exit_driver, run_split
from tests.harness.nfs_model import nfs_clients

pytestmark = pytest.mark.slow
TTL = 3.0
POLL = 0.5
HEARTBEAT_INTERVAL = 1.0
HEARTBEAT_TIMEOUT = 15.0
PLACEMENT = Placement((0, 1, 1))
RESULT_DRIVER = result_driver(3)


def spec(driver: str) -> str:
    return small_spec(
        name="netfs",
        driver=driver,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        heartbeat_interval=HEARTBEAT_INTERVAL,
        poll_interval=POLL,
        teardown_grace=3.0,
        ack_timeout=60.0,
        ray=False,
    )


@pytest.fixture()
def clients(tmp_path: Path) -> Iterator[tuple[Path, list[Path]]]:
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)
    src = tmp_path / "src"
    mounts = [tmp_path / "client0", tmp_path / "client1"]
    with nfs_clients(src, mounts, dir_ttl=TTL, neg_ttl=TTL):
        yield src, mounts


def test_success_through_two_nfs_clients(tmp_path: Path, clients: tuple[Path, list[Path]]) -> None:
    src, mounts = clients
    split = run_split(tmp_path, src, mounts, PLACEMENT, spec(RESULT_DRIVER), uid("netfs"))
    assert split.codes == [0, 0, 0], split.output[-4000:]
    assert not split.records  # no false failure while every cross-client record waits for a cache
    assert_artifacts_valid(split.run_dir)
    audit(split.run_dir, verdict="pass")
    assert_nothing_left(split.run_dir, marks=[split.uuid])


def test_a_driver_failure_reaches_the_other_client_within_the_cache_bound(
    tmp_path: Path, clients: tuple[Path, list[Path]]
) -> None:
    """The driver fails on client 0: ranks 1 and 2 on client 1 learn it from their own listing of
    failures/, which their client serves from its cache for up to TTL s; their heartbeat path
    (rank 0 keeps beating while it stops) is slower still. What the product promises on such a
    filesystem today: every agent reacts within TTL + one poll (+ slack), all exit 1, nothing left."""
    src, mounts = clients
    split = run_split(tmp_path, src, mounts, PLACEMENT, spec(exit_driver(4.0)), uid("netfs"))
    assert split.codes == [1, 1, 1], split.output[-4000:]
    recs = split.records
    assert recs[0]["kind"] == "driver_exit", recs
    reactions = {r: d for r, d in recs.items() if r != 0}
    assert set(reactions) == {1, 2} and {d["kind"] for d in reactions.values()} == {"peer_failure"}, recs
    noticed = {r: round(split.since_root(d["wall_time"]), 2) for r, d in reactions.items()}
    exited = {r: round(split.since_root(w), 2) for r, w in enumerate(split.exit_wall)}
    print(f"\nnetfs (TTL {TTL:g} s): reactions {noticed} s, exits {exited} s after the root record")
    bound = TTL + POLL + 2.0
    assert max(noticed.values()) < bound, (noticed, bound)
    # Exits follow the reaction by the teardown; rank 0 waits for the others' acknowledgements,
    # which reach its client through the same cache.
    assert max(exited[r] for r in (1, 2)) < bound + 3.0, exited
    assert exited[0] < 2 * bound + 3.0, exited
    assert (split.run_dir / names.failure(0)).exists()
    assert_artifacts_valid(split.run_dir)
    audit(split.run_dir, verdict="fail", rank=0, kind="driver_exit")
    assert_nothing_left(split.run_dir, marks=[split.uuid])
