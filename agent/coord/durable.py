"""Records that must survive a full or unwritable shared filesystem.

A failure or cleanup record that cannot be written to the run directory (ENOSPC, EDQUOT, EROFS,
EIO, ...) is kept on this node (next to the agent's temp dirs) at once, and the write is retried
until a bounded deadline: when space comes back the record lands where the audit reads it.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent.proc import tempdirs
from schemas import RunDir, Writer, credentials, names
from schemas.vocab import FsCondition

__all__ = ["FULL_ERRNOS", "RecordKeeper", "describe", "fs_condition", "held_by_another_incarnation", "local_dir"]

FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


def fs_condition(exc: OSError) -> FsCondition:
    """What a refused write says of the run directory's filesystem (a failure record's field)."""
    return FsCondition.FULL if exc.errno in FULL_ERRNOS else FsCondition.UNWRITABLE


def describe(exc: OSError) -> str:
    """`shared filesystem full: [Errno 28] ...` or `shared filesystem unwritable: ...` (for people;
    the audit reads `fs_condition`)."""
    return f"shared filesystem {fs_condition(exc)}: {exc}"


def held_by_another_incarnation(run: RunDir, relpath: str, incarnation: str) -> bool:
    """A record of another incarnation of this rank is never overwritten (a restarted rank, a
    reused uuid): the claim keeps such a process out, and this keeps every writer honest."""
    doc = run.read_json(relpath)
    return doc is not None and doc.get("incarnation") not in (None, incarnation)


def local_dir(run: RunDir) -> Path:
    """This node's own copy of records the run directory refused (not shared: say where)."""
    return Path(tempdirs.root()) / f"gym-records-{run.path.name}"


class RecordKeeper:
    """Write records to the run directory; keep refused ones locally and retry them."""

    def __init__(self, run: RunDir, out: Callable[[str], None]) -> None:
        self.run = run
        self.out = out
        self.pending: dict[str, tuple[Writer, dict[str, Any]]] = {}

    def write(self, relpath: str, writer: Writer, fields: Mapping[str, Any]) -> bool:
        if held_by_another_incarnation(self.run, relpath, writer.incarnation):
            self.out(f"not overwriting {relpath}: another incarnation of this rank wrote it")
            return False
        try:
            self.run.write_artifact(relpath, writer, fields)
            self.pending.pop(relpath, None)
            return True
        except OSError as exc:
            self.pending[relpath] = (writer, dict(fields))
            where = self._keep_locally(relpath, fields)
            self.out(f"could not write {relpath} ({describe(exc)}); kept at {where}; retrying")
            return False

    def _keep_locally(self, relpath: str, fields: Mapping[str, Any]) -> str:
        schema = names.artifact_schema(relpath)
        path = local_dir(self.run) / names.leaf(relpath)
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"schema": schema, **credentials.redact(fields)}, default=str, indent=2))
            os.replace(tmp, path)
            return str(path)
        except OSError as exc:
            return f"nowhere ({exc})"

    def flush(self, budget: float, interval: float = 0.5) -> bool:
        """Retry every pending record until all are written or `budget` seconds passed."""
        end = time.monotonic() + budget
        while self.pending:
            for relpath, (writer, fields) in list(self.pending.items()):
                try:
                    self.run.write_artifact(relpath, writer, fields)
                    self.pending.pop(relpath)
                    self.out(f"wrote {relpath} after all: the run directory is writable again")
                except OSError:
                    pass
            if not self.pending or time.monotonic() >= end:
                break
            time.sleep(interval)
        return not self.pending
