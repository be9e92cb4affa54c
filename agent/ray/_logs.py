"""Keep Ray's own session logs: copy them into the run directory before the temp dir is removed.

Ray writes raylet, GCS and worker logs below its temp dir (`session_*/logs/`), which the agent
deletes at teardown; a raylet killed by the OOM killer would leave no evidence. Each file keeps
its newest bytes (a dying process writes last), the most telling files first (raylet, GCS, then
workers' .err), within one byte budget per node.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from schemas import RunDir, RunDirError, credentials

__all__ = ["CUT_NOTE", "Kept", "PER_FILE_MAX", "SAFE_LEAF", "keep", "session_log_files"]

PER_FILE_MAX = 2 * 1024 * 1024
SAFE_LEAF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CUT_NOTE = b"...[earlier bytes not kept; the file had %d bytes]\n"


@dataclass(frozen=True)
class Kept:
    files: tuple[str, ...]
    bytes: int
    skipped: int  # files left out by the budget

    def describe(self) -> str:
        extra = f", {self.skipped} more left out (ray.session_log_bytes)" if self.skipped else ""
        return f"{len(self.files)} file(s), {self.bytes} bytes{extra}"


def _rank(leaf: str) -> tuple[int, str]:
    """Raylet and GCS first, then the dashboard/monitor, then workers' .err before .out."""
    if leaf.startswith(("raylet", "gcs_server")):
        return 0, leaf
    if leaf.endswith(".err"):
        return 1, leaf
    if leaf.startswith(("dashboard", "monitor", "runtime_env", "log_monitor")):
        return 2, leaf
    return 3, leaf


def session_log_files(temp_dir: str) -> list[Path]:
    """Regular, non-empty log files of every session below `temp_dir`, most telling first."""
    root = Path(temp_dir)
    found: dict[str, Path] = {}
    for logs in sorted(root.glob("session_2*/logs")):  # real session dirs, not the session_latest link
        if logs.is_symlink() or not logs.is_dir():
            continue
        for f in logs.iterdir():
            try:
                if f.is_symlink() or not f.is_file() or f.stat().st_size == 0:
                    continue
            except OSError:
                continue
            if SAFE_LEAF.match(f.name) and f.suffix in (".out", ".err", ".log", ".txt"):
                found.setdefault(f.name, f)
    return [found[k] for k in sorted(found, key=_rank)]


def _tail(path: Path, limit: int) -> bytes:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= limit:
            return fh.read(limit)
        note = CUT_NOTE % size  # counted in the limit: the budget is what lands on disk
        room = max(0, limit - len(note))
        fh.seek(size - room)
        data = fh.read(room)
    nl = data.find(b"\n")
    return note + (data[nl + 1 :] if 0 <= nl < 4096 else data)


def keep(temp_dir: str, run: RunDir, subdir: str, budget: int) -> Kept:
    """Copy the session logs of `temp_dir` into `run`/`subdir`, at most `budget` bytes in all.
    Never raises: this is evidence gathering during teardown."""
    if budget <= 0:
        return Kept((), 0, 0)
    try:
        files = session_log_files(temp_dir)
    except OSError:
        return Kept((), 0, 0)
    if not files:
        return Kept((), 0, 0)
    kept: list[str] = []
    total = skipped = 0
    try:
        run.ensure_dir(subdir)
    except (OSError, RunDirError):
        return Kept((), 0, len(files))
    for f in files:
        room = min(PER_FILE_MAX, budget - total)
        if room < 1024:
            skipped += 1
            continue
        try:
            data = credentials.redact_bytes(_tail(f, room))  # Ray's logs quote a job's command lines
            run.write_bytes(f"{subdir}/{f.name}", data)
        except (OSError, RunDirError):
            skipped += 1
            continue
        kept.append(f.name)
        total += len(data)
    return Kept(tuple(kept), total, skipped)
