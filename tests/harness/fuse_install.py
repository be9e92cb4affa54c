"""Installing Debian's FUSE 2 library when missing (root, apt-get): what tests/harness/nfs_model.py
needs besides the `fusepy` package of the test extra."""

from __future__ import annotations

import ctypes.util
import fcntl
import os
import shutil
import subprocess
import sys

# Debian 12 names the library package libfuse2; Debian 13 renamed it libfuse2t64. `fuse` brings
# fusermount (unmounting is also done with umount(8), which root always has).
CANDIDATES = (("libfuse2", "fuse"), ("libfuse2t64",), ("libfuse2",))
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class FuseUnavailable(RuntimeError):
    """FUSE cannot exist here (the tests skip with this reason)."""


def which(name: str) -> str | None:
    return shutil.which(name, path=SYSTEM_PATH + os.pathsep + os.environ.get("PATH", ""))


def have_libfuse() -> bool:
    return ctypes.util.find_library("fuse") is not None


def unavailable_reason() -> str | None:
    """Why a FUSE mount cannot be made here, or None."""
    if sys.platform != "linux":
        return "the NFS model is a FUSE filesystem: it needs Linux"
    if os.geteuid() != 0:
        return "the NFS model mounts FUSE filesystems with allow_other: it needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (a container without the FUSE device)"
    if not have_libfuse() and which("apt-get") is None:
        return "libfuse.so.2 is not installed and there is no apt-get to install it"
    return None


def ensure_installed() -> None:
    """Install the FUSE 2 library when missing. FuseUnavailable when it cannot exist here;
    RuntimeError (a failing test, not a skip) when apt-get could not install it."""
    reason = unavailable_reason()
    if reason:
        raise FuseUnavailable(reason)
    if have_libfuse():
        return
    # One installer at a time on this machine (parallel test sessions); dpkg's own lock then waits.
    with open("/tmp/gym-fuse-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        apt = [which("apt-get") or "apt-get", "-o", "DPkg::Lock::Timeout=300", "-q"]
        errors: list[str] = []
        for updated in (False, True):
            if updated:
                subprocess.run([*apt, "update", "-qq"], env=env, capture_output=True, timeout=600)
            for packages in CANDIDATES:
                if have_libfuse():
                    return
                argv = [*apt, "install", "-y", "-qq", "--no-install-recommends", *packages]
                done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    errors.append(f"`{' '.join(argv)}`: {(done.stdout + done.stderr).strip()[-500:]}")
        if not have_libfuse():
            raise RuntimeError("could not install the FUSE 2 library:\n" + "\n".join(errors))
