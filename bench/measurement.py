"""The measurement records the documentation's tables are made from (measurements/*.json,
docs/measurements/ by `python -m docsgen`): what was measured, when, at which commit, on which
machine, and the table itself: columns and rows, or the text a bench part printed."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import procstat

__all__ = ["REPO", "Tee", "commit", "record", "write"]

REPO = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The checkout's commit, with `+dirty` when its tracked files differ from it."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD"], check=False).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def record(title: str, command: str, started: float, **table: Any) -> dict[str, Any]:
    """One measurement: `table` is columns= and rows=, or text= (what the bench printed)."""
    return {
        "title": title,
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "commit": commit(),
        "machine": procstat.describe(procstat.machine()),
        "seconds": round(time.time() - started, 1),
        **table,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


class Tee(io.TextIOBase):
    """Prints as before and keeps a copy: a bench part's tables as it printed them."""

    def __init__(self) -> None:
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        if sys.__stdout__ is not None:
            sys.__stdout__.write(text)
        return self.copy.write(text)

    def flush(self) -> None:
        if sys.__stdout__:
            sys.__stdout__.flush()

    @classmethod
    @contextlib.contextmanager
    def capturing(cls) -> Iterator[Tee]:
        tee = cls()
        with contextlib.redirect_stdout(tee):
            yield tee
