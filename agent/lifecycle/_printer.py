"""The agent's line printer: every line it says goes to agent-RANK.log, stamped, and to the console
with the rank's tag, like every other agent line."""

from __future__ import annotations

import os
import sys

from agent.ground import clock
from schemas.credentials import redact_text
from schemas.timefmt import iso_ms

__all__ = ["Printer"]


class Printer:
    """Called with a line: writes it to the agent's log (one os.write) and prints it."""

    def __init__(self, tag: str, log_fd: int) -> None:
        self.tag = tag
        self.log_fd = log_fd
        self._console_open = True

    def __call__(self, line: str) -> None:
        text = f"{self.tag} {redact_text(line)}"  # the one redaction: no credential reaches the log
        try:
            os.write(self.log_fd, f"{iso_ms(clock.wall())} {text}\n".encode())
        except OSError:
            pass
        if not self._console_open:
            return
        try:
            print(text, flush=True)
        except OSError:
            # A closed console (broken pipe, a gone terminal) must not end the run mid-teardown:
            # the agent's log file has every line. Point stdout at /dev/null for the final flush.
            self._console_open = False
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
