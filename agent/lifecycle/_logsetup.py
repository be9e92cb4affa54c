"""Where library log records (httpx, our own `logging` users) go in an agent process.

Without this, Python's last-resort handler prints a bare "WARNING ..." line beside the agent's
`[rank N] FAILED` lines, with no rank and no time. Every record goes to agent-RANK.log with an
ISO-8601 millisecond stamp; warnings and worse also reach the console, prefixed like every
other agent line. Uncaught exceptions of helper threads are logged the same way.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from schemas.credentials import redact_text
from schemas.timefmt import iso_ms

__all__ = ["configure"]


class _FdHandler(logging.Handler):
    """One os.write per record: atomic against the agent's own lines in the same file."""

    def __init__(self, fd: int, level: int) -> None:
        super().__init__(level)
        self.fd = fd

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = redact_text(self.format(record))  # the one redaction: a library may log anything
            os.write(self.fd, (line + "\n").encode("utf-8", errors="replace"))
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            pass


class _Format(logging.Formatter):
    def __init__(self, tag: str, stamp: bool) -> None:
        super().__init__()
        self.tag = tag
        self.stamp = stamp

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        line = f"{self.tag} {record.levelname.lower()} ({record.name}): {text}"
        return f"{iso_ms(record.created)} {line}" if self.stamp else line


def configure(tag: str, log_fd: int, console_fd: int | None = None, console_level: int = logging.WARNING) -> None:
    """Route every logger of this process: all records to `log_fd`, `console_level` and up to stderr."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    to_log = _FdHandler(log_fd, logging.DEBUG)
    to_log.setFormatter(_Format(tag, stamp=True))
    to_console = _FdHandler(sys.stderr.fileno() if console_fd is None else console_fd, console_level)
    to_console.setFormatter(_Format(tag, stamp=False))
    root.addHandler(to_log)
    root.addHandler(to_console)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread else "?"
        exc = args.exc_value
        info = (args.exc_type, exc, args.exc_traceback) if exc is not None else None
        logging.getLogger("thread").error("thread %s died: %s", name, exc, exc_info=info)

    threading.excepthook = thread_hook
