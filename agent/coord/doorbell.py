"""The doorbell: a UDP socket on the agent's run address, beside the files.

A failure reaches a peer's failures/ listing only as fast as its filesystem's caches allow (NFS:
up to a minute). So when an agent stops for a failure (its own, or one it learned of) it also
rings every peer: a few copies of one authenticated datagram (agent/coord/doorbell_msg.py) sent
from this thread, never from the one stopping children, and never waited for. A peer that gets a
valid ring reacts exactly as if it had read the failure record (Liveness.ring_received) and writes
its own record: files stay the record, the audit reads only them.

UDP because a datagram is bounded, needs no accept loop or connection state a stranger could hold
open, and a lost one costs nothing but the files' slower path. The port is bound (port 0: the
kernel picks a free one) and KEPT before the address record that publishes it is written: no
bind-then-release race, and a ring sent the moment the record is readable is queued by the kernel.
Anything unauthenticated, malformed, oversized, for another run or from a stale incarnation is
dropped and counted (the cleanup record, the agent's log), never an exception out of this thread.
When the socket cannot be bound or datagrams cannot be sent, the run goes on through its files
and the log says so once. This thread never touches the shared filesystem.

Beside the rings, two notices (doorbell_msg.Notice): every heartbeat interval an `alive` beacon to
the peers that watch this agent (its ring predecessors), so they know it is alive while its
heartbeat file does not change (a stalled mount, a cache); and once, from the driver's node, a
`complete` wake-up when complete.json and its ack are written. Neither is ever logged here: a log
line is a write to the shared filesystem, and a stalled one must not stop the beacons.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.coord.doorbell_msg import (
    Drop,
    Dropped,
    Message,
    Notice,
    NoticeType,
    PeerBell,
    Ring,
    StacksAsk,
    check_peer,
    decode,
    encode,
)
from agent.coord.doorbell_probe import Probed, Prober, probe_peers
from agent.ground import clock
from agent.proc.wakeup import Wakeup
from schemas.doorbell_wire import MAX_DATAGRAM, send_copies

__all__ = ["COPIES_AT", "Doorbell", "MAX_PENDING", "PeerBell", "RECV_BATCH", "log", "ring_once"]

log = logging.getLogger(__name__)

COPIES_AT = (0.0, 0.02, 0.1)  # seconds after the ring: a lost datagram is sent again, briefly
MAX_PENDING = 16  # authenticated rings held until the peers' incarnations are known
RECV_BATCH = 256  # datagrams read per wake, so a flood cannot keep the loop from sending


@dataclass
class _Send:
    data: bytes
    due: list[float]  # monotonic times of the copies still to send


class Doorbell(threading.Thread):
    def __init__(self, sock: socket.socket, where: str) -> None:
        super().__init__(name="doorbell", daemon=True)
        self._sock = sock
        self._port = int(sock.getsockname()[1])
        self.where = where  # "address:port", for the log
        self._lock = threading.Lock()
        self._wakeup = Wakeup()
        self._halt = threading.Event()
        self._sends: list[_Send] = []
        self._peers: list[PeerBell] | None = None
        self._targets: list[tuple[int, Any]] | None = None  # (rank, sockaddr), resolved in this thread
        self._resolved: dict[tuple[str, int], Any] = {}  # (address, port) -> sockaddr: this thread's
        self._incarnations: dict[int, str] = {}
        self._partial = False  # the peers are those rendezvous has read so far, not all of them
        self._pending: list[Message] = []
        self._watchers: frozenset[int] = frozenset()  # the ranks our beacons go to
        self._beacon_every: float | None = None
        self._next_beacon = 0.0
        self._status: Callable[[], tuple[int, float]] = lambda: (0, 0.0)
        self._on_notice: Callable[[Notice], None] = lambda _n: None
        self._on_beacon: Callable[[int], None] | None = None
        self._seq = 0
        self._said: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self._armed = False
        self._secret = b""
        self._run = ""
        self._attempt = 1
        self._rank = 0
        self._incarnation = ""
        self._on_ring: Callable[[Ring], None] = lambda _r: None
        self._on_stacks: Callable[[str], None] = lambda _request: None
        self._stopping: Callable[[], bool] = lambda: False

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def bind(cls, address: str) -> tuple[Doorbell | None, str]:
        """A doorbell bound to `address` (else to every address of its family) on a free port,
        or None and why not. The socket is kept: the port is never released before use."""
        try:
            infos = socket.getaddrinfo(address, 0, type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError) as exc:
            return None, f"cannot resolve this agent's address {address!r} ({exc})"
        problems = []
        for family, kind, proto, _, sockaddr in infos:
            wildcard = "::" if family == socket.AF_INET6 else "0.0.0.0"
            for host in (sockaddr[0], wildcard):
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError as exc:
                    problems.append(f"socket: {exc}")
                    break
                try:
                    sock.setblocking(False)
                    sock.bind((host, 0))
                except OSError as exc:
                    sock.close()
                    problems.append(f"bind {host}: {exc.strerror or exc}")
                    continue
                port = sock.getsockname()[1]
                return cls(sock, f"{host}:{port}"), ""
        return None, f"cannot bind a UDP socket on {address!r} ({'; '.join(problems) or 'no address'})"

    @property
    def port(self) -> int:
        return self._port

    def arm(
        self,
        secret: bytes,
        *,
        run: str,
        attempt: int,
        rank: int,
        incarnation: str,
        on_ring: Callable[[Ring], None],
        stopping: Callable[[], bool],
        on_notice: Callable[[Notice], None] | None = None,
        status: Callable[[], tuple[int, float]] | None = None,
        beacon_every: float | None = None,
        on_beacon: Callable[[int], None] | None = None,
        on_stacks: Callable[[str], None] | None = None,
    ) -> None:
        """What the thread needs before start(): the secret, who we are, and what a valid ring,
        notice or request for stacks (gym-launch stacks: `on_stacks(request)`) does. With
        `beacon_every`, an alive beacon carrying `status()` (heartbeat sequence, seconds the
        filesystem call in progress has hung) goes to the watchers that often, and `on_beacon(seq)`
        tells this agent's own reaper the same (a local pipe, no filesystem)."""
        self._secret, self._run, self._attempt = secret, run, attempt
        self._rank, self._incarnation = rank, incarnation
        self._on_ring, self._stopping = on_ring, stopping
        if on_notice is not None:
            self._on_notice = on_notice
        if status is not None:
            self._status = status
        if on_stacks is not None:
            self._on_stacks = on_stacks
        self._beacon_every = beacon_every
        self._on_beacon = on_beacon
        self._armed = True

    # -- from other threads ---------------------------------------------------------------------

    def set_peers(self, peers: Sequence[PeerBell], watchers: Sequence[int] = (), *, partial: bool = False) -> None:
        """The run's peers, from their address records, and the ranks that watch this agent's
        liveness (its beacons go to them). `partial`: the peers rendezvous has read so far. Rings
        go to them at once (a failure during startup need not wait for the last replica), and a
        message from a rank not read yet is held, not dropped, until the next call names it."""
        with self._lock:
            self._peers = list(peers)
            self._incarnations = {p.rank: p.incarnation for p in peers}
            self._watchers = frozenset(watchers)
            self._partial = partial
            self._targets = None  # resolved again by the thread, which then retries what it held
        self._wakeup.set()

    def complete(self) -> None:
        """Tell every peer that the driver's node wrote its completion (a wake-up: they read it)."""
        if not self._armed:
            return
        with self._lock:
            notice = self._notice(NoticeType.COMPLETE)
            now = time.monotonic()
            self._sends.append(_Send(encode(notice, self._secret), [now + d for d in COPIES_AT]))
        self._wakeup.set()

    def _envelope(self) -> dict[str, Any]:
        """Who sends, and the next sequence number: every message's first fields (callers hold the lock)."""
        self._seq += 1
        return {
            "run": self._run,
            "attempt": self._attempt,
            "sender": self._rank,
            "incarnation": self._incarnation,
            "seq": self._seq,
            "sent_at": clock.wall(),
        }

    def _notice(self, kind: NoticeType, hb_seq: int = 0, fs_busy: float = 0.0) -> Notice:
        return Notice(type=kind, **self._envelope(), hb_seq=hb_seq, fs_busy=fs_busy)

    def ring(self, failed_rank: int, failed_incarnation: str, kind: str, cause: str) -> None:
        """Tell every peer that `failed_rank` failed. Returns at once: the thread sends."""
        if not self._armed:
            return
        with self._lock:
            ring = Ring(
                **self._envelope(),
                failed_rank=failed_rank,
                failed_incarnation=failed_incarnation,
                kind=kind,
                cause=cause,
            )
            now = time.monotonic()
            self._sends.append(_Send(encode(ring, self._secret), [now + d for d in COPIES_AT]))
            self.counts["rings"] += 1
        self._wakeup.set()

    def stop(self) -> None:
        """Send what is still due at once (no waiting for the retries), then end the thread."""
        self._halt.set()
        self._wakeup.set()

    def reaper_line(self) -> dict[str, Any] | None:
        """What the reaper needs to ring for this agent if it is killed (agent/reaper/_sidecar.py):
        the secret travels through the reaper's private pipe, never through a file or a log."""
        with self._lock:
            peers = self._peers
        if not self._armed or peers is None:
            return None
        return {
            "secret": self._secret.hex(),
            "run": self._run,
            "attempt": self._attempt,
            "peers": [[p.rank, p.address, p.port, p.incarnation] for p in peers],
        }

    def summary(self) -> dict[str, Any]:
        """For the cleanup record: where it listened and what it counted."""
        with self._lock:
            return {
                "port": self._port,
                "rings": self.counts["rings"],
                "sent": self.counts["sent"],
                "send_errors": self.counts["send_errors"],
                "received": self.counts["received"],
                "accepted": self.counts["accepted"],
                "ignored_stopping": self.counts["ignored_stopping"],
                "beacons_sent": self.counts["beacons_sent"],
                "beacons_received": self.counts["beacons_received"],
                "dropped": dict(sorted(self.dropped.items())),
            }

    def close(self) -> None:
        """A doorbell that never started (no secret): release the socket."""
        self._sock.close()
        self._wakeup.close()

    # -- the thread -----------------------------------------------------------------------------

    def run(self) -> None:
        fd = self._sock.fileno()
        try:
            while True:
                try:
                    halting = self._halt.is_set()
                    self._resolve()
                    self._send_due(flush=halting)
                    if halting:
                        return
                    self._beacon()
                    ready = self._wakeup.wait(self._next_due(), [fd])
                    if fd in ready:
                        self._receive()
                except Exception as exc:  # noqa: BLE001 - the doorbell must never take the agent down
                    self._say_once("loop", f"doorbell: {type(exc).__name__}: {exc}; continuing")
                    time.sleep(0.05)
        finally:
            self._sock.close()
            self._wakeup.close()

    def _say_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", text)

    def _next_due(self) -> float | None:
        with self._lock:
            due = [t for s in self._sends for t in s.due[:1]]
            if self._beacon_every is not None and self._targets is not None:
                due.append(self._next_beacon)
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _beacon(self) -> None:
        """An alive beacon to the watchers when one is due. Stopping agents send none: their
        failure rings say more, and a reaction is no longer a peer to keep alive."""
        if self._beacon_every is None:
            return
        if self._stopping():
            with self._lock:
                self._beacon_every = None  # for good (stopping never ends): no beacon is due again
            return
        now = time.monotonic()
        with self._lock:
            targets = self._targets
            if targets is None or now < self._next_beacon:
                return
            self._next_beacon = now + self._beacon_every
            hb_seq, fs_busy = self._status()
            data = encode(self._notice(NoticeType.ALIVE, hb_seq, fs_busy), self._secret)
            to = [addr for rank, addr in targets if rank in self._watchers]
        for addr in to:
            try:
                self._sock.sendto(data, addr)
                self.counts["beacons_sent"] += 1
            except OSError:
                self.counts["send_errors"] += 1  # a blocked path: the heartbeat files still tell
        if self._on_beacon is not None:
            self._on_beacon(hb_seq)

    def _resolve(self) -> None:
        with self._lock:
            peers = self._peers if self._targets is None else None
        if peers is None:
            return
        targets = []
        for p in peers:
            if p.rank == self._rank or p.port is None:
                continue  # ourselves, or a peer whose doorbell is off: its files tell it
            known = self._resolved.get((p.address, p.port))
            if known is not None:  # rendezvous names the peers again as it reads more of them
                targets.append((p.rank, known))
                continue
            try:
                info = socket.getaddrinfo(p.address, p.port, self._sock.family, socket.SOCK_DGRAM)
                targets.append((p.rank, info[0][4]))
                self._resolved[(p.address, p.port)] = info[0][4]
            except (OSError, UnicodeError, IndexError) as exc:
                self.counts["unresolved"] += 1
                self._say_once("resolve", f"doorbell: cannot reach rank {p.rank} at {p.address!r} ({exc}); files only")
        with self._lock:
            self._targets = targets
            pending, self._pending = self._pending, []
        for ring in pending:
            self._accept(ring)

    def _send_due(self, *, flush: bool) -> None:
        with self._lock:
            targets = self._targets
            if targets is None:
                if not flush:
                    return  # rung before rendezvous read any peer: sent once it has
                targets = []
            now = time.monotonic()
            batch = []
            for s in self._sends:
                while s.due and (flush or s.due[0] <= now):
                    s.due.pop(0)
                    batch.append(s.data)
            self._sends = [s for s in self._sends if s.due]
        for data in batch:
            for rank, addr in targets:
                try:
                    self._sock.sendto(data, addr)
                    self.counts["sent"] += 1
                except OSError as exc:
                    # A full buffer (EAGAIN, ENOBUFS) is a lost copy; EPERM, ENETUNREACH: blocked.
                    self.counts["send_errors"] += 1
                    if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                        self._say_once(
                            "send",
                            f"doorbell: cannot ring rank {rank} ({exc.strerror or exc}); peers learn of failures "
                            "through the run directory only",
                        )

    def _receive(self) -> None:
        for _ in range(RECV_BATCH):
            try:
                data, sender = self._sock.recvfrom(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. an ICMP error queued on the socket: nothing to read
            self.counts["received"] += 1
            if self._stopping():
                self.counts["ignored_stopping"] += 1  # already stopping: nothing a ring could change
                continue
            try:
                msg = decode(data, self._secret, self._run)
            except Dropped as exc:
                self._drop(exc, sender)
                continue
            if isinstance(msg, Notice) and msg.type in (NoticeType.PROBE, NoticeType.ECHO):
                self._answer(msg, sender)  # whoever asks with the run's secret: before rendezvous too
                continue
            with self._lock:
                known, partial = self._targets is not None, self._partial
            if isinstance(msg, Notice | StacksAsk) and (partial or not known):
                continue  # a beacon, wake-up or request from before our rendezvous: nothing to keep
            if not known:
                self._hold(msg)
                continue
            self._accept(msg, sender)

    def _answer(self, msg: Notice, sender: Any) -> None:
        """A preflight probe (agent/coord/doorbell_probe.py) of this attempt gets an echo, sent back
        where it came from; an echo here is not ours to read (the prober listens on its own socket)."""
        if msg.type is not NoticeType.PROBE:
            return
        if msg.attempt != self._attempt:
            self._drop(Dropped(Drop.STALE, f"probe of attempt {msg.attempt}, not {self._attempt}"), sender)
            return
        with self._lock:
            data = encode(self._notice(NoticeType.ECHO, hb_seq=msg.seq), self._secret)
        try:
            self._sock.sendto(data, sender)
            self.counts["probes_answered"] += 1
        except OSError:
            self.counts["send_errors"] += 1

    def probe(self, peers: Sequence[PeerBell], address: str, timeout: float, abort: Callable[[], bool]) -> list[Probed]:
        """Ask every peer's doorbell whether it answers, from `address` (this node's run address),
        in the caller's thread and on a socket of its own (agent/coord/doorbell_probe.py). Empty
        when this doorbell is not armed (off: the probe cannot be signed)."""
        if not self._armed:
            return []
        ident = Prober(self._secret, self._run, self._attempt, self._rank, self._incarnation)
        return probe_peers(ident, [p for p in peers if p.rank != self._rank], address, timeout, abort)

    def _hold(self, msg: Message) -> None:
        """Keep an authenticated ring until the peers' incarnations are known (bounded)."""
        with self._lock:
            if len(self._pending) < MAX_PENDING:
                self._pending.append(msg)
            else:
                self.dropped[str(Drop.UNKNOWN_RANK)] += 1

    def _accept(self, msg: Message, sender: Any = None) -> None:
        try:
            check_peer(msg, self._attempt, self._incarnations)
        except Dropped as exc:
            if exc.reason is Drop.UNKNOWN_RANK and self._partial and isinstance(msg, Ring):
                self._hold(msg)  # from (or about) a rank whose address record we have not read yet
                return
            self._drop(exc, sender)
            return
        if isinstance(msg, Notice):
            if msg.type is NoticeType.ALIVE:
                self.counts["beacons_received"] += 1
            self._on_notice(msg)
            return
        if isinstance(msg, StacksAsk):
            if msg.to == self._rank:
                self.counts["stacks_asked"] += 1
                self._on_stacks(msg.request)  # a wake-up only: the responder reads the request file
            else:
                self._drop(Dropped(Drop.UNKNOWN_RANK, f"a request for rank {msg.to}"), sender)
            return
        ring = msg
        if ring.failed_rank == self._rank:
            self.counts["ignored_stopping"] += 1  # about our own failure: we know
            return
        self.counts["accepted"] += 1
        self._on_ring(ring)  # first: the log line below is a write to the shared filesystem
        log.info("doorbell: rank %d rang: rank %d failed (%s)", ring.sender, ring.failed_rank, ring.kind)

    def _drop(self, exc: Dropped, sender: Any) -> None:
        self.dropped[str(exc.reason)] += 1
        origin = f" from {sender[0]}:{sender[1]}" if sender else ""
        self._say_once(f"drop-{exc.reason}", f"doorbell: dropped a datagram{origin} ({exc}); further ones are counted")


def ring_once(
    secret: bytes,
    *,
    run: str,
    attempt: int,
    rank: int,
    incarnation: str,
    peers: Sequence[PeerBell],
    kind: str,
    cause: str,
) -> int:
    """One ring from a process without a doorbell thread (the reaper of a killed agent, which rings
    as that agent): every copy to every peer from a fresh socket, in the caller's thread (the
    reaper runs it in one of its own). Returns the datagrams sent; never raises."""
    ring = Ring(
        run=run,
        attempt=attempt,
        sender=rank,
        incarnation=incarnation,
        seq=1 << 40,  # apart from the agent's own sequence
        sent_at=clock.wall(),
        failed_rank=rank,
        failed_incarnation=incarnation,
        kind=kind,
        cause=cause,
    )
    data = encode(ring, secret)
    datagrams = [(p.address, p.port, data) for p in peers if p.rank != rank and p.port is not None]
    return send_copies(datagrams, COPIES_AT)[1]
