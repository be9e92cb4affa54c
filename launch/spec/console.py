"""What every console script does the same way: a closed stdout is not a crash.

``gym-launch plan ... | head -3`` closes the pipe after three lines; the next print raises
BrokenPipeError, and Python would print a traceback for it (and again at exit, when it flushes
stdout). Like a Unix tool killed by SIGPIPE, the command stops quietly with status 141.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

__all__ = ["EXIT_BROKEN_PIPE", "quiet_broken_pipe", "use_colour", "version"]

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool killed by SIGPIPE


def version(prog: str) -> str:
    """`PROG VERSION` of the installed distribution (a source checkout without metadata says so)."""
    from importlib import metadata

    try:
        return f"{prog} {metadata.version('gym-agent')}"
    except metadata.PackageNotFoundError:
        return f"{prog} (not installed: no package metadata)"


def use_colour(stream: object) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def quiet_broken_pipe(main: Callable[..., int]) -> Callable[..., int]:
    @functools.wraps(main)
    def wrapper(*args: object, **kwargs: object) -> int:
        try:
            code = main(*args, **kwargs)
            sys.stdout.flush()
            return code
        except BrokenPipeError:
            # Point stdout at /dev/null so the interpreter's final flush cannot raise again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return EXIT_BROKEN_PIPE

    return wrapper
