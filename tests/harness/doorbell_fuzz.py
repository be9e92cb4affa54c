"""A foreign process at the agents' doorbells (agent/coord/doorbell.py): what tests and
`make faults` spray at a running run, and what its cleanup records must say afterwards."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

from agent.coord.doorbell_msg import MAX_DATAGRAM, Ring, encode
from schemas import names
from tests.harness.agents import read, wait_for_file

# Every reason a sprayed datagram is dropped for (none of them may stop the run).
SPRAYED_DROPS = ("malformed", "oversize", "bad_mac", "other_run", "stale")


def doorbell_ports(run_dir: Path, count: int, timeout: float = 60) -> dict[int, int]:
    """rank -> the doorbell port its address record publishes (waits for every record)."""
    for r in range(count):
        wait_for_file(run_dir / names.address(r), timeout)
    return {r: int(read(run_dir, names.address(r))["doorbell_port"]) for r in range(count)}


def crafted(run_dir: Path) -> list[bytes]:
    """Rings a stranger or a run's own old agent could send: signed with a guessed secret, and
    (knowing the secret) from an incarnation that does not run, for another run or attempt."""
    wait_for_file(run_dir / names.DOORBELL_SECRET, 30)
    secret = bytes.fromhex((run_dir / names.DOORBELL_SECRET).read_text().strip())
    ring = Ring(
        run=run_dir.name,
        attempt=1,
        sender=1,
        incarnation="0123456789ab",  # not the incarnation rank 1 runs as: a stale one
        seq=7,
        sent_at=time.time(),
        failed_rank=0,
        failed_incarnation=str(read(run_dir, names.address(0))["incarnation"]),
        kind="driver_exit",
        cause="forged: the driver exited with code 1",
    )
    return [
        encode(ring, os.urandom(32)),
        encode(ring, secret),
        encode(replace(ring, run="another-run"), secret),
        encode(replace(ring, attempt=2), secret),
    ]


def spray(run_dir: Path, targets: dict[int, tuple[str, int]], stop: threading.Event, sent: list[int]) -> None:
    """Until `stop`: random bytes, oversize datagrams, single bit flips and the crafted rings at
    every (host, port) in `targets`, a few hundred a second in all. sent[0] counts them."""
    rings = crafted(run_dir)
    rng = random.Random(24)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while not stop.is_set():
            for target in targets.values():
                choice = rng.random()
                if choice < 0.4:
                    data = rng.randbytes(rng.randrange(0, MAX_DATAGRAM))
                elif choice < 0.5:
                    data = rng.randbytes(MAX_DATAGRAM + rng.randrange(1, 4000))
                elif choice < 0.6:
                    flipped = bytearray(rings[1])
                    flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
                    data = bytes(flipped)
                else:
                    data = rng.choice(rings)
                try:
                    sock.sendto(data, target)
                    sent[0] += 1
                except OSError:
                    pass
            time.sleep(0.004)


def drop_problems(run_dir: Path, ranks: range) -> list[str]:
    """What is wrong with the ranks' doorbell counts after a spray (empty: every kind was
    dropped and counted, none accepted)."""
    problems = []
    for r in ranks:
        try:
            bell = read(run_dir, names.cleanup(r)).get("doorbell")
        except (OSError, ValueError):
            bell = None
        if bell is None:
            problems.append(f"rank {r}: no doorbell counts in its cleanup record")
            continue
        if bell["accepted"]:
            problems.append(f"rank {r} accepted {bell['accepted']} sprayed ring(s)")
        missing = [why for why in SPRAYED_DROPS if not bell["dropped"].get(why)]
        if missing:
            problems.append(f"rank {r} counted no {', '.join(missing)} drops: {bell['dropped']}")
    return problems
