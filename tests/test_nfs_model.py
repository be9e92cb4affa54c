"""The NFS model itself (tests/harness/nfs_model.py): two real FUSE mounts of one directory, each
one client with its own listing and negative-lookup caches, behave as NFS clients do.

Needs root and /dev/fuse (libfuse 2 is installed with apt-get when missing); skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.coord._dirwatch import DirWatch
from tests.harness import fuse_install
from tests.harness.nfs_model import ClientCache, NfsClient, mounted, nfs_clients

TTL = 1.0


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_cache_bookkeeping_expires_and_drops_on_own_changes() -> None:
    clock = FakeClock()
    cache = ClientCache(dir_ttl=30, neg_ttl=10, clock=clock)
    cache.store_listing("/d", ["a"])
    cache.store_missing("/d/x")
    cache.store_missing("/e/y")
    clock.t += 9
    assert cache.listing("/d") == ["a"] and cache.is_missing("/d/x")
    clock.t += 2
    assert not cache.is_missing("/d/x")  # neg_ttl over
    assert cache.listing("/d") == ["a"]
    clock.t += 20
    assert cache.listing("/d") is None  # dir_ttl over
    cache.store_listing("/d", ["a"])
    cache.store_missing("/d/x")
    cache.changed("/d/new")  # our own create in /d
    assert cache.listing("/d") is None and not cache.is_missing("/d/x")
    cache.store_listing("/e/sub", ["z"])
    cache.changed("/e")  # /e renamed or removed: what lay below goes too
    assert cache.listing("/e/sub") is None and not cache.is_missing("/e/y")
    assert ClientCache.split("/top") == ("/", "top")


@pytest.fixture()
def two(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)
    src, a, b = tmp_path / "src", tmp_path / "a", tmp_path / "b"
    with nfs_clients(src, [a, b], dir_ttl=TTL, neg_ttl=TTL):
        yield src, a, b
    assert not mounted(a) and not mounted(b)


def visible_after(probe: Callable[[], object], deadline: float = 10.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline:
        try:
            if probe():
                return time.monotonic() - t0
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"not visible after {deadline} s")


def test_another_clients_create_is_hidden_from_a_listing_for_the_cache_time(two: tuple[Path, Path, Path]) -> None:
    _, a, b = two
    (a / "d").mkdir()
    assert os.listdir(a / "d") == []  # A has looked
    looked = time.monotonic()
    (b / "d" / "new").write_text("x")
    assert "new" in os.listdir(b / "d")  # B's own create: at once for B
    assert os.listdir(a / "d") == []
    assert (a / "d" / "new").read_text() == "x"  # never looked up by name: found
    visible_after(lambda: "new" in os.listdir(a / "d"))
    assert time.monotonic() - looked >= TTL - 0.1


def test_a_name_found_missing_stays_missing_for_the_cache_time(two: tuple[Path, Path, Path]) -> None:
    _, a, b = two
    for probe in (os.stat, Path.read_text):
        name = f"late-{probe.__name__}"
        with pytest.raises(FileNotFoundError):
            probe(a / name)
        looked = time.monotonic()
        (b / name).write_text("x")
        with pytest.raises(FileNotFoundError):
            os.stat(a / name)
        with pytest.raises(FileNotFoundError):
            (a / name).read_text()
        visible_after(lambda n=name: os.stat(a / n))
        assert time.monotonic() - looked >= TTL - 0.1
        assert (a / name).read_text() == "x"


def test_own_changes_are_visible_to_the_same_client_at_once(two: tuple[Path, Path, Path]) -> None:
    _, a, _b = two
    assert os.listdir(a) == []
    with pytest.raises(FileNotFoundError):
        os.stat(a / "mine")
    (a / "tmp").write_text("1")
    os.rename(a / "tmp", a / "mine")  # the agents' own write: temp file, then rename
    assert os.listdir(a) == ["mine"]
    assert (a / "mine").read_text() == "1"
    os.unlink(a / "mine")
    assert os.listdir(a) == []


def test_content_is_fresh_after_another_client_renames_over_it(two: tuple[Path, Path, Path]) -> None:
    _, a, b = two
    (b / "hb.json").write_text('{"seq": 1}')
    assert (a / "hb.json").read_text() == '{"seq": 1}'
    for seq in range(2, 5):
        doc = f'{{"seq": {seq}, "longer": true}}'
        (b / "hb.tmp").write_text(doc)
        os.rename(b / "hb.tmp", b / "hb.json")
        assert (a / "hb.json").read_text() == doc


def test_exclusive_create_and_link_are_atomic_across_clients(two: tuple[Path, Path, Path]) -> None:
    _, a, b = two
    with pytest.raises(FileNotFoundError):
        os.stat(b / "claim")  # B believes "claim" missing for TTL s
    os.close(os.open(a / "claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    with pytest.raises(FileExistsError):
        os.open(b / "claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)  # the server decides
    (a / "t").write_text("x")
    os.link(a / "t", a / "won")
    with pytest.raises(FileExistsError):
        os.link(b / "t", b / "won")
    assert os.stat(a / "t").st_nlink == 2


def test_a_create_that_finds_the_name_taken_makes_it_visible(two: tuple[Path, Path, Path]) -> None:
    """As Linux NFS drops the dentry of a failed create: mkdir/O_EXCL that the server refuses with
    EEXIST leaves the name visible to this client (the agents' run-directory setup relies on it)."""
    _, a, b = two
    for name, create in (("d", lambda p: p.mkdir()), ("f", lambda p: os.close(os.open(p, os.O_CREAT | os.O_EXCL)))):
        with pytest.raises(FileNotFoundError):
            os.stat(a / name)
        create(b / name)
        with pytest.raises(FileExistsError):
            create(a / name)
        os.stat(a / name)


def test_modes_and_owners_pass_through(two: tuple[Path, Path, Path]) -> None:
    src, a, _b = two
    (a / "secret").write_text("s")
    os.chmod(a / "secret", 0o600)
    assert (src / "secret").stat().st_mode & 0o777 == 0o600
    old = os.umask(0o077)
    try:
        (a / "private").mkdir()
    finally:
        os.umask(old)
    assert (src / "private").stat().st_mode & 0o777 == 0o700  # the caller's umask, applied once


def test_other_users_use_it_with_the_kernels_permission_checks() -> None:
    """allow_other and default_permissions: a non-root process creates files it owns, and is
    refused what the modes refuse it."""
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)
    top = Path(tempfile.mkdtemp(prefix="gym-nfs-model-"))  # pytest's own dirs are closed to others
    try:
        os.chmod(top, 0o755)
        src, a = top / "src", top / "a"
        with nfs_clients(src, [a], dir_ttl=TTL, neg_ttl=TTL):
            os.chmod(a, 0o755)
            (a / "shared").mkdir()
            os.chmod(a / "shared", 0o777)
            (a / "private").write_text("root only")
            os.chmod(a / "private", 0o600)
            script = 'echo x > "$1/shared/mine" || exit 2; cat "$1/private" 2>/dev/null && exit 3; exit 0'
            done = subprocess.run(
                ["sh", "-c", script, "sh", str(a)], user=65534, group=65534, cwd="/", capture_output=True, timeout=30
            )
            assert done.returncode == 0, done.stderr
            st = (src / "shared" / "mine").stat()
            assert (st.st_uid, st.st_gid) == (65534, 65534)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_inotify_sees_this_clients_writes_only(two: tuple[Path, Path, Path]) -> None:
    """Why agents on another client poll: a record written through B never wakes a watch on A."""
    _, a, b = two
    (a / "failures").mkdir()
    watch = DirWatch.open(str(a / "failures"))
    try:
        (b / "failures" / "from-b").write_text("x")
        time.sleep(0.3)
        assert not watch.new_names(lambda n: True)
        (a / "failures" / "from-a").write_text("x")
        time.sleep(0.3)
        assert watch.new_names(lambda n: n == "from-a")
    finally:
        watch.close()


def test_stall_blocks_the_mount_until_resume_and_unmount_still_works(tmp_path: Path) -> None:
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)
    src, a = tmp_path / "src", tmp_path / "a"
    clients: list[NfsClient] = []
    with pytest.raises(RuntimeError, match="the test failed"), nfs_clients(src, [a], dir_ttl=TTL, neg_ttl=TTL) as cl:
        clients = cl
        (src / "f").write_text("x")
        done: list[str] = []
        errors: list[BaseException] = []

        def read() -> None:
            try:
                done.append((a / "f").read_text())
            except BaseException as exc:  # noqa: BLE001 - named by the assertion below
                errors.append(exc)

        cl[0].stall()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(1.0)
        assert reader.is_alive() and not done, (done, errors)  # hung while the daemon is stopped
        cl[0].resume()
        reader.join(5.0)
        assert done == ["x"]
        cl[0].stall()  # left stalled: the teardown must still unmount
        raise RuntimeError("the test failed")
    assert not mounted(a)
    assert clients[0].proc is not None and clients[0].proc.poll() is not None


def test_cache_revalidation_drops_negatives_only_when_the_directory_changed() -> None:
    clock = FakeClock()
    cache = ClientCache(dir_ttl=30, neg_ttl=30, clock=clock)
    cache.store_missing("/d/x", parent_version=(1,))
    cache.store_listing("/d", [])
    cache.revalidate("/d", (1,))  # unchanged: the stale view stays
    assert cache.is_missing("/d/x") and cache.listing("/d") == []
    cache.revalidate("/d", (2,))  # another client changed /d
    assert not cache.is_missing("/d/x") and cache.listing("/d") is None


@pytest.mark.parametrize("cto_dirs", [True, False])
def test_a_refused_mkdir_keeps_the_stale_negative_entry_until_the_parent_is_reopened(
    tmp_path: Path, cto_dirs: bool
) -> None:
    """`stale_eexist`: the race of issue 46 item 6. Client a looked the name up (missing), b made it,
    a's mkdir fails EEXIST and a's next lookup still says ENOENT; with `cto_dirs` re-opening the
    parent by name revalidates it, without (nocto) the name stays missing for the negative timeout."""
    reason = fuse_install.unavailable_reason()
    if reason:
        pytest.skip(reason)
    src, a, b = tmp_path / "src", tmp_path / "a", tmp_path / "b"
    with nfs_clients(src, [a, b], dir_ttl=60, neg_ttl=60, stale_eexist=True, cto_dirs=cto_dirs):
        with pytest.raises(FileNotFoundError):
            os.stat(a / "d")
        time.sleep(0.05)  # the parent's mtime moves on (coarse timestamps)
        (b / "d").mkdir()
        with pytest.raises(FileExistsError):
            (a / "d").mkdir()
        with pytest.raises(FileNotFoundError):
            os.stat(a / "d")
        os.close(os.open(a, os.O_RDONLY | os.O_DIRECTORY))  # re-open the parent by name
        if cto_dirs:
            assert os.path.isdir(a / "d")
        else:
            with pytest.raises(FileNotFoundError):
                os.stat(a / "d")
