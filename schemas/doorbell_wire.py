"""The doorbell's envelope, shared by the agents (agent/coord/doorbell_msg.py: rings and notices)
and gym-launch stacks (a request for stacks, the one message an agent gets from outside the run):

    MAGIC | body | HMAC-SHA256(secret, MAGIC | body)

body is JSON with sorted keys. Pure: no I/O. A receiver checks the tag before it parses anything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

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
