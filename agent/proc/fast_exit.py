"""Ending an agent or reaper process once its work is done, without interpreter finalization."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's finalization: every record is written, the
    children are gone and the reaper is reaped, so what finalization would do (free every module's
    objects) is pure CPU, ~35 ms per agent, and in a failure wave of hundreds of agents on one
    host it was most of the teardown (docs/measurements/benchmark-notes.md, soak). Flushes what could be buffered."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
