"""A real filesystem that fills up: a small tmpfs mounted for one run (root only)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` (e.g. "3m") at `path`, created if missing; why not, if it cannot."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return "a real full filesystem needs a tmpfs mount (root)"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return None if done.returncode == 0 else f"cannot mount a tmpfs here: {done.stderr.decode().strip()}"


@contextlib.contextmanager
def mounted(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path` for the block (the test is skipped where none can be mounted)."""
    why_not = mount_tmpfs(path, size)
    if why_not:
        pytest.skip(why_not)
    try:
        yield path
    finally:
        unmount(path)


def unmount(path: Path) -> None:
    """Lazily: a process of the run may still hold a file open there."""
    subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write into `path`/filler until the filesystem is full; the filler, to unlink for space."""
    filler = path / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler
