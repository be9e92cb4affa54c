"""The pipe between an agent and its reaper: one JSON object per line on the reaper's stdin. The
agent's side (ReaperChannel) and the reaper's (ReaperState) are here together, below both: the
supervisor and the run context hold the channel, the sidecar (agent/reaper/) applies its lines."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import IO, Any

from agent.ground import clock
from schemas.vocab import PHASE_UNKNOWN

__all__ = ["MARK_ENV", "ReaperChannel", "ReaperState"]

# Every child the supervisor starts carries the agent's incarnation in this variable, and so does
# whatever it starts in turn. The reaper stops the marked processes whose session the agent could not
# name to it before it died (killed between a child's fork and the channel's line).
MARK_ENV = "GYM_AGENT_CHILD_OF"


class ReaperChannel:
    """The agent's side of the reaper protocol: one JSON object per line on the reaper's stdin.

    {"group": NAME, "session": SID}  a child session to stop if the agent dies
    {"phase": PHASE}                 the phase the agent is in (named in the failure record)
    {"temp_dir": PATH}               a local temp dir to remove
    {"stopping": true}               the agent is tearing down by itself (heartbeats stop)
    {"stray": PID, "ctime": T}       a descendant that left every session (setsid): kill it too
    {"done": true}                   everything is cleaned and recorded: exit without acting
    {"doorbell": {...}}              the agent's doorbell (secret, run, attempt, peers): ring for it
    {"alive": SEQ}                   the agent's doorbell thread sent its beacons (every heartbeat interval)
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

    def stopping(self) -> None:
        """The agent tears down by itself: its heartbeat stops on purpose, do not fence it."""
        self._send({"stopping": True})

    def stray(self, pid: int, create_time: float) -> None:
        self._send({"stray": pid, "ctime": create_time})

    def doorbell(self, line: dict[str, object]) -> None:
        self._send({"doorbell": line})

    def alive(self, seq: int) -> None:
        """The doorbell thread's beacon, told to the reaper too (called from that thread)."""
        self._send({"alive": seq})

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
    stopping: bool = False  # the agent is tearing down by itself: its heartbeat stops on purpose
    strays: dict[int, float] = field(default_factory=dict)  # pid -> create time
    doorbell: dict[str, Any] | None = None  # the agent's doorbell, to ring for it once it is gone
    alive_at: float | None = None  # our monotonic clock: the agent's last beacon

    def apply(self, line: str) -> None:
        """Apply one line; a malformed one is ignored (the agent may die mid-write)."""
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if isinstance(msg.get("alive"), int):
            self.alive_at = clock.mono()
        elif msg.get("done") is True:
            self.done = True
        elif msg.get("stopping") is True:
            self.stopping = True
        elif isinstance(msg.get("stray"), int) and isinstance(msg.get("ctime"), int | float):
            self.strays[msg["stray"]] = float(msg["ctime"])
        elif isinstance(msg.get("group"), str) and isinstance(msg.get("session"), int):
            self.sessions[msg["session"]] = msg["group"]
        elif isinstance(msg.get("phase"), str):
            self.phase = msg["phase"]
        elif isinstance(msg.get("temp_dir"), str):
            self.temp_dirs.append(msg["temp_dir"])
        elif isinstance(msg.get("doorbell"), dict):
            self.doorbell = msg["doorbell"]
