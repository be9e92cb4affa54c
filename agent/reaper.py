"""The reaper: a sidecar that cleans up after an agent that died without doing it itself.

The agent starts it first, in its own session (so a kill of the agent's group spares it), and
writes one line per child session to its stdin. When stdin closes without a final "done" line
the agent died (SIGKILL, OOM, crash): the reaper stops every recorded session, then writes the
agent's failure record (unless the agent wrote one) and cleanup record (writer "reaper"), so even
a SIGKILLed replica leaves evidence and no processes (a weakness of the anchor agent).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from schemas import RunDir, Writer, names

from . import clock
from .procgroup import StopRecord, session_members, sweep_session


def _stop_session(name: str, pid: int, grace: float) -> StopRecord:
    t0 = time.monotonic()
    how = "already_gone"
    if session_members(pid):
        how = "sigterm"
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and session_members(pid):
            time.sleep(0.1)
        if session_members(pid):
            how = "sigkill"
    swept = sweep_session(pid)
    return StopRecord(name, pid, pid, how, None, swept, time.monotonic() - t0)


TEMP_PREFIXES = ("gr-", "gj-")  # Ray's and the judges' local temp dirs (agent/ray_node.py, judges_runtime.py)


def remove_temp_dir(path: str) -> bool:
    """Remove one of the agent's own local temp dirs; anything else named to us is left alone."""
    p = Path(path)
    roots = {Path("/tmp"), Path(tempfile.gettempdir())}
    try:
        st = p.lstat()
    except OSError:
        return False
    if p.parent not in roots or not p.name.startswith(TEMP_PREFIXES) or p.is_symlink() or st.st_uid != os.geteuid():
        return False
    shutil.rmtree(p, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gym-agent-reaper")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--incarnation", required=True)
    ap.add_argument("--fingerprint", required=True)
    ap.add_argument("--agent-pid", type=int, required=True)
    ap.add_argument("--grace", type=float, default=5.0)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal ^C must not kill the cleaner
    sessions: dict[int, str] = {}
    temp_dirs: list[str] = []
    phase = "unknown"
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "done":
            return 0
        if parts[0] == "group" and len(parts) == 3:
            sessions[int(parts[2])] = parts[1]
        elif parts[0] == "phase" and len(parts) == 2:
            phase = parts[1]
        elif parts[0] == "tmp" and len(parts) == 2:
            temp_dirs.append(parts[1])
    # stdin closed without "done": the agent is gone.
    t0 = clock.mono()
    records = [_stop_session(name, pid, args.grace) for pid, name in sessions.items()]
    for path in temp_dirs:
        remove_temp_dir(path)
    run = RunDir.open(args.run_dir)
    writer = Writer(args.fingerprint, args.rank, args.incarnation, kind="reaper")
    mine = run.read_json(names.failure(args.rank))
    if not (mine and mine.get("incarnation") == args.incarnation):
        run.write_artifact(
            names.failure(args.rank),
            "failure",
            writer,
            {
                "kind": "agent_died",
                "cause": f"agent process {args.agent_pid} of rank {args.rank} died without cleaning up "
                f"(killed or crashed) during phase {phase}",
                "phase": phase,
                "wall_time": clock.wall(),
                "monotonic_time": t0,
                "log": names.agent_log(args.rank),
                "reacting_to": None,
            },
        )
    cleaned = run.read_json(names.cleanup(args.rank))
    if not (cleaned and cleaned.get("incarnation") == args.incarnation):
        leftovers = [p.pid for pid in sessions for p in session_members(pid)]
        run.write_artifact(
            names.cleanup(args.rank),
            "cleanup",
            writer,
            {"outcome": "failure", "groups": [r.to_json() for r in records], "leftover_pids": leftovers},
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
