"""The GPU residue check at teardown: once every process group of the run is gone, each planned
GPU's used memory must come back to what the preflight saw, within `gpu_release_timeout`.

A GPU whose memory stays above that (beyond RESIDUE_MARGIN: a driver's own bookkeeping moves a
little), or that carries a compute process the preflight did not see, is residue: the next job on
this node would inherit it. cleanup-RANK.json records it with the PIDs still holding memory, and
the audit reports the error `gpu.residue`. Only where the preflight read the GPUs through NVML.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from agent.ground.nvml import open_nvml
from agent.preflight._gpus import GpuState, read_gpus

__all__ = ["POLL_S", "RESIDUE_MARGIN", "residue"]

RESIDUE_MARGIN = 128 << 20  # bytes; an idle CUDA context alone holds more than this
POLL_S = 0.5


def _left(before: GpuState, now: GpuState) -> bool:
    if now.index is None:
        return False  # gone from NVML (reset, fallen off the bus): nothing to compare
    grew = (now.used_bytes or 0) > (before.used_bytes or 0) + RESIDUE_MARGIN
    return grew or bool(now.pids_seen - before.pids_seen)


def residue(
    baseline: Sequence[GpuState],
    timeout: float,
    *,
    module: Any = None,
    abort: Callable[[], bool] = lambda: False,
) -> list[dict[str, Any]]:
    """The planned GPUs still holding memory after `timeout`, as cleanup-RANK.json's `gpu_residue`
    entries; [] when all came back (or NVML is gone)."""
    found = [g for g in baseline if g.index is not None]
    if not found:
        return []
    nvml, _why = open_nvml(module)
    if nvml is None:
        return []
    started = time.monotonic()
    try:
        while True:
            now = read_gpus(nvml, [(g.device, g.visible) for g in found])
            left = [(b, n) for b, n in zip(found, now, strict=True) if _left(b, n)]
            waited = time.monotonic() - started
            if not left or waited >= timeout or abort():
                break
            time.sleep(min(POLL_S, max(0.0, timeout - waited)))
    finally:
        nvml.close()
    return [
        {
            "device": n.device,
            "uuid": n.uuid,
            "index": n.index,
            "used_bytes": n.used_bytes,
            "preflight_used_bytes": b.used_bytes,
            "waited_s": round(waited, 3),
            "pids": [p.to_json() for p in n.processes if p.pid not in b.pids_seen][:256],
        }
        for b, n in left
    ]
