"""The doorbell's wire format: one message per datagram, authenticated with the run's secret.

Pure (no I/O): `encode` builds a datagram, `decode` verifies and parses one or says why it is
dropped. A datagram is

    MAGIC | body | HMAC-SHA256(secret, MAGIC | body)

where body is JSON (sorted keys) with the message type, the run uuid, the sender's rank,
incarnation and attempt, a per-sender sequence number and the sender's wall time (for the log
only: hosts' clocks are never compared). Three types:
- `ring` (Ring): a failure, its rank, incarnation, kind and cause (cut to MAX_CAUSE_BYTES);
- `alive` (Notice): the sender is alive, with its heartbeat sequence and how long its liveness
  loop's call to the shared filesystem has been hanging (0: none) - liveness beside the files;
- `complete` (Notice): the driver's node wrote complete.json and its ack - a wake-up for the
  nodes waiting to read them (the files stay the record);
- `probe` / `echo` (Notice): a node's preflight asks whether a peer's address answers (agent/
  preflight/_network.py); the peer's doorbell sends an `echo` carrying the probe's seq (in hb_seq)
  back to where the probe came from, so a port that is open but firewalled is told from one that
  answers.
- `stacks` (StacksAsk): from gym-launch stacks, not a peer: rank `to` is asked to answer the request
  file it names (the envelope and its builder are schemas/doorbell_wire.py's, which gym-launch uses).
The tag is checked before the body is parsed: nothing unauthenticated reaches the JSON parser.
A datagram is at most MAX_DATAGRAM bytes, under the smallest IPv6 MTU (no fragmentation).
"""

from __future__ import annotations

import enum
import hmac
from dataclasses import dataclass
from typing import Any

import orjson

from schemas import names
from schemas.doorbell_wire import MAGIC, MAX_DATAGRAM, STACKS_TYPE, TAG_BYTES, seal
from schemas.doorbell_wire import tag as _tag
from schemas.vocab import FailureKind

__all__ = [
    "Drop",
    "Dropped",
    "Envelope",
    "MAGIC",
    "MAX_CAUSE_BYTES",
    "MAX_DATAGRAM",
    "MAX_RANK",
    "MAX_TEXT",
    "Message",
    "NOTICE_TYPES",
    "Notice",
    "NoticeType",
    "PeerBell",
    "RING_TYPE",
    "Ring",
    "SECRET_BYTES",
    "StacksAsk",
    "check_peer",
    "cut",
    "decode",
    "encode",
]

MAX_CAUSE_BYTES = 600
MAX_TEXT = 64  # run uuid (<= 128 by names.UUID_RE, but ours are short), incarnations
MAX_RANK = 1 << 20
SECRET_BYTES = 32
_KINDS = frozenset(str(k) for k in FailureKind)


class Drop(enum.StrEnum):
    """Why a datagram was not acted on (each counted by the receiver)."""

    OVERSIZE = "oversize"  # longer than MAX_DATAGRAM
    MALFORMED = "malformed"  # no magic, too short, or an authenticated body of the wrong shape
    BAD_MAC = "bad_mac"  # a wrong secret, or altered on the way
    OTHER_RUN = "other_run"  # authenticated, but for another run
    STALE = "stale"  # another attempt or incarnation than the one this agent knows for that rank
    UNKNOWN_RANK = "unknown_rank"  # a rank outside this run


class Dropped(Exception):
    def __init__(self, reason: Drop, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason


@dataclass(frozen=True)
class Envelope:
    """What every ring and notice carries: the run and attempt, who sent it (rank and
    incarnation), its sequence number and its wall time (logged, never compared)."""

    run: str
    attempt: int
    sender: int
    incarnation: str
    seq: int
    sent_at: float


@dataclass(frozen=True)
class Ring(Envelope):
    """One ring: `sender` tells that `failed_rank` (itself, or the peer whose failure it reacts
    to) failed with `kind`: `cause`."""

    failed_rank: int
    failed_incarnation: str
    kind: str
    cause: str


@dataclass(frozen=True)
class PeerBell:
    """Where a peer listens, from its address record (port None: its doorbell is off)."""

    rank: int
    address: str
    port: int | None
    incarnation: str


class NoticeType(enum.StrEnum):
    ALIVE = "alive"
    COMPLETE = "complete"
    PROBE = "probe"  # preflight: does this peer answer? (no filesystem, no new port)
    ECHO = "echo"  # the answer to a probe; hb_seq is the probe's seq


@dataclass(frozen=True)
class Notice(Envelope):
    """`sender` is alive (its heartbeat `hb_seq`; its filesystem call hanging for `fs_busy` s),
    or its driver completed."""

    type: NoticeType
    hb_seq: int = 0
    fs_busy: float = 0.0


@dataclass(frozen=True)
class StacksAsk:
    """gym-launch stacks asks rank `to` (at `to_incarnation`) to answer request `request`."""

    run: str
    attempt: int
    to: int
    to_incarnation: str
    request: str
    seq: int
    sent_at: float


Message = Ring | Notice | StacksAsk
NOTICE_TYPES = frozenset(str(t) for t in NoticeType)
RING_TYPE = "ring"


def cut(text: str, limit: int = MAX_CAUSE_BYTES) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, never inside a character."""
    raw = text.encode("utf-8", errors="replace")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", errors="ignore")


def _signed(body: dict[str, Any], secret: bytes) -> bytes:
    return seal(orjson.dumps(body, option=orjson.OPT_SORT_KEYS), secret)


def _envelope(msg: Ring | Notice) -> dict[str, Any]:
    """The fields every peer's message carries: who sent it, in which run and attempt, and when."""
    return {
        "run": msg.run,
        "attempt": msg.attempt,
        "sender": msg.sender,
        "incarnation": msg.incarnation,
        "seq": msg.seq,
        "sent_at": msg.sent_at,
    }


def encode(msg: Ring | Notice, secret: bytes) -> bytes:
    """The datagram for `msg`; a ring's cause is cut until the whole fits in MAX_DATAGRAM."""
    if isinstance(msg, Notice):
        return _signed(
            {"type": str(msg.type), **_envelope(msg), "hb_seq": msg.hb_seq, "fs_busy": round(msg.fs_busy, 3)},
            secret,
        )
    ring = msg
    limit = MAX_CAUSE_BYTES
    while True:
        body = orjson.dumps(
            {
                "type": RING_TYPE,
                **_envelope(ring),
                "failed_rank": ring.failed_rank,
                "failed_incarnation": ring.failed_incarnation,
                "kind": ring.kind,
                "cause": cut(ring.cause, limit),
            },
            option=orjson.OPT_SORT_KEYS,
        )
        signed = MAGIC + body
        if len(signed) + TAG_BYTES <= MAX_DATAGRAM or limit == 0:
            return signed + _tag(secret, signed)
        limit = max(0, limit - (len(signed) + TAG_BYTES - MAX_DATAGRAM))


def decode(data: bytes, secret: bytes, run: str) -> Message:
    """The message in `data`, verified with `secret` and meant for `run`; raises Dropped otherwise.
    The receiver checks the rank and incarnation against the peers it knows (`check_peer`)."""
    if len(data) > MAX_DATAGRAM:
        raise Dropped(Drop.OVERSIZE, f"{len(data)} bytes")
    if len(data) < len(MAGIC) + 2 + TAG_BYTES or not data.startswith(MAGIC):
        raise Dropped(Drop.MALFORMED, "not a doorbell datagram")
    signed, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    if not hmac.compare_digest(tag, _tag(secret, signed)):
        raise Dropped(Drop.BAD_MAC, "authentication failed (another secret, or altered)")
    try:
        doc = orjson.loads(signed[len(MAGIC) :])
    except orjson.JSONDecodeError:
        raise Dropped(Drop.MALFORMED, "body is not JSON") from None
    msg = _shape(doc)
    if msg.run != run:
        raise Dropped(Drop.OTHER_RUN, f"for run {msg.run!r}")
    return msg


def _shape(doc: Any) -> Message:
    if not isinstance(doc, dict):
        raise Dropped(Drop.MALFORMED, "body is not an object")
    body = _Body(doc)
    sent_at = body.number("sent_at", -1e12, 1e12)
    kind_of = doc.get("type")
    if kind_of == STACKS_TYPE:
        return _stacks_ask(body, sent_at)
    if kind_of in NOTICE_TYPES:
        return Notice(
            type=NoticeType(kind_of),
            **body.envelope(sent_at),
            hb_seq=body.integer("hb_seq", 0, 1 << 62),
            fs_busy=body.number("fs_busy", 0, 1e9),
        )
    if kind_of != RING_TYPE:
        raise Dropped(Drop.MALFORMED, "type is not ring, alive, complete, probe, echo or stacks")
    kind = body.text("kind")
    if kind not in _KINDS:
        raise Dropped(Drop.MALFORMED, f"kind {kind!r} is not a failure kind")
    return Ring(
        **body.envelope(sent_at),
        failed_rank=body.integer("failed_rank", 0, MAX_RANK),
        failed_incarnation=body.text("failed_incarnation"),
        kind=kind,
        cause=body.text("cause", MAX_CAUSE_BYTES),
    )


def _stacks_ask(body: _Body, sent_at: float) -> StacksAsk:
    request = body.text("request", 32)
    if not names.STACK_REQUEST_RE.match(request):
        raise Dropped(Drop.MALFORMED, "request is not a request id")
    return StacksAsk(
        run=body.text("run", 128),
        attempt=body.integer("attempt", 1, 1 << 20),
        to=body.integer("to", 0, MAX_RANK),
        to_incarnation=body.text("to_incarnation"),
        request=request,
        seq=body.integer("seq", 0, 1 << 62),
        sent_at=sent_at,
    )


@dataclass(frozen=True)
class _Body:
    """An authenticated body's fields, each checked as it is read: the first bad one drops the datagram."""

    doc: dict[str, Any]

    def text(self, key: str, limit: int = MAX_TEXT) -> str:
        v = self.doc.get(key)
        if not isinstance(v, str) or len(v.encode()) > limit:
            raise Dropped(Drop.MALFORMED, f"{key} is not a short string")
        return v

    def integer(self, key: str, low: int, high: int) -> int:
        v = self.doc.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise Dropped(Drop.MALFORMED, f"{key} is not an integer in [{low}, {high}]")
        return v

    def number(self, key: str, low: float, high: float) -> float:
        v = self.doc.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
            raise Dropped(Drop.MALFORMED, f"{key} is not a number in [{low:g}, {high:g}]")
        return float(v)

    def envelope(self, sent_at: float) -> dict[str, Any]:
        """A peer's message's sender fields (``_envelope``), read in this order."""
        return {
            "run": self.text("run", 128),
            "attempt": self.integer("attempt", 1, 1 << 20),
            "sender": self.integer("sender", 0, MAX_RANK),
            "incarnation": self.text("incarnation"),
            "seq": self.integer("seq", 0, 1 << 62),
            "sent_at": sent_at,
        }


def check_peer(msg: Message, attempt: int, incarnations: dict[int, str]) -> None:
    """Raises Dropped unless the sender (and a ring's failed rank) are this attempt's peers, at the
    incarnations their address records name (an old attempt's or incarnation's message is stale)."""
    if msg.attempt != attempt:
        raise Dropped(Drop.STALE, f"attempt {msg.attempt}, not {attempt}")
    if isinstance(msg, StacksAsk):  # from gym-launch: only its addressee is checked
        known = incarnations.get(msg.to)
        if known is None:
            raise Dropped(Drop.UNKNOWN_RANK, f"rank {msg.to}")
        if msg.to_incarnation != known:
            raise Dropped(Drop.STALE, f"rank {msg.to} incarnation {msg.to_incarnation}, not {known}")
        return
    who = [(msg.sender, msg.incarnation)]
    if isinstance(msg, Ring):
        who.append((msg.failed_rank, msg.failed_incarnation))
    for rank, inc in who:
        known = incarnations.get(rank)
        if known is None:
            raise Dropped(Drop.UNKNOWN_RANK, f"rank {rank}")
        if inc != known:
            raise Dropped(Drop.STALE, f"rank {rank} incarnation {inc}, not {known}")
