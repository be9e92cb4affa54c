"""The grid of port blocks a node's choosers walk (the agents' Ray nodes and managed judges:
agent/proc/ports.py), and the one block a rendered job fixes for its Ray head before the head starts
(launch/backends/slurm.py), so that the head's host:port can be exported to the whole job (seed 001).

Blocks of PORT_BLOCK ports from PORT_FLOOR, outside the kernel's ephemeral range: any outgoing
connection may be given an ephemeral port, so a port inside it can be taken between a check and a bind.
"""

from __future__ import annotations

import zlib

__all__ = ["DEFAULT_EPHEMERAL", "first_block", "head_block", "on_grid", "port_bases"]

PORT_FLOOR, PORT_BLOCK, PORT_CEILING = 10000, 50, 65500
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range


def port_bases(ephemeral: tuple[int, int]) -> list[int]:
    """Block starts outside the ephemeral range ``ephemeral`` (low, high)."""
    low, high = ephemeral
    return [b for b in range(PORT_FLOOR, PORT_CEILING - PORT_BLOCK, PORT_BLOCK) if b + PORT_BLOCK <= low or b > high]


def first_block(key: str, slot: int, bases: list[int]) -> int:
    """The block a walk of ``key`` offset by ``slot`` tries first (agent/proc/ports.walk)."""
    return bases[(zlib.crc32(key.encode()) + slot) % len(bases)]


def head_block(run_key: str, head_slot: int) -> int:
    """The Ray head's block a rendered job fixes: the one the head's own walk tries first on a host
    with the default ephemeral range (its run's key, its rank as the slot)."""
    return first_block(run_key, head_slot, port_bases(DEFAULT_EPHEMERAL))


def on_grid(port: int) -> bool:
    """Whether ``port`` starts a block of the grid."""
    return PORT_FLOOR <= port <= PORT_CEILING - PORT_BLOCK and (port - PORT_FLOOR) % PORT_BLOCK == 0
