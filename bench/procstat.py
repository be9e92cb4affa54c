"""Per-process CPU and memory from /proc, and a description of this machine for bench output."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_ns(pid: int) -> int | None:
    """CPU time of every live thread of `pid` in nanoseconds (/proc/PID/task/*/schedstat): the
    clock-tick counters of /proc/PID/stat are 10 ms coarse, as much as an idle agent uses in 10 s."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def memory_kb(pid: int) -> dict[str, int]:
    """RSS (shared pages counted in full) and PSS (shared pages split between their users)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    out[key.lower()] = int(rest.split()[0])
    except OSError:
        pass
    return out


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def reaper_of(agent_pid: int) -> int | None:
    return next((c for c in children(agent_pid) if "agent.reaper" in cmdline(c)), None)


def idle_cost(pids: list[int], seconds: float) -> dict[str, float]:
    """Mean CPU (fraction of one core) of each pid over `seconds`."""
    c0 = {p: cpu_ns(p) for p in pids}
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    c1 = {p: cpu_ns(p) for p in pids}
    fr = [(c1[p] - c0[p]) / 1e9 / dt for p in pids if c0[p] is not None and c1[p] is not None]
    return {"mean": sum(fr) / len(fr) if fr else float("nan"), "max": max(fr, default=float("nan")), "n": len(fr)}


def mem_available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> dict:
    info: dict = {"cores": os.cpu_count(), "python": sys.version.split()[0], "kernel": platform.release()}
    try:
        with open("/proc/meminfo") as fh:
            info["ram_gb"] = round(int(fh.readline().split()[1]) / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as fh:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "?")
        info["load_avg_at_start"] = os.getloadavg()
    except OSError:
        pass
    try:
        info["tmp_fs"] = subprocess.run(
            ["stat", "-f", "-c", "%T", "/tmp"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        pass
    return info


def describe(m: dict) -> str:
    load = m.get("load_avg_at_start")
    load_s = f", load average at start {load[0]:.1f}" if load else ""
    return (
        f"{m.get('cores')} cores ({m.get('cpu', '?')}), {m.get('ram_gb', '?')} GB RAM, Linux {m.get('kernel')}, "
        f"Python {m.get('python')}, /tmp on {m.get('tmp_fs', '?')}{load_s}"
    )
