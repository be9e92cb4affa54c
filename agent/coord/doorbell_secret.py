"""The run's doorbell secret: created once in the run directory, read by every agent.

Who may ring is who may already stop the run through its files: the secret is readable by the
owner, and by the group only when the run directory lets the group write (a group that can write
a failure record). It is never world-readable (output.dir_mode is never world-writable). Created
with link(2) like the rank claim (exclusive on NFSv3+ too): the first agent's secret wins and the
others read it. Create first, read on EEXIST: reading first would leave a "no such file" answer in
an NFS client's cache. A secret that is unreadable, malformed or more open than that is refused:
the doorbell stays off and the run goes on through its files.
"""

from __future__ import annotations

import os
import time

from agent.coord.doorbell_msg import SECRET_BYTES
from schemas import RunDir, RunDirError, names
from schemas.errors import GymError

__all__ = ["READ_TRIES", "SecretUnavailable", "ensure_secret", "secret_mode"]

READ_TRIES = 5


class SecretUnavailable(GymError):
    """The doorbell cannot be used in this run (the message says why, for the agent's log)."""


def secret_mode(dir_mode: int) -> int:
    """0o600, plus group read when the run directory is group-writable (0o770 -> 0o640)."""
    return 0o600 | (0o040 if dir_mode & 0o020 else 0)


def ensure_secret(run: RunDir) -> bytes:
    """The run's secret, created now if this agent is the first. Raises SecretUnavailable."""
    mode = secret_mode(run.mode)
    try:
        run.create_private(names.DOORBELL_SECRET, os.urandom(SECRET_BYTES).hex().encode() + b"\n", mode)
    except FileExistsError:
        pass
    except (OSError, RunDirError) as exc:
        raise SecretUnavailable(f"cannot create {names.DOORBELL_SECRET} ({exc})") from None
    problem = ""
    for attempt in range(READ_TRIES):
        try:
            data, found = run.read_private(names.DOORBELL_SECRET, 4 * SECRET_BYTES)
        except (OSError, RunDirError) as exc:
            problem = f"cannot read {names.DOORBELL_SECRET} ({exc})"
            time.sleep(0.05 * (attempt + 1))
            continue
        if found & ~mode & 0o077:
            raise SecretUnavailable(
                f"{names.DOORBELL_SECRET} has mode {found:#o}, more open than {mode:#o} (the run directory's "
                f"{run.mode:#o}); not trusting it"
            )
        try:
            secret = bytes.fromhex(data.decode("ascii").strip())
        except ValueError:
            secret = b""
        if len(secret) != SECRET_BYTES:
            raise SecretUnavailable(f"{names.DOORBELL_SECRET} does not hold a {SECRET_BYTES}-byte hex secret")
        return secret
    raise SecretUnavailable(problem)
