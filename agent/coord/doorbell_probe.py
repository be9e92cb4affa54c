"""A preflight's question to every peer: does your run address answer? Asked of the doorbell that
already listens there (agent/coord/doorbell.py), so no new port is opened anywhere.

One UDP socket of our own, bound to this node's run address (the probe leaves from the address
peers know us by), sends each peer a signed `probe` (doorbell_msg.Notice) and resends it with a
backoff until the peer's doorbell answers with an `echo` carrying the probe's sequence number, or
the time is up. The kernel's ICMP answers are read from the socket's error queue (IP_RECVERR):
"port unreachable" means nothing listens there (the peer's agent is gone, or its doorbell closed),
"host/net unreachable" that the address cannot be routed to. A peer that stays silent is either
firewalled or not there; its ICMP refusal is taken as final only once it repeats
REFUSED_CONFIRM_S later (a peer that failed rang us before its socket closed: the caller checks
its failure signal first). Never raises for a network error: every peer gets a result.
"""

from __future__ import annotations

import errno
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.coord.doorbell_msg import Dropped, Notice, NoticeType, PeerBell, decode, encode
from agent.ground import clock
from schemas.doorbell_wire import MAX_DATAGRAM

__all__ = [
    "ICMP_ERRNOS",
    "IPV6_RECVERR",
    "IP_RECVERR",
    "Probed",
    "Prober",
    "REFUSED_CONFIRM_S",
    "RESEND_S",
    "SEQ_BASE",
    "probe_peers",
]

RESEND_S = (0.0, 0.2, 0.5, 1.0, 2.0)  # then every last interval: a peer's doorbell may start late
REFUSED_CONFIRM_S = 0.5
IP_RECVERR = 11  # linux/in.h: ICMP errors of a UDP socket queued with the address they were about
IPV6_RECVERR = 25  # linux/in6.h
SEQ_BASE = 1 << 41  # apart from the agent's own sequence and the reaper's ring (1 << 40)


@dataclass(frozen=True)
class Prober:
    """Who asks: what every signed message carries."""

    secret: bytes
    run: str
    attempt: int
    rank: int
    incarnation: str


@dataclass(frozen=True)
class Probed:
    """One peer's answer: `answered` with the round trip, else `error` says what was seen."""

    rank: int
    address: str
    port: int | None
    answered: bool
    seconds: float  # round trip of the first echo; time waited when there was none
    error: str = ""
    stopped: bool = False  # not asked to the end: this agent began to stop (a failure) meanwhile

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "rank": self.rank,
            "address": self.address,
            "port": self.port,
            "answered": self.answered,
            "seconds": round(self.seconds, 4),
        }
        if self.error:
            out["error"] = self.error
        if self.stopped:
            out["stopped"] = True
        return out


@dataclass
class _Target:
    peer: PeerBell
    sockaddr: tuple[Any, ...]
    seq: int
    sent_at: float = 0.0
    refused: list[float] | None = None  # when the kernel said "port unreachable"
    error: str = ""
    result: Probed | None = None


def _errqueue_errno(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """ee_errno of the first sock_extended_err in a MSG_ERRQUEUE read."""
    for _level, _type, data in ancdata:
        if len(data) >= 4:
            return int(struct.unpack_from("=I", data, 0)[0])
    return None


def probe_peers(
    who: Prober,
    peers: Sequence[PeerBell],
    address: str,
    timeout: float,
    abort: Callable[[], bool] = lambda: False,
) -> list[Probed]:
    """Probe every peer (those without a doorbell port are reported, not probed); bounded by `timeout`."""
    out: list[Probed] = []
    started = time.monotonic()
    try:
        family = socket.getaddrinfo(address, 0, type=socket.SOCK_DGRAM)[0][0]
        sock = socket.socket(family, socket.SOCK_DGRAM)
    except (OSError, UnicodeError, IndexError) as exc:
        return [
            Probed(p.rank, p.address, p.port, False, 0.0, f"cannot open a probe socket on {address} ({exc})")
            for p in peers
        ]
    targets: dict[int, _Target] = {}
    with sock:
        try:
            sock.bind((address, 0))
        except OSError:
            sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))  # address not local (NAT)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
        else:
            sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        sock.setblocking(False)
        by_addr: dict[tuple[Any, ...], int] = {}
        for i, p in enumerate(peers):
            if p.port is None:
                out.append(Probed(p.rank, p.address, None, False, 0.0, "its doorbell is off: nothing to probe"))
                continue
            try:
                sockaddr = socket.getaddrinfo(p.address, p.port, family, socket.SOCK_DGRAM)[0][4]
            except (OSError, UnicodeError, IndexError) as exc:
                out.append(Probed(p.rank, p.address, p.port, False, 0.0, f"does not resolve ({exc})"))
                continue
            targets[p.rank] = _Target(p, sockaddr, SEQ_BASE + i)
            by_addr[sockaddr[:2]] = p.rank
        _run(who, sock, targets, by_addr, started + timeout, abort)
    waited = time.monotonic() - started
    stopped = abort()
    for t in targets.values():
        why = "stopped before it answered: this agent is stopping" if stopped else (t.error or "no answer")
        out.append(t.result or Probed(t.peer.rank, t.peer.address, t.peer.port, False, waited, why, stopped))
    return sorted(out, key=lambda r: r.rank)


ICMP_ERRNOS = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)


def _send(
    who: Prober, sock: socket.socket, t: _Target, targets: dict[int, _Target], by_addr: dict[tuple[Any, ...], int]
) -> None:
    probe = Notice(
        type=NoticeType.PROBE,
        run=who.run,
        attempt=who.attempt,
        sender=who.rank,
        incarnation=who.incarnation,
        seq=t.seq,
        sent_at=clock.wall(),
    )
    t.sent_at = t.sent_at or time.monotonic()
    for _ in range(2):
        try:
            sock.sendto(encode(probe, who.secret), t.sockaddr)
            return
        except OSError as exc:
            if exc.errno not in ICMP_ERRNOS:
                t.error = f"cannot send to it ({exc.strerror or exc})"
                return
            # An ICMP error about an earlier datagram (to any peer) surfaces on the next call:
            # the error queue says whose it was; then this send is tried again.
            _read_errors(sock, targets, by_addr)


def _run(
    who: Prober,
    sock: socket.socket,
    targets: dict[int, _Target],
    by_addr: dict[tuple[Any, ...], int],
    deadline: float,
    abort: Callable[[], bool],
) -> None:
    step = 0
    next_send = time.monotonic()
    while True:
        now = time.monotonic()
        open_ = [t for t in targets.values() if t.result is None]
        if not open_ or now >= deadline or abort():
            return
        if now >= next_send:
            for t in open_:
                _send(who, sock, t, targets, by_addr)
            step += 1
            next_send = now + (RESEND_S[step] if step < len(RESEND_S) else RESEND_S[-1])
        wait = max(0.0, min(next_send, deadline) - time.monotonic())
        ready, _, _ = select.select([sock], [], [], min(wait, 0.1))
        if ready:
            _read(who, sock, targets, by_addr)
        _settle_refused(targets)


def _read(who: Prober, sock: socket.socket, targets: dict[int, _Target], by_addr: dict[tuple[Any, ...], int]) -> None:
    for _ in range(256):
        try:
            data, _sender = sock.recvfrom(MAX_DATAGRAM + 1)
        except BlockingIOError:
            break
        except OSError:
            break  # the pending ICMP error: read from the error queue below

        try:
            msg = decode(data, who.secret, who.run)
        except Dropped:
            continue  # not an answer of this run: ignored
        if not isinstance(msg, Notice) or msg.type is not NoticeType.ECHO:
            continue
        t = targets.get(msg.sender)
        if t is None or t.result is not None or msg.hb_seq != t.seq or msg.incarnation != t.peer.incarnation:
            continue
        rtt = time.monotonic() - t.sent_at
        t.result = Probed(t.peer.rank, t.peer.address, t.peer.port, True, rtt)
    _read_errors(sock, targets, by_addr)


def _read_errors(sock: socket.socket, targets: dict[int, _Target], by_addr: dict[tuple[Any, ...], int]) -> None:
    """ICMP errors the kernel queued, each with the destination it was about."""
    for _ in range(256):
        try:
            _data, anc, _flags, dest = sock.recvmsg(64, 512, socket.MSG_ERRQUEUE)
        except (BlockingIOError, OSError):
            return
        rank = by_addr.get(tuple(dest[:2])) if dest else None
        t = targets.get(rank) if rank is not None else None
        if t is None or t.result is not None:
            continue
        code = _errqueue_errno(anc)
        if code == errno.ECONNREFUSED:
            t.error = "its doorbell port is closed (ICMP port unreachable): its agent is gone or its doorbell off"
            t.refused = [*(t.refused or []), time.monotonic()]
        elif code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            t.error = f"unreachable from here ({errno.errorcode.get(code, code)}): no route to its address"
        elif code is not None:
            t.error = f"ICMP error {errno.errorcode.get(code, code)}"


def _settle_refused(targets: dict[int, _Target]) -> None:
    """A refusal seen again REFUSED_CONFIRM_S after the first is final (the port stays closed)."""
    now = time.monotonic()
    for t in targets.values():
        if t.result is None and t.refused and t.refused[-1] - t.refused[0] >= REFUSED_CONFIRM_S:
            t.result = Probed(t.peer.rank, t.peer.address, t.peer.port, False, now - t.sent_at, t.error)
