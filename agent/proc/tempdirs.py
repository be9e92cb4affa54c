"""The agent's own short local temp dirs (Ray's sockets, judges' port files).

AF_UNIX socket paths are limited to 107 bytes, so they live directly under a short root:
`GYM_AGENT_TMP` when set (a test gives each run its own root, so it only ever looks at its own
dirs), else /tmp, else the system temp dir. The reaper removes only dirs that match this rule.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "DRIVER_PREFIX",
    "JUDGE_PREFIX",
    "PREFIXES",
    "RAY_PREFIX",
    "ROOT_ENV",
    "host_root",
    "is_ours",
    "make",
    "root",
    "user_dir",
]

ROOT_ENV = "GYM_AGENT_TMP"
RAY_PREFIX = "gr-"
JUDGE_PREFIX = "gj-"
# The node's driver-local dir: the progress board and the processes' fallback stack dumps.
DRIVER_PREFIX = "gd-"
PREFIXES = (RAY_PREFIX, JUDGE_PREFIX, DRIVER_PREFIX)


def host_root() -> str:
    """The host's temp dir, whatever GYM_AGENT_TMP says: for what every process on the host shares."""
    return "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


def root() -> str:
    explicit = os.environ.get(ROOT_ENV)
    if explicit and os.path.isdir(explicit):
        return explicit
    return host_root()


def user_dir(parent: str, prefix: str) -> str | None:
    """`parent`/`prefix`<uid>, made if missing, when it is a directory of this user's; None if it
    cannot be used. Under a shared sticky /tmp another user's directory, or a symlink planted in
    its place, is never ours to write in."""
    path = os.path.join(parent, f"{prefix}{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return path if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() else None


def make(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=root())


def is_ours(path: Path) -> bool:
    roots = {Path(root()), Path("/tmp"), Path(tempfile.gettempdir())}
    return path.parent in roots and path.name.startswith(PREFIXES)
