"""The reaper: a sidecar that cleans up after an agent that died without doing it itself.

The agent starts it first, in its own session (so a kill of the agent's group spares it), and
tells it every child session, temp dir and phase as JSON lines on its stdin (ReaperChannel).
When stdin closes without a final "done" line
the agent died (SIGKILL, OOM, crash): the reaper stops every recorded session, then writes the
agent's failure record (unless the agent wrote one) and cleanup record (writer "reaper"), so even
a SIGKILLed replica leaves evidence and no processes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from schemas import FailureKind, RunDir, RunOutcome, Writer, WriterKind, names
from schemas.vocab import PHASE_UNKNOWN

from . import clock, tempdirs
from .failure import Failure, write_failure_record
from .procgroup import StopRecord, session_members, sweep_session
from .waits import poll_until


def _stop_session(name: str, pid: int, grace: float) -> StopRecord:
    t0 = time.monotonic()
    how = "already_gone"
    if session_members(pid):
        how = "sigterm"
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not poll_until(lambda: not session_members(pid), deadline=time.monotonic() + grace, interval=0.1):
            how = "sigkill"
    swept = sweep_session(pid)
    return StopRecord(name, pid, pid, how, None, swept, time.monotonic() - t0)


def remove_temp_dir(path: str) -> bool:
    """Remove one of the agent's own local temp dirs; anything else named to us is left alone."""
    p = Path(path)
    try:
        st = p.lstat()
    except OSError:
        return False
    if not tempdirs.is_ours(p) or p.is_symlink() or st.st_uid != os.geteuid():
        return False
    shutil.rmtree(p, ignore_errors=True)
    return True


class ReaperChannel:
    """The agent's side of the reaper protocol: one JSON object per line on the reaper's stdin.

    {"group": NAME, "session": SID}  a child session to stop if the agent dies
    {"phase": PHASE}                 the phase the agent is in (named in the failure record)
    {"temp_dir": PATH}               a local temp dir to remove
    {"done": true}                   everything is cleaned and recorded: exit without acting
    """

    def __init__(self, stream: IO[str] | None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def group(self, name: str, session: int) -> None:
        self._send({"group": name, "session": session})

    def phase(self, phase: str) -> None:
        self._send({"phase": phase})

    def temp_dir(self, path: str) -> None:
        self._send({"temp_dir": path})

    def done(self) -> None:
        self._send({"done": True})
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError:
                pass

    def _send(self, message: dict[str, object]) -> None:
        if self._stream is None:
            return
        with self._lock:  # lines from the supervisor and the main thread must not interleave
            try:
                self._stream.write(json.dumps(message) + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass  # the reaper is gone: nothing left to tell it


@dataclass
class ReaperState:
    """The reaper's side: what it learnt from the agent's lines."""

    sessions: dict[int, str] = field(default_factory=dict)
    temp_dirs: list[str] = field(default_factory=list)
    phase: str = PHASE_UNKNOWN
    done: bool = False

    def apply(self, line: str) -> None:
        """Apply one line; a malformed one is ignored (the agent may die mid-write)."""
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if msg.get("done") is True:
            self.done = True
        elif isinstance(msg.get("group"), str) and isinstance(msg.get("session"), int):
            self.sessions[msg["session"]] = msg["group"]
        elif isinstance(msg.get("phase"), str):
            self.phase = msg["phase"]
        elif isinstance(msg.get("temp_dir"), str):
            self.temp_dirs.append(msg["temp_dir"])


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
    state = ReaperState()
    for line in sys.stdin:
        state.apply(line)
        if state.done:
            return 0
    # stdin closed without "done": the agent is gone.
    t0 = clock.mono()
    records = [_stop_session(name, pid, args.grace) for pid, name in state.sessions.items()]
    for path in state.temp_dirs:
        remove_temp_dir(path)
    run = RunDir.open(args.run_dir)
    writer = Writer(args.fingerprint, args.rank, args.incarnation, kind=WriterKind.REAPER)
    mine = run.read_json(names.failure(args.rank))
    if not (mine and mine.get("incarnation") == args.incarnation):
        failure = Failure(
            kind=FailureKind.AGENT_DIED,
            cause=f"agent process {args.agent_pid} of rank {args.rank} died without cleaning up "
            f"(killed or crashed) during phase {state.phase}",
            phase=state.phase,
            log=names.agent_log(args.rank),
            monotonic_time=t0,
        )
        write_failure_record(run, writer, args.rank, failure, state.phase)
    cleaned = run.read_json(names.cleanup(args.rank))
    if not (cleaned and cleaned.get("incarnation") == args.incarnation):
        leftovers = [p.pid for pid in state.sessions for p in session_members(pid)]
        run.write_artifact(
            names.cleanup(args.rank),
            "cleanup",
            writer,
            {
                "outcome": str(RunOutcome.FAILURE),
                "groups": [r.to_json() for r in records],
                "leftover_pids": leftovers,
            },
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
