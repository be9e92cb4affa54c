"""Count an agent's shared-filesystem operations from outside, with strace, and compare them with
the agent's own counts.

strace attaches to a running agent (every thread) for a window and logs, with timestamps and fd
paths (-y), the syscalls that make up the operations both agents count:
- write: a rename into the run directory (both protocols write a temp file and rename it);
- read:  an openat of a regular file in the run directory for reading (a missing file included);
- list:  a getdents64 on a run-directory fd that returns 0 (the end of one listing).
The agent's heartbeat carries its own counts (`fs_ops`, taken just before the heartbeat is
written), and strace also sees that heartbeat's content being written. The self-counted delta
between the first and the last heartbeat in the trace is compared with the operations strace saw
between those two heartbeats' renames, so both sides cover exactly the same interval.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from schemas import names

_LINE = re.compile(r"^(\d+\.\d+) (\w+)\((.*)\) = (-?\d+)")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_OPS = re.compile(r'\\"(read|write|list)\\": ?(\d+)')
KINDS = ("read", "write", "list")


def available() -> bool:
    return shutil.which("strace") is not None


@dataclass(frozen=True)
class Comparison:
    pid: int
    heartbeats: int  # heartbeat intervals covered
    self_counted: dict[str, int]
    strace_counted: dict[str, int]

    @property
    def self_total(self) -> int:
        return sum(self.self_counted.values())

    @property
    def strace_total(self) -> int:
        return sum(self.strace_counted.values())

    @property
    def disagreement(self) -> float:
        """|strace - self| / self."""
        return abs(self.strace_total - self.self_total) / max(1, self.self_total)

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "heartbeat_intervals": self.heartbeats,
            "self": self.self_counted,
            "strace": self.strace_counted,
            "disagreement": round(self.disagreement, 4),
        }


class Tracer:
    """strace attached to one process for a window: start(), then stop_and_compare()."""

    def __init__(self, pid: int, rank: int, run_dir: Path, out_prefix: Path) -> None:
        self.pid = pid
        self.rank = rank
        self.run_dir = str(run_dir)
        self.prefix = out_prefix
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        argv = [
            "strace",
            "-f",
            "-ff",
            "-ttt",
            "-y",
            "-qq",
            "-s",
            "4096",
            "-e",
            "trace=openat,rename,renameat,renameat2,getdents64,write",
            "-o",
            str(self.prefix),
            "-p",
            str(self.pid),
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # strace detaches and flushes
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def compare(self) -> Comparison:
        events: list[tuple[float, int, str, dict | None]] = []  # (time, order, kind, heartbeat ops)
        hb_name = names.leaf(names.heartbeat(self.rank))
        order = 0
        for path in sorted(glob.glob(f"{self.prefix}.*")):
            with open(path, errors="replace") as fh:
                for line in fh:
                    m = _LINE.match(line)
                    if not m:
                        continue
                    ts, call, args, result = float(m.group(1)), m.group(2), m.group(3), int(m.group(4))
                    kind, ops = _classify(call, args, result, self.run_dir, hb_name)
                    if kind:
                        events.append((ts, order, kind, ops))
                        order += 1
            os.unlink(path)
        events.sort(key=lambda e: (e[0], e[1]))
        # Heartbeat contents, each followed by its rename ("hb-rename").
        beats: list[tuple[int, dict]] = []  # (index of the rename, self-counted ops before it)
        pending: dict | None = None
        for i, (_, _, kind, ops) in enumerate(events):
            if kind == "hb-content":
                pending = ops
            elif kind == "hb-rename" and pending is not None:
                beats.append((i, pending))
                pending = None
        if len(beats) < 2:
            raise RuntimeError(f"strace of pid {self.pid} saw {len(beats)} heartbeats; need 2 (window too short?)")
        (i0, ops0), (i1, ops1) = beats[0], beats[-1]
        counted = dict.fromkeys(KINDS, 0)
        for _, _, kind, _ in events[i0:i1]:
            base = "write" if kind == "hb-rename" else kind
            if base in counted:
                counted[base] += 1
        self_counted = {k: int(ops1.get(k, 0)) - int(ops0.get(k, 0)) for k in KINDS}
        return Comparison(self.pid, len(beats) - 1, self_counted, counted)


def _classify(call: str, args: str, result: int, run_dir: str, hb_name: str) -> tuple[str | None, dict | None]:
    if run_dir not in args:
        return None, None
    if call.startswith("rename"):
        dest = _QUOTED.findall(args)
        if result != 0 or not dest:
            return None, None
        return ("hb-rename" if dest[-1].endswith(hb_name) else "write"), None
    if call == "openat":
        if "O_DIRECTORY" in args or "O_WRONLY" in args or "O_RDWR" in args:
            return None, None
        return "read", None
    if call == "getdents64":
        return ("list" if result == 0 else None), None
    if call == "write" and f".{hb_name}." in args.split(",", 1)[0]:
        ops = {k: int(v) for k, v in _OPS.findall(args)}
        return ("hb-content" if ops else None), ops
    return None, None
