"""Reading a file the run's processes wrote line by line (a trainer's JSONL, a judge's log), with
bounded memory and a bounded amount read: blocks of whole lines, at most `cap` bytes in all.

Files are opened through SafeDir (no symlink followed, no FIFO, regular files only). A line
longer than `max_line` is skipped and counted: it is no record a reader here looks for, and
keeping it would make memory depend on the input.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from audit.safedir import SafeDir

__all__ = ["CHUNK", "LineReader"]

CHUNK = 4 * 1024 * 1024


@dataclass
class LineReader:
    """`blocks()` yields bytes made of whole lines (each ending in a newline, except a last line
    the writer had not finished). After it: `truncated` (stopped at `cap`), `skipped` (over-long
    lines), `read` (bytes)."""

    safe: SafeDir
    relpath: str
    cap: int
    max_line: int = 1024 * 1024
    truncated: bool = False
    skipped: int = 0
    read: int = 0

    def blocks(self) -> Iterator[bytes]:
        """Raises UnsafeFile / OSError (FileNotFoundError when the file is missing) on open only."""
        fd = self.safe.open_file(self.relpath)
        try:
            carry = b""
            dropping = False  # inside an over-long line: skip to its end
            while True:
                want = min(CHUNK, self.cap - self.read)
                if want <= 0:
                    self.truncated = True
                    return
                chunk = os.read(fd, want)
                if not chunk:
                    if carry and not dropping:
                        yield carry
                    return
                self.read += len(chunk)
                end = chunk.rfind(b"\n")
                if end < 0:
                    if not dropping:
                        carry += chunk
                        if len(carry) > self.max_line:
                            carry, dropping = b"", True
                            self.skipped += 1
                    continue
                head, rest = chunk[: end + 1], chunk[end + 1 :]
                if dropping:
                    head = head[head.find(b"\n") + 1 :]
                    dropping = False
                block = carry + head
                carry = rest
                if len(carry) > self.max_line:
                    carry, dropping = b"", True
                    self.skipped += 1
                if block:
                    yield block
        finally:
            os.close(fd)

    def lines(self) -> Iterator[bytes]:
        """Every line (without its newline) of at most `max_line` bytes."""
        for block in self.blocks():
            for line in block.split(b"\n"):
                if len(line) > self.max_line:
                    self.skipped += 1
                elif line.strip():
                    yield line
