"""The audit's safe reader sizes files without following links, and the loader's schema index
follows the artifacts it indexes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from audit._load import Artifact, LoadedRun
from audit.safedir import SafeDir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    (d / "heartbeats").mkdir(parents=True)
    (d / "driver-0.log").write_bytes(b"x" * 123)
    (d / "heartbeats" / "heartbeat-0.json").write_bytes(b"{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_bytes(b"s" * 999)
    (d / "driver-1.log").symlink_to(outside / "secret.log")
    (d / "linked").symlink_to(outside, target_is_directory=True)
    os.mkfifo(d / "driver-2.log")
    return d


@pytest.mark.parametrize("cached", [False, True])
def test_size_is_a_regular_files_own_and_none_for_anything_else(run_dir: Path, cached: bool) -> None:
    with SafeDir(run_dir) as safe:
        if cached:
            with safe.cached_dirs():
                sizes = {rel: safe.size(rel) for rel in _NAMES}
        else:
            sizes = {rel: safe.size(rel) for rel in _NAMES}
    assert sizes == {
        "driver-0.log": 123,
        "heartbeats/heartbeat-0.json": 2,
        "driver-1.log": None,  # a symlink: its target is never looked at
        "linked/secret.log": None,  # through a symlinked directory
        "driver-2.log": None,  # a FIFO
        "missing.log": None,
        "../outside/secret.log": None,
    }


_NAMES = (
    "driver-0.log",
    "heartbeats/heartbeat-0.json",
    "driver-1.log",
    "linked/secret.log",
    "driver-2.log",
    "missing.log",
    "../outside/secret.log",
)


def test_the_schema_index_sees_artifacts_added_after_it_was_built() -> None:
    run = LoadedRun("run")
    run.artifacts["a.json"] = Artifact("a.json", "heartbeat", 0, None, {})
    assert [a.relpath for a in run.by_schema("heartbeat")] == ["a.json"]
    run.artifacts["b.json"] = Artifact("b.json", "heartbeat", 1, None, {})
    assert [a.relpath for a in run.by_schema("heartbeat")] == ["a.json", "b.json"]
    run.artifacts = {"c.json": Artifact("c.json", "address", 2, None, {})}  # replaced whole
    assert run.by_schema("heartbeat") == [] and len(run.by_schema("address")) == 1
    run.by_schema("address").clear()  # a caller's list is its own
    assert len(run.by_schema("address")) == 1
