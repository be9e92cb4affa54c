"""The agent's side of its doorbell (agent/coord/doorbell.py), bound in INIT before the address
record: armed once the liveness thread exists (a valid ring is handled like a listed failure
record), told the peers at rendezvous, rung when the failure signal trips, asked for the
preflight's probe of the peers, and counted in the cleanup record. Without it (bind refused, no
secret, or `[launch.coordination] doorbell = false`) the run goes on through its files alone."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agent.coord.doorbell import Doorbell
from agent.coord.doorbell_msg import PeerBell
from agent.coord.doorbell_probe import Probed
from agent.coord.doorbell_secret import SecretUnavailable, ensure_secret
from agent.coord.liveness import Liveness, watched_peers, watchers_of
from agent.coord.rendezvous import Peer
from agent.ground.failure import FailureSignal
from agent.ground.reaper_channel import ReaperChannel
from agent.lifecycle.init import Joined
from agent.stacks.live import LiveStacks
from schemas import FailureKind

__all__ = ["DoorbellLink"]

log = logging.getLogger("agent.lifecycle.agent")  # the name its lines always had in the agent's log

OFF = "doorbell off: %s; failures reach peers through the run directory only"


class DoorbellLink:
    def __init__(self, joined: Joined, signal: FailureSignal) -> None:
        self.bell: Doorbell | None = joined.doorbell  # None when off
        self.note = joined.doorbell_note  # why binding it failed
        self.enabled = joined.config.coordination.doorbell
        self.run, self.writer, self.signal = joined.run, joined.writer, signal
        self.rank, self.count, self.address = joined.ident.rank, joined.ident.count, joined.ident.address

    def arm(self, liveness: Liveness, reaper: ReaperChannel, live: LiveStacks, beacon_every: float) -> None:
        """Listen (rings, notices, stack requests) and ring every peer when the signal trips. The
        log says once why it stays off."""
        bell = self.bell
        if not self.enabled:
            return
        if bell is None:
            log.warning(OFF, self.note)
            return
        try:
            secret = ensure_secret(self.run)
        except SecretUnavailable as exc:
            self.bell = None
            bell.close()
            log.warning(OFF, exc)
            return
        bell.arm(
            secret,
            run=self.run.path.name,
            attempt=self.run.attempt,
            rank=self.rank,
            incarnation=self.writer.incarnation,
            on_ring=liveness.ring_received,
            stopping=self.signal.is_set,
            on_notice=liveness.notice_received,
            status=liveness.status,
            beacon_every=beacon_every,
            on_beacon=reaper.alive,  # the reaper rides out a still heartbeat file as the watchers do
            on_stacks=live.ask,
        )
        bell.start()
        log.info("doorbell listening on %s (UDP)", bell.where)
        self.signal.on_trip(self._ring_peers)

    def _ring_peers(self) -> None:
        """Ring with the failure itself: ours, or for a reaction the one it reacts to (as a peer
        following our record to the failure it names would)."""
        failure, bell = self.signal.failure, self.bell
        if failure is None or bell is None or failure.heard_on_doorbell:
            return  # a ring heard was sent to every peer by its sender (three copies): not rung on
        target = failure.reacting_to or {}
        if failure.kind == FailureKind.PEER_FAILURE and isinstance(target.get("rank"), int):
            bell.ring(
                int(target["rank"]),
                str(target.get("incarnation")),
                str(target.get("kind")),
                failure.reacted_cause if failure.reacted_cause is not None else failure.cause,
            )
        else:
            bell.ring(self.rank, self.writer.incarnation, str(failure.kind), failure.cause)

    def peers_so_far(self, peers: list[Peer]) -> None:
        """During rendezvous: a failure now (ours, or one we learn of) rings the peers read so far."""
        if self.bell is not None:
            self.bell.set_peers(_bells(peers), partial=True)

    def peers_known(self, peers: list[Peer], liveness: Liveness, reaper: ReaperChannel) -> None:
        """After rendezvous: every peer's doorbell, whether beacons count, and the reaper's copy."""
        if self.bell is None:
            return
        bells = _bells(peers)
        self.bell.set_peers(bells, watchers=watchers_of(self.rank, self.count))
        ports = {b.rank: b.port for b in bells}
        # Beacons only count when every watched peer rings too (a peer with its doorbell off
        # sends none: its heartbeat file is then the only word of it).
        watched = watched_peers(self.rank, self.count)
        liveness.set_beacons(self.bell.is_alive() and all(ports.get(w) is not None for w in watched))
        line = self.bell.reaper_line()
        if line is not None:  # a killed agent's reaper rings for it
            reaper.doorbell(line)

    def complete(self) -> None:
        """The driver's node: tell the peers its ack is there."""
        if self.bell is not None:
            self.bell.complete()

    def probe_off(self) -> str:
        """Why this agent cannot probe its peers (its doorbell is off), or ""."""
        if not self.enabled:
            return "[launch.coordination] doorbell = false"
        return "" if self.bell is not None else f"the doorbell is off ({self.note})"

    def probe(self, peers: Sequence[Peer], timeout: float) -> list[Probed] | None:
        """The preflight's probe of every peer's address, through the doorbell's signed messages."""
        bell = self.bell
        if bell is None:
            return None
        return bell.probe(_bells(list(peers)), self.address, timeout, self.signal.is_set)

    def summary(self) -> dict[str, Any]:
        """The doorbell's counts for the cleanup record (and a line in the log when it dropped any)."""
        bell = self.bell
        if bell is None:
            return {}
        bell.stop()
        bell.join(0.1)  # it only sends what is still due: no filesystem, a few ms
        summary = bell.summary()
        dropped = summary["dropped"]
        if dropped:
            told = ", ".join(f"{n} {why}" for why, n in dropped.items())
            log.info("doorbell: dropped %d datagram(s): %s", sum(dropped.values()), told)
        return {"doorbell": summary}


def _bells(peers: list[Peer]) -> list[PeerBell]:
    return [PeerBell(p.rank, p.address, p.doorbell_port, p.incarnation) for p in peers]
