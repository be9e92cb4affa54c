"""Installing Debian's Slurm and munge when missing (root, apt-get)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .errors import ClusterError, SlurmUnavailable

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
DAEMONS = ("slurmctld", "slurmd", "munged")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel")


def which(name: str) -> str | None:
    return shutil.which(name, path=SYSTEM_PATH + os.pathsep + os.environ.get("PATH", ""))


def missing_binaries() -> list[str]:
    return [b for b in (*DAEMONS, *CLIENTS, "munge", "unmunge", "mungekey", "unshare") if which(b) is None]


def unavailable_reason() -> str | None:
    """Why Slurm cannot run here, or None. Root is needed for namespaces, mounts and mknod."""
    if sys.platform != "linux":
        return "a local Slurm cluster needs Linux"
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (namespaces, bind mounts, mknod, installing packages)"
    if missing_binaries() and which("apt-get") is None:
        return f"Slurm is not installed ({', '.join(missing_binaries())} missing) and there is no apt-get"
    return None


def ensure_installed(log: Callable[[str], None] = print) -> float:
    """Install Debian's packages when missing; returns the seconds it took (0 when present)."""
    reason = unavailable_reason()
    if reason:
        raise SlurmUnavailable(reason)
    if not missing_binaries():
        return 0.0
    t0 = time.monotonic()
    # One installer at a time on this machine (parallel test sessions); dpkg's own lock then waits.
    with open("/tmp/gym-slurm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not missing_binaries():
            return time.monotonic() - t0
        log(f"installing {' '.join(PACKAGES)} (missing: {', '.join(missing_binaries())})")
        policy = Path("/usr/sbin/policy-rc.d")
        ours = not policy.exists()
        if ours:
            # Without an init system the packages' postinst would try to start the daemons and fail.
            policy.write_text("#!/bin/sh\n# temporary, from tests/slurm/cluster.py\nexit 101\n")
            policy.chmod(0o755)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        apt = [which("apt-get") or "apt-get", "-o", "DPkg::Lock::Timeout=300", "-q"]
        install = [*apt, "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
        try:
            # Package lists already fetched (by `make browser`, say) usually suffice; `apt-get update`
            # once, only when they do not (a fresh image has none, an old one names gone versions).
            if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
                for argv in ([*apt, "update", "-qq"], install):
                    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
                    if r.returncode != 0:
                        out = (r.stdout + r.stderr)[-3000:]
                        raise ClusterError(f"`{' '.join(argv)}` failed ({r.returncode}):\n{out}")
        finally:
            if ours:
                policy.unlink(missing_ok=True)
    if missing_binaries():
        raise ClusterError(f"still missing after installing {' '.join(PACKAGES)}: {', '.join(missing_binaries())}")
    return time.monotonic() - t0
