"""A stand-in for NVIDIA's `pynvml` (nvidia-ml-py): GPUs cannot exist on these test machines, so
the preflight's GPU checks and the teardown's residue check are tested against this module, which
answers the calls agent/preflight/_gpus.py makes with the names and shapes of the real binding.

Its GPUs are described by a JSON file named by GYM_FAKE_NVML (read again on every call, so a test
changes them while a run goes):

    {"devices": [{"uuid": "GPU-...", "name": "...", "total": BYTES, "used": BYTES,
                  "holders": [{"pid": PID, "used": BYTES}], "ecc": N, "retired_pending": false,
                  "remap_pending": false, "ecc_supported": true}]}

A holder is a compute process: listed, and its memory counted in `used`, while that PID lives
(a test starts a real process to hold a GPU, and ends it to free it). Without the variable, or
with {"missing_library": true}, nvmlInit fails as it does on a machine without a driver.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
STATE_ENV = "GYM_FAKE_NVML"

CALLS: list[str] = []  # every call, for tests that count them


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            NVML_ERROR_UNINITIALIZED: "Uninitialized",
            NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
            NVML_ERROR_NOT_SUPPORTED: "Not Supported",
            NVML_ERROR_NOT_FOUND: "Not Found",
            NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        }.get(self.value, f"NVML error {self.value}")


_initialised = False


def _state() -> dict[str, Any]:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    with open(path) as f:
        state = json.load(f)
    if state.get("missing_library"):
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie holds nothing
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _devices() -> list[dict[str, Any]]:
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return list(_state().get("devices", []))


def nvmlInit() -> None:
    global _initialised
    CALLS.append("nvmlInit")
    _state()
    _initialised = True


def nvmlShutdown() -> None:
    global _initialised
    _initialised = False


def nvmlDeviceGetCount() -> int:
    return len(_devices())


@dataclass(frozen=True)
class _Handle:
    index: int


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    if not 0 <= index < len(_devices()):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def nvmlDeviceGetHandleByUUID(uuid: str) -> _Handle:
    for i, d in enumerate(_devices()):
        if d["uuid"] == uuid:
            return _Handle(i)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def _dev(h: _Handle) -> dict[str, Any]:
    return _devices()[h.index]


def nvmlDeviceGetIndex(h: _Handle) -> int:
    return h.index


def nvmlDeviceGetUUID(h: _Handle) -> str:
    return str(_dev(h)["uuid"])


def nvmlDeviceGetName(h: _Handle) -> str:
    return str(_dev(h).get("name", "Fake GPU"))


@dataclass(frozen=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class _Process:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - the binding's field name


def _holders(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in d.get("holders", []) if _alive(int(p["pid"]))]


def nvmlDeviceGetMemoryInfo(h: _Handle) -> _Memory:
    d = _dev(h)
    used = int(d.get("used", 0)) + sum(int(p.get("used", 0)) for p in _holders(d))
    total = int(d["total"])
    return _Memory(total, max(0, total - used), used)


def nvmlDeviceGetComputeRunningProcesses(h: _Handle) -> list[_Process]:
    return [_Process(int(p["pid"]), p.get("used")) for p in _holders(_dev(h))]


def nvmlDeviceGetTotalEccErrors(h: _Handle, error_type: int, counter_type: int) -> int:
    d = _dev(h)
    if not d.get("ecc_supported", True):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    assert (error_type, counter_type) == (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
    return int(d.get("ecc", 0))


def nvmlDeviceGetRetiredPagesPendingStatus(h: _Handle) -> int:
    d = _dev(h)
    if "retired_pending" not in d:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # GPUs with row remapping do not retire pages
    return NVML_FEATURE_ENABLED if d["retired_pending"] else NVML_FEATURE_DISABLED


def nvmlDeviceGetRemappedRows(h: _Handle) -> tuple[int, int, int, int]:
    d = _dev(h)
    if "remap_pending" not in d:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return (0, 0, int(bool(d["remap_pending"])), 0)


def write_state(path: str, devices: list[dict[str, Any]]) -> None:
    """For tests: describe the GPUs (atomically: an agent may be reading)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"devices": devices}, f)
    os.replace(tmp, path)


def gpu(i: int, *, total: int = 80 << 30, used: int = 500 << 20, **more: Any) -> dict[str, Any]:
    """One fake GPU, index `i`."""
    return {
        "uuid": f"GPU-fake-{i:04d}-0000-0000-0000-000000000000",
        "name": "Fake H100",
        "total": total,
        "used": used,
        "holders": [],
        "ecc": 0,
        "retired_pending": False,
        **more,
    }
