"""The run directory store: atomic writes, tolerant reads, and refusal of hostile layouts."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from schemas import RunDir, RunDirError, Writer, names, violations

W = Writer("a" * 64, 0, "inc0")


def test_created_with_mode_and_subdirs(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run = RunDir.create(tmp_path, "u1", mode=0o750)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(run.path).st_mode) == 0o750
    assert all((run.path / d).is_dir() for d in names.SUBDIRS)


def test_write_validates_and_stamps_the_header(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "u2", mode=0o750)
    doc = run.write_artifact(names.heartbeat(0), W, {"seq": 3, "phase": "driver"})
    assert not violations("heartbeat", doc)
    assert run.read_json(names.heartbeat(0)) == doc
    with pytest.raises(ValueError, match="does not match its schema"):
        run.write_artifact(names.heartbeat(0), W, {"seq": -1, "phase": "x"})
    assert run.read_json(names.heartbeat(0))["seq"] == 3  # nothing invalid was written


def test_tolerant_read_of_partial_missing_and_planted_files(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "u3", mode=0o750)
    assert run.read_json(names.placement(5)) is None
    (run.path / names.placement(1)).write_bytes(b'{"schema": "placem')
    assert run.read_json(names.placement(1), attempts=2, delay=0.001) is None
    os.mkfifo(run.path / names.placement(2))
    assert run.read_json(names.placement(2), attempts=1) is None  # a FIFO never blocks the reader
    (tmp_path / "secret.json").write_text('{"a": 1}')
    (run.path / names.placement(3)).symlink_to(tmp_path / "secret.json")
    assert run.read_json(names.placement(3), attempts=1) is None
    with pytest.raises(RunDirError, match="symlink"):
        run.read_bytes(names.placement(3))


def test_partial_file_then_complete_is_read_on_retry(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "u4", mode=0o750)
    target = run.path / names.heartbeat(1)
    target.write_bytes(b'{"seq": ')
    done = threading.Timer(0.03, lambda: target.write_bytes(b'{"seq": 7}'))
    done.start()
    assert run.read_json(names.heartbeat(1), attempts=5, delay=0.02) == {"seq": 7}


def test_write_replaces_a_planted_symlink_instead_of_following_it(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "u5", mode=0o750)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (run.path / names.COMPLETE).symlink_to(victim)
    run.write_bytes(names.COMPLETE, b"{}")
    assert victim.read_text() == "keep" and not (run.path / names.COMPLETE).is_symlink()


def test_hostile_layouts_are_refused(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "..", "", "x" * 200):
        with pytest.raises(RunDirError, match="uuid"):
            RunDir.create(tmp_path, bad, mode=0o750)
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "linked").symlink_to(tmp_path)
    with pytest.raises(RunDirError, match="symlink"):
        RunDir.create(tmp_path, "linked", mode=0o750)
    with pytest.raises(RunDirError, match="symlink"):
        RunDir.open(tmp_path / "cluster" / "linked")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_run_dir_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cluster" / "theirs").mkdir(parents=True)
    os.chown(tmp_path / "cluster" / "theirs", 65534, 65534)
    with pytest.raises(RunDirError, match="owned by uid 65534"):
        RunDir.create(tmp_path, "theirs", mode=0o750)
