"""The one root of every error a person sees from the project's commands.

It lives in ``schemas/`` because every package may import ``schemas`` and ``schemas`` imports
none of them: the launcher's spec errors, the agent's refusals and the run directory's own
refusals (``safe_io``) all derive from it. Each class says what to change in its message and
carries the exit code its command ends with, so every command's ``main`` catches this one class,
prints the message on one line and exits with ``exit_code``: no traceback for a user's mistake.
Standard library only: the reference judge server imports ``schemas.safe_io`` without the rest.
"""

from __future__ import annotations

__all__ = ["EXIT_RUN_FAILED", "EXIT_USAGE", "GymError"]

EXIT_RUN_FAILED = 1  # the run failed: a failure record says why
EXIT_USAGE = 2  # something the user must change (spec, command line, run directory), as argparse exits


class GymError(Exception):
    """A user error: the message says what to change; ``exit_code`` is what the command exits with."""

    exit_code: int = EXIT_USAGE
