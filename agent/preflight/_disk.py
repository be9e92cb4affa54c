"""The disk check: the output root and the checkpoint directory have `min_free_disk` free.

A path not created yet is measured where it will be created (its nearest existing parent). Two
paths on one filesystem are measured once. A quota below the filesystem's free space is not seen
(statvfs reports the filesystem): the run directory's own full-disk handling covers that.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agent.preflight._outcome import Observed, gib

__all__ = ["check_disk"]


def _existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_disk(paths: Sequence[tuple[str, Path]], min_free: int) -> Observed:
    problems: list[str] = []
    measured: list[dict[str, object]] = []
    seen: dict[int, str] = {}
    for what, path in paths:
        at = _existing(path)
        try:
            st = os.statvfs(at)
            dev = os.stat(at).st_dev
        except OSError as exc:
            problems.append(f"the {what} {path} cannot be measured ({exc.strerror or exc}): check that it is mounted")
            continue
        if dev in seen:
            continue  # the same filesystem as the one measured for `seen[dev]`
        seen[dev] = what
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        measured.append(
            {"what": what, "path": str(path), "measured_at": str(at), "free_bytes": free, "total_bytes": total}
        )
        if free < min_free:
            problems.append(
                f"the {what} {path} has {gib(free)} free of {gib(total)}, below [launch.preflight] min_free_disk = "
                f"{gib(min_free)}: free space there, or point [output] root at a larger filesystem"
            )
    summary = "; ".join(f"{m['what']} {gib(int(m['free_bytes']))} free" for m in measured)  # type: ignore[call-overload]
    return Observed(summary or "nothing measured", tuple(problems), {"paths": measured})
