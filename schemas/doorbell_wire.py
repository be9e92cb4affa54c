"""The doorbell's envelope, shared by the agents (agent/coord/doorbell_msg.py: rings and notices)
and gym-launch stacks (a request for stacks, the one message an agent gets from outside the run):

    MAGIC | body | HMAC-SHA256(secret, MAGIC | body)

body is JSON with sorted keys. A receiver checks the tag before it parses anything. The one I/O
here is `send_copies`: a sender without the agent's doorbell thread (the reaper ringing for a killed
agent, gym-launch stacks) sends its datagrams with it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["MAGIC", "MAX_DATAGRAM", "STACKS_TYPE", "TAG_BYTES", "seal", "send_copies", "stacks_request", "tag"]

MAGIC = b"GYMDB1"
TAG_BYTES = hashlib.sha256().digest_size
MAX_DATAGRAM = 1200  # under the smallest IPv6 MTU: never fragmented
STACKS_TYPE = "stacks"  # gym-launch stacks asks one agent for its processes' stacks


def tag(secret: bytes, signed: bytes) -> bytes:
    return hmac.new(secret, signed, hashlib.sha256).digest()


def seal(body: bytes, secret: bytes) -> bytes:
    """A datagram of an already serialized body."""
    signed = MAGIC + body
    return signed + tag(secret, signed)


def stacks_request(
    secret: bytes, *, run: str, attempt: int, to: int, to_incarnation: str, request: str, seq: int, sent_at: float
) -> bytes:
    """gym-launch's request to rank `to` (at the incarnation its address record names): read
    stack-requests/request-REQUEST.json and answer it."""
    body: dict[str, Any] = {
        "type": STACKS_TYPE,
        "run": run,
        "attempt": attempt,
        "to": to,
        "to_incarnation": to_incarnation,
        "request": request,
        "seq": seq,
        "sent_at": sent_at,
    }
    return seal(json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), secret)


def send_copies(datagrams: Sequence[tuple[str, int, bytes]], copies_at: Sequence[float]) -> tuple[int, int]:
    """Send each (host, port, datagram) once per entry of `copies_at` (seconds from now: a lost
    datagram is sent again, briefly), one socket per address family, in the caller's thread.
    Returns (targets resolved, datagrams sent); never raises."""
    targets = []
    for host, port, data in datagrams:
        try:
            targets.append((socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0], data))
        except (OSError, UnicodeError, IndexError):
            continue
    sent = 0
    socks: dict[int, socket.socket] = {}
    try:
        started = time.monotonic()
        for at in copies_at:
            time.sleep(max(0.0, started + at - time.monotonic()))
            for (family, kind, proto, _, addr), data in targets:
                try:
                    sock = socks.get(family) or socks.setdefault(family, socket.socket(family, kind, proto))
                    sock.sendto(data, addr)
                    sent += 1
                except OSError:
                    pass
    finally:
        for sock in socks.values():
            sock.close()
    return len(targets), sent
