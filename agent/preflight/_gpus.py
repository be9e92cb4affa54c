"""The planned GPUs as NVML sees them (nvidia-ml-py's `pynvml`, NVIDIA's own binding: structured
answers, not `nvidia-smi` text), and the preflight's GPU check.

NVML enumerates the node's physical GPUs whatever CUDA_VISIBLE_DEVICES says; each planned device's
entry there is looked up as NVML does: a number is NVML's index, `GPU-...`/`MIG-...` a UUID.
Without NVML (no NVIDIA driver: CPU machines, the local demo whose GPU indices are labels) the
check is skipped and never fails the run.

What fails a GPU: the planned device missing; a compute process on it (at preflight nothing of
this run uses a GPU yet, so every process there belongs to another job: its PID and, when this
node's process namespace shows it, its command line); less free memory than
`min_free_gpu_memory` of the total; volatile uncorrectable ECC errors, or a page retirement or row
remapping waiting for a reset. Each failing GPU is named by its NVML index and UUID.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from agent.ground.nvml import Nvml, open_nvml
from agent.preflight._outcome import Observed, cap, gib

__all__ = ["CMDLINE_CHARS", "GpuProcess", "GpuState", "check_gpus", "judge", "read_gpus"]

CMDLINE_CHARS = 1000


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None
    cmdline: str | None  # None: not visible from this process namespace

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "used_bytes": self.used_bytes, "cmdline": self.cmdline}

    def describe(self) -> str:
        mem = f", {gib(self.used_bytes)}" if self.used_bytes is not None else ""
        what = f"`{self.cmdline[:160]}`" if self.cmdline else "(command line not visible here)"
        return f"pid {self.pid} {what}{mem}"


@dataclass(frozen=True)
class GpuState:
    """One planned device: where the plan put it, what NVML says of it (index None: not found)."""

    device: int
    visible: str
    index: int | None
    uuid: str | None
    name: str | None = None
    total_bytes: int | None = None
    used_bytes: int | None = None
    processes: tuple[GpuProcess, ...] = ()
    ecc_uncorrected: int | None = None
    retirement_pending: bool | None = None
    error: str = ""  # why NVML could not find or read it
    pids_seen: frozenset[int] = field(default_factory=frozenset)

    @property
    def label(self) -> str:
        """How a failing GPU is named: NVML index and UUID, and the plan's device."""
        if self.index is None:
            return f"planned device {self.device} (CUDA_VISIBLE_DEVICES entry {self.visible!r})"
        return f"GPU {self.index} ({self.uuid}; planned device {self.device})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device, "visible": self.visible, "index": self.index, "uuid": self.uuid}
        if self.index is not None:
            out.update(
                name=self.name,
                total_bytes=self.total_bytes,
                used_bytes=self.used_bytes,
                processes=[p.to_json() for p in self.processes],
                ecc_uncorrected=self.ecc_uncorrected,
                retirement_pending=self.retirement_pending,
            )
        return out

    def naming(self) -> dict[str, Any]:
        """What the placement record keeps: device, visible entry, NVML index and UUID."""
        return {"device": self.device, "visible": self.visible, "index": self.index, "uuid": self.uuid}


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _optional(call: Any, lib: Any) -> Any:
    """`call()`, or None when this GPU does not support it (NVML_ERROR_NOT_SUPPORTED and the like)."""
    try:
        return call()
    except lib.NVMLError:
        return None


def _cmdline(pid: int) -> str | None:
    try:
        return cap(" ".join(psutil.Process(pid).cmdline()), CMDLINE_CHARS) or None
    except (psutil.Error, OSError):
        return None


def _handle(lib: Any, visible: str) -> Any:
    if visible.isdigit():
        return lib.nvmlDeviceGetHandleByIndex(int(visible))
    if visible.startswith(("GPU-", "MIG-")):
        return lib.nvmlDeviceGetHandleByUUID(visible)
    raise ValueError(f"{visible!r} is neither an NVML index nor a GPU UUID")


def _pending(lib: Any, h: Any) -> bool | None:
    retired = _optional(lambda: lib.nvmlDeviceGetRetiredPagesPendingStatus(h), lib)
    remapped = _optional(lambda: lib.nvmlDeviceGetRemappedRows(h), lib)  # (corrected, uncorrected, pending, failed)
    if retired is None and remapped is None:
        return None
    pending = bool(retired) if retired is not None else False
    if remapped is not None:
        pending = pending or bool(remapped[2]) or bool(remapped[3])
    return pending


def read_gpus(nvml: Nvml, devices: Sequence[tuple[int, str]]) -> tuple[GpuState, ...]:
    """The state of each planned (device, CUDA_VISIBLE_DEVICES entry), in plan order."""
    lib = nvml.lib
    out = []
    for device, visible in devices:
        try:
            h = _handle(lib, visible)
            index = int(lib.nvmlDeviceGetIndex(h))
            uuid = _text(lib.nvmlDeviceGetUUID(h))
        except (lib.NVMLError, ValueError) as exc:
            out.append(GpuState(device, visible, None, None, error=str(exc) or type(exc).__name__))
            continue
        mem = lib.nvmlDeviceGetMemoryInfo(h)
        procs = tuple(
            GpuProcess(int(p.pid), int(p.usedGpuMemory) if p.usedGpuMemory is not None else None, _cmdline(int(p.pid)))
            for p in (_optional(lambda h=h: lib.nvmlDeviceGetComputeRunningProcesses(h), lib) or [])
        )
        ecc = _optional(
            lambda h=h: lib.nvmlDeviceGetTotalEccErrors(
                h, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_VOLATILE_ECC
            ),
            lib,
        )
        out.append(
            GpuState(
                device,
                visible,
                index,
                uuid,
                name=_text(_optional(lambda h=h: lib.nvmlDeviceGetName(h), lib) or "") or None,
                total_bytes=int(mem.total),
                used_bytes=int(mem.used),
                processes=procs,
                ecc_uncorrected=int(ecc) if ecc is not None else None,
                retirement_pending=_pending(lib, h),
                pids_seen=frozenset(p.pid for p in procs),
            )
        )
    return tuple(out)


def _ours() -> set[int]:
    """This agent and its descendants: never another job's process."""
    me = psutil.Process(os.getpid())
    try:
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def judge(states: Sequence[GpuState], min_free: float, nvml_count: int | None) -> Observed:
    """The GPU check's verdict on the planned devices' states."""
    problems: list[str] = []
    ours = _ours()
    for g in states:
        if g.index is None:
            seen = f"NVML sees {nvml_count} GPU(s) here" if nvml_count is not None else "NVML cannot list them"
            problems.append(
                f"{g.label} does not exist here ({g.error}; {seen}): fix the allocation (CUDA_VISIBLE_DEVICES) "
                "or exclude this node"
            )
            continue
        foreign = [p for p in g.processes if p.pid not in ours]
        if foreign:
            held = sum(p.used_bytes or 0 for p in foreign)
            who = "; ".join(p.describe() for p in foreign[:4]) + (
                f"; +{len(foreign) - 4} more" if len(foreign) > 4 else ""
            )
            problems.append(
                f"{g.label} is used by {len(foreign)} process(es) of another job ({gib(held)}): {who}; "
                "stop them (they outlived their job) or exclude this node"
            )
        if g.total_bytes:
            free = g.total_bytes - (g.used_bytes or 0)
            if free < min_free * g.total_bytes:
                problems.append(
                    f"{g.label} has {gib(free)} free of {gib(g.total_bytes)} ({free / g.total_bytes:.0%}), below "
                    f"[launch.preflight] min_free_gpu_memory = {min_free:g}: free it or exclude this node"
                )
        if g.ecc_uncorrected:
            problems.append(
                f"{g.label} reports {g.ecc_uncorrected} uncorrectable ECC error(s) since its last reset: "
                "have it reset or replaced, and exclude this node meanwhile"
            )
        if g.retirement_pending:
            problems.append(
                f"{g.label} has a page retirement or row remapping pending until a GPU reset: "
                "have it reset, and exclude this node meanwhile"
            )
    found = [g for g in states if g.index is not None]
    uuids = ", ".join(f"{g.index}={g.uuid}" for g in found[:8]) + (" ..." if len(found) > 8 else "")
    summary = f"{len(found)}/{len(states)} planned GPU(s) found" + (f" ({uuids})" if found else "")
    if problems:
        summary += f"; {len(problems)} problem(s)"
    facts = {"planned": len(states), "found": len(found), "nvml_count": nvml_count}
    return Observed(summary, tuple(problems), facts)


def check_gpus(
    devices: Sequence[tuple[int, str]], min_free: float, module: Any = None
) -> tuple[Observed, tuple[GpuState, ...]]:
    """The GPU check: skipped without planned GPUs or without NVML."""
    if not devices:
        return Observed("no GPU planned on this node", skipped=True), ()
    nvml, why = open_nvml(module)
    if nvml is None:
        return Observed(f"skipped: no NVML ({why})", facts={"nvml": why}, skipped=True), ()
    try:
        count = _optional(lambda: int(nvml.lib.nvmlDeviceGetCount()), nvml.lib)
        states = read_gpus(nvml, devices)
    finally:
        nvml.close()
    return judge(states, min_free, count), states
