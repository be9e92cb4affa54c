"""Two NFS clients create one run directory at the same moment (issue 46, item 6), on the NFS model
(tests/harness/nfs_model.py) with a client that keeps its negative entry after a refused mkdir.

Client a looks the name up and finds it missing, client b creates it, then a's RunDir.create: its
mkdir fails EEXIST and its open answers ENOENT from the stale cache. The agent re-opens the parent
(revalidating it) and looks again within a bound; when the name never shows, a clear error names
the path and the cache. Needs root and /dev/fuse; skipped otherwise.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from schemas import names
from schemas.safe_io import RunDirError
from schemas.store import RunDir
from tests.harness import fuse_install
from tests.harness.nfs_model import nfs_clients

MODE = 0o750


def _fuse() -> None:
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)


def test_the_run_directory_made_by_another_client_between_a_lookup_and_a_create(tmp_path: Path) -> None:
    """`cluster` and the uuid directory each appear on the server between a's lookup (missing) and
    a's mkdir (EEXIST); a's next lookups answer ENOENT until it revalidates the parent."""
    _fuse()
    src, a, b = tmp_path / "src", tmp_path / "a", tmp_path / "b"
    with nfs_clients(
        src, [a, b], dir_ttl=60, neg_ttl=60, stale_eexist=True, cto_dirs=True, race_mkdir=["cluster", "r1"]
    ):
        t0 = time.monotonic()
        with RunDir.create(a, "r1", mode=MODE) as run:
            assert run.path == a / "cluster" / "r1"
            run.write_bytes("probe", b"x")
            assert set(names.SUBDIRS) <= set(run.listdir())
        assert time.monotonic() - t0 < 5.0  # revalidation found them, not the 60 s cache expiry
        assert (b / "cluster" / "r1" / "probe").read_bytes() == b"x"
        assert (src / "cluster" / "r1" / "probe").read_bytes() == b"x"


def test_a_run_directory_that_never_becomes_visible_ends_in_a_clear_error(tmp_path: Path) -> None:
    """nocto: re-opening the parent does not revalidate it, so the stale entry outlives the bound."""
    _fuse()
    src, a = tmp_path / "src", tmp_path / "a"
    with nfs_clients(src, [a], dir_ttl=60, neg_ttl=60, stale_eexist=True, cto_dirs=False, race_mkdir=["r3"]):
        t0 = time.monotonic()
        with pytest.raises(RunDirError) as caught:
            RunDir.create(a, "r3", mode=MODE)
        waited = time.monotonic() - t0
    message = str(caught.value)
    assert str(a / "cluster" / "r3") in message
    assert "negative lookup" in message and "lookupcache=positive" in message and "acdirmax" in message
    assert 2.0 < waited < 10.0  # bounded, and not given up at the first ENOENT


def test_subdirectories_made_by_another_client_in_the_same_race(tmp_path: Path) -> None:
    """The same race one level down: a peer on the other mount makes a record directory of the run
    (addresses/) or an attempt's directory between this agent's lookup and its mkdir."""
    _fuse()
    src, a = tmp_path / "src", tmp_path / "a"
    sub = names.SUBDIRS[0]
    race = [sub, "2"]
    with (
        nfs_clients(src, [a], dir_ttl=60, neg_ttl=60, stale_eexist=True, cto_dirs=True, race_mkdir=race),
        RunDir.create(a, "r4", mode=MODE) as run,
    ):
        run.ensure_dir(names.attempt_dir(2))
        assert sub in run.listdir()
    assert (src / "cluster" / "r4" / names.attempt_dir(2)).is_dir()
