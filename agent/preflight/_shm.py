"""The shared-memory check: /dev/shm has `min_free_shm` free, and the segments earlier jobs left
there are reported (owner, size, age).

NCCL's transport (`nccl-*`), torch's file_system sharing (`torch_*`), Python's shared_memory that
vLLM and SGLang use (`psm_*`, and `sem.mp-*` semaphores), and names carrying `vllm` or `sglang`
are known leftovers when their job is gone: a full /dev/shm makes the next NCCL fail with "No
space left on device" minutes in. With `clean_shm = true` a segment is removed only when this
user owns it, it is a regular file (never a link) and it was last written before this job started.
"""

from __future__ import annotations

import os
import pwd
import stat
import time
from pathlib import Path
from typing import Any

from agent.preflight._outcome import Observed, gib

__all__ = ["KINDS", "MAX_LISTED", "NAMED", "SHM", "check_shm", "kind_of"]

SHM = Path("/dev/shm")
KINDS: tuple[tuple[str, str], ...] = (
    ("nccl-", "NCCL"),
    ("torch_", "torch"),
    ("psm_", "Python shared_memory (vLLM, SGLang)"),
    ("sem.mp-", "Python multiprocessing"),
)
NAMED = (("vllm", "vLLM"), ("sglang", "SGLang"))
MAX_LISTED = 100


def kind_of(name: str) -> str | None:
    low = name.lower()
    for prefix, kind in KINDS:
        if low.startswith(prefix):
            return kind
    return next((kind for word, kind in NAMED if word in low), None)


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _free(root: Path) -> tuple[int, int]:
    st = os.statvfs(root)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _leftovers(root: Path, clean: bool, job_started: float) -> list[dict[str, Any]]:
    """The known leftover segments in `root`; with `clean`, the ones this user may remove are
    removed (and marked so)."""
    segments: list[dict[str, Any]] = []
    me = os.geteuid()
    now = time.time()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with os.scandir(fd) as it:
            for entry in it:
                kind = kind_of(entry.name)
                if kind is None:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone meanwhile
                seg = {
                    "name": entry.name,
                    "kind": kind,
                    "owner": _owner(st.st_uid),
                    "bytes": st.st_blocks * 512,
                    "age_s": round(max(0.0, now - st.st_mtime), 1),
                    "removed": False,
                }
                removable = stat.S_ISREG(st.st_mode) and st.st_uid == me and st.st_mtime < job_started
                if clean and removable:
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                        seg["removed"] = True
                    except OSError:
                        pass
                segments.append(seg)
    finally:
        os.close(fd)
    return segments


def check_shm(min_free: int, clean: bool, job_started: float, root: Path = SHM) -> Observed:
    """Free space and leftover segments of `root` (the node's /dev/shm)."""
    try:
        free, total = _free(root)
    except OSError as exc:
        return Observed(f"cannot read {root} ({exc.strerror or exc})", (f"{root} cannot be read: {exc}",))
    segments = _leftovers(root, clean, job_started)
    removed = [s for s in segments if s["removed"]]
    if removed:
        free, total = _free(root)
    kept = [s for s in segments if not s["removed"]]
    held = sum(int(s["bytes"]) for s in kept)
    by_kind: dict[str, int] = {}
    for s in kept:
        by_kind[str(s["kind"])] = by_kind.get(str(s["kind"]), 0) + 1
    summary = f"{root} {gib(free)} free of {gib(total)}"
    if segments:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(by_kind.items()))
        summary += f"; {len(kept)} leftover segment(s) of earlier jobs ({kinds or 'none'}; {gib(held)})"
        if removed:
            summary += f", {len(removed)} removed (clean_shm)"
    problems = []
    if free < min_free:
        hint = (
            f"; {len(kept)} leftover segment(s) hold {gib(held)} (clean_shm = true removes this user's older ones)"
            if kept
            else ""
        )
        problems.append(
            f"{root} has {gib(free)} free, below [launch.preflight] min_free_shm = {gib(min_free)}{hint}: "
            "free it or give the job a larger /dev/shm (docker --shm-size, Beaker shared_memory)"
        )
    facts = {
        "path": str(root),
        "free_bytes": free,
        "total_bytes": total,
        "segments": segments[:MAX_LISTED],
        "segments_found": len(segments),
        "removed": len(removed),
    }
    return Observed(summary, tuple(problems), facts)
