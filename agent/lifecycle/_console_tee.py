"""A child's output to its log file and, line by line with a rank prefix, to the agent's stdout.

On Slurm and Beaker the job log is the agent's stdout: the driver's own lines (a traceback, the
loss) must be there, like torchrun's `[rank N]:` lines, while `driver-RANK.log` keeps the exact
bytes but for a credential's (the one redaction, schemas/credentials.py, line by line: a line is
written once its newline or carriage return came, once it is LOG_PENDING long, or after IDLE_FLUSH_S
without more output). The child writes into a pipe; a daemon thread copies the lines to the log
file and hands each complete line to a second thread that writes the console. A console that does
not keep up (a paused terminal, a slow pipe) costs console lines, never the driver's progress: past
CONSOLE_BACKLOG lines waiting, lines are dropped from the console (the log has them) and the count
is said. The supervisor thread is not involved (it must never block on I/O).
"""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
from collections.abc import Callable

from schemas.credentials import redact_bytes

__all__ = [
    "CONSOLE_BACKLOG",
    "ConsoleLines",
    "ConsoleTee",
    "IDLE_FLUSH_S",
    "LOG_PENDING",
    "MAX_CONSOLE_LINE",
    "redacted_lines",
]

MAX_CONSOLE_LINE = 4000  # a line of megabytes (a progress bar without newlines) is cut on the console
CONSOLE_BACKLOG = 10_000
LOG_PENDING = 65536  # a line without a newline this long (a progress bar) is written redacted as it is
IDLE_FLUSH_S = 0.5  # ... and so is one whose end has not come for this long


class ConsoleTee:
    """Owns a pipe: `write_fd` is the child's stdout/stderr; `close_child_end()` after starting it."""

    def __init__(
        self,
        log_fd: int,
        prefix: str,
        console_fd: int | None = None,
        on_line: Callable[[bytes], None] | None = None,
    ) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.bytes = 0  # bytes the child wrote so far (the progress watch's last resort)
        self._on_line = on_line  # every complete line, in this thread (the progress watch's log pattern)
        os.set_inheritable(self.write_fd, True)
        self.log_fd = log_fd
        self.prefix = prefix.encode()
        self.console_fd = sys.stdout.fileno() if console_fd is None else console_fd
        self._console_open = True
        self.lines = 0
        self.dropped = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(CONSOLE_BACKLOG)
        self._writer = threading.Thread(target=self._write_console, name="console-writer", daemon=True)
        self._writer.start()
        self._thread = threading.Thread(target=self._pump, name="console-tee", daemon=True)
        self._thread.start()

    def log_size(self) -> int | None:
        """The log file's size now (None once it is closed): what the log held at a moment."""
        try:
            return os.fstat(self.log_fd).st_size
        except OSError:
            return None

    def close_child_end(self) -> None:
        """The child has its copy; ours must close so the pump sees EOF when the child's side closes."""
        try:
            os.close(self.write_fd)
        except OSError:
            pass

    def join(self, timeout: float) -> None:
        """Wait for the rest of the output (the child and whatever inherited the pipe exited)."""
        self._thread.join(timeout)
        self._writer.join(timeout)

    def _emit(self, line: bytes) -> None:
        if len(line) > MAX_CONSOLE_LINE:
            line = line[:MAX_CONSOLE_LINE] + b" ...[cut; full line in the log]"
        try:
            self._queue.put_nowait(self.prefix + line.rstrip(b"\r") + b"\n")
        except queue.Full:
            self.dropped += 1

    def _write_console(self) -> None:
        said = 0
        while True:
            item = self._queue.get()
            if item is None:
                break
            if self.dropped > said:
                note = b"%s...[%d line(s) not shown here: the console fell behind; the log has them]\n"
                self._write(note % (self.prefix, self.dropped - said))
                said = self.dropped
            self._write(item)
        if self.dropped > said:
            self._write(b"%s...[%d line(s) not shown here; the log has them]\n" % (self.prefix, self.dropped - said))

    def _write(self, data: bytes) -> None:
        if not self._console_open:
            return
        try:
            # One write per line: lines of several threads never interleave mid-line.
            os.write(self.console_fd, data)
        except OSError:
            self._console_open = False  # the console went away; the log file still gets everything

    def _pump(self) -> None:
        lines = ConsoleLines()
        pending = b""
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        while True:
            if pending and not poller.poll(IDLE_FLUSH_S * 1000):
                # A line without its end for a while (a prompt, a hung driver's last words, a
                # grandchild still holding the pipe): written as it is.
                self._out(redacted_lines(pending, whole=True)[0], lines)
                pending = b""
                continue
            try:
                chunk = os.read(self.read_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.bytes += len(chunk)
            done, pending = redacted_lines(pending + chunk)
            self._out(done, lines)
        if pending:
            self._out(redacted_lines(pending, whole=True)[0], lines)
        last = lines.rest()
        if last:
            self._emit(last)
        os.close(self.read_fd)
        self._queue.put(None)  # blocks only while the writer drains: it always does

    def _out(self, data: bytes, lines: ConsoleLines) -> None:
        """Redacted output to the log file, and its complete lines to the console."""
        if not data:
            return
        _write_all(self.log_fd, data)
        for line in lines.feed(data):
            self._emit(line)
            self.lines += 1
            if self._on_line is not None:
                try:
                    self._on_line(line)
                except Exception:  # noqa: BLE001 - a watcher's bug must never stop the driver's output
                    self._on_line = None


def redacted_lines(data: bytes, whole: bool = False) -> tuple[bytes, bytes]:
    """(what may be written now, redacted; what waits for the rest of its line; all of it with
    `whole`). A line is read whole, so a flag and its value (--api-key VALUE) are seen together."""
    end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    if whole or len(data) - end >= LOG_PENDING:
        end = len(data)
    if not end:
        return b"", data
    return redact_bytes(data[:end]), data[end:]


class ConsoleLines:
    """Chunks of a child's output in, the console's lines out: each complete line, and a line
    longer than MAX_CONSOLE_LINE cut at that length once it is that long; the rest of a cut line,
    up to its newline, is not shown (the log has it), however the pipe split the bytes."""

    def __init__(self) -> None:
        self._pending = b""
        self._cut = False  # the line being read was cut: drop bytes up to its newline

    def feed(self, chunk: bytes) -> list[bytes]:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        if self._cut:
            if not lines:  # still inside the cut line
                self._pending = b""
                return []
            lines, self._cut = lines[1:], False  # its rest ends at the first newline
        if len(self._pending) > MAX_CONSOLE_LINE:
            lines.append(self._pending)  # _emit cuts it to MAX_CONSOLE_LINE and says so
            self._pending, self._cut = b"", True
        return lines

    def rest(self) -> bytes:
        """The last line, when the output did not end with a newline."""
        return b"" if self._cut else self._pending


def _write_all(fd: int, data: bytes, write: Callable[[int, bytes], int] = os.write) -> None:
    try:
        while data:
            n = write(fd, data)
            data = data[n:]
    except OSError:
        pass  # the log is evidence, not control: a full disk must not stop the driver
