"""A server's published port: written once it listens, read by whoever started it.

A server that binds port 0 (the kernel's choice: nobody picks a port and releases it first) writes
``{"host", "port", "pid"}`` to its port file atomically after the socket is listening; its starter
polls the file. Used by the reference judge and the judge gateway.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from schemas import safe_io

__all__ = ["read_port_file", "write_port_file"]


def write_port_file(path: str | os.PathLike[str], host: str, port: int) -> None:
    """Temp file + fsync + rename in the same directory: readers see nothing or the whole record."""
    payload = json.dumps({"host": host, "port": port, "pid": os.getpid()}).encode("utf-8")
    safe_io.write_atomic_path(path, payload)


def read_port_file(path: str | os.PathLike[str]) -> int | None:
    """The published port, or None while the file is absent or incomplete (callers poll)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    port = record.get("port") if isinstance(record, dict) else None
    return port if isinstance(port, int) and port > 0 else None
