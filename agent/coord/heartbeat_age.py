"""How long a heartbeat file has stood still, on the observer's own monotonic clock: the one rule
the peers watching a rank (agent/coord/liveness.py) and that rank's own reaper
(agent/reaper/_sidecar.py) both apply, so they decide alike.

A heartbeat is written by its agent alone, atomically (temp, rename): no reader ever sees one half
written. A file that reads as something else (bytes that are no JSON object) was written by
someone else, or the storage corrupts it; while that goes on the file is no channel at all, and a
sequence number read between two such writes proves nothing. So a corrupt read is never a change,
and a change read within `distrust` seconds of a corrupt read does not count either: the file has
to read clean for that long before it speaks for its agent again. One stray corrupt read (with
distrust = heartbeat_timeout / 2) costs at most half a timeout; a file corrupted for a whole
timeout makes its rank still (silent, or ridden out where its beacons arrive), every time, whatever
the interleaving of the writers and the readers.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.store import JsonRead

__all__ = ["HeartbeatAge"]


@dataclass
class HeartbeatAge:
    changed_at: float  # observer's monotonic clock: when the file's seq last changed (or watching began)
    distrust: float  # seconds a corrupt read keeps the file from counting as a change
    seq: int | None = None
    corrupt_reads: int = 0
    corrupt_at: float | None = None  # the last corrupt read

    def observe(self, read: JsonRead, now: float, incarnation: str | None = None) -> bool:
        """One read of the file at `now`. True when it counts as a change (the age restarts).
        `incarnation`: only that writer's heartbeat counts (the reaper knows its agent's)."""
        if read.corrupt:
            self.corrupt_reads += 1
            self.corrupt_at = now
            return False
        doc = read.doc or {}
        seq = doc.get("seq")
        if incarnation is not None and doc.get("incarnation") != incarnation:
            return False
        if not isinstance(seq, int) or seq == self.seq:
            return False
        self.seq = seq
        if self.corrupt_at is not None and now - self.corrupt_at < self.distrust:
            return False  # read between another writer's writes: proves nothing yet
        self.changed_at = now
        return True

    def still_for(self, now: float) -> float:
        return now - self.changed_at

    def corrupt_since(self, since: float) -> bool:
        """A corrupt read at or after `since` (the file's last change, say)."""
        return self.corrupt_at is not None and self.corrupt_at >= since

    def describe_corrupt(self) -> str:
        """A clause for a cause or a log line ("" when the file never read corrupt)."""
        if not self.corrupt_reads:
            return ""
        return (
            f"; its heartbeat file read {self.corrupt_reads} time(s) as bytes its agent never writes "
            "(another writer, or the storage corrupting it)"
        )
