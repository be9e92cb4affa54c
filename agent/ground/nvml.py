"""NVML opened and closed (nvidia-ml-py's `pynvml`, or a stand-in with its interface): what the
rank's identity (how many GPUs this node has) and the preflight's GPU checks both need."""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["Nvml", "nvml_device_count", "open_nvml"]

NVML_LIBRARY = "libnvidia-ml.so.1"  # the driver's library, the name nvidia-ml-py loads on Linux
NVML_NOT_FOUND = "NVML Shared Library Not Found"  # nvidia-ml-py's words when it cannot load it


@dataclass(frozen=True)
class Nvml:
    """An initialised NVML (the `pynvml` module, or a stand-in with its interface)."""

    lib: Any

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library we are done with
            pass


def open_nvml(module: Any = None) -> tuple[Nvml | None, str]:
    """NVML initialised, or None and why not (no binding, no library, no driver)."""
    if module is None:
        # No driver library, no NVML: said without importing the binding, megabytes an idle agent
        # on a node without GPUs (a CPU pool's) would keep (issue 51). A binding already loaded
        # (or a stand-in put in its place) answers for itself.
        if "pynvml" not in sys.modules:
            try:
                ctypes.CDLL(NVML_LIBRARY)
            except OSError:
                return None, NVML_NOT_FOUND
        try:
            import pynvml  # only nodes that check GPUs load NVML
        except ImportError as exc:
            return None, f"nvidia-ml-py is not installed ({exc})"
        module = pynvml
    try:
        module.nvmlInit()
    except module.NVMLError as exc:
        return None, str(exc) or type(exc).__name__
    except OSError as exc:
        return None, str(exc)
    return Nvml(module), ""


def nvml_device_count(module: Any = None) -> int | None:
    """How many GPUs NVML sees on this node; None without NVML."""
    nvml, _why = open_nvml(module)
    if nvml is None:
        return None
    try:
        return int(nvml.lib.nvmlDeviceGetCount())
    except nvml.lib.NVMLError:
        return None
    finally:
        nvml.close()
