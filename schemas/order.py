"""The node order of a run: the replica whose address sorts i-th lowest owns planned node i (within
its pool, when every replica names the pool it runs in: owners_in_pools).

Numeric order, IPv4 before IPv6, never string order ("10.0.0.9" < "10.0.0.10"). The agent
assigns nodes by it and the audit re-derives ownership by it, so both use this one key.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping, Sequence

__all__ = ["address_key", "node_owners", "owners_in_pools", "pool_ranks"]


def address_key(addr: str) -> tuple[int, int, int, str]:
    """Sort key of an address. A name that is not an IP (only a broken record has one) sorts
    after every IP, by name."""
    host = addr.split("%", 1)[0]
    try:
        # The common case first: inet_pton takes an IPv4 address exactly as ipaddress does (four
        # decimal octets up to 255, none with a leading zero) at a tenth of the cost (1,024 ranks).
        return (0, 4, int.from_bytes(socket.inet_pton(socket.AF_INET, host), "big"), addr)
    except (OSError, ValueError):  # not IPv4 (ValueError: a NUL or a lone surrogate in it)
        pass
    try:
        ip = ipaddress.ip_address(host)
        return (0, ip.version, int(ip), addr)
    except ValueError:
        return (1, 0, 0, addr)


def node_owners(addresses: Mapping[int, str]) -> list[int]:
    """Ranks in node order: element i is the rank that owns planned node i."""
    return sorted(addresses, key=lambda rank: address_key(addresses[rank]))


def pool_ranks(node_pools: Sequence[str | None]) -> dict[str, int]:
    """Each pool's first planned node, from the plan's nodes' pools in node order: pools take
    consecutive node ranges in declaration order, so this is also their declaration order."""
    out: dict[str, int] = {}
    for i, pool in enumerate(node_pools):
        if pool is not None:
            out.setdefault(pool, i)
    return out


def owners_in_pools(
    addresses: Mapping[int, str], pools: Mapping[int, str | None], ranks_of_pools: Mapping[str, int]
) -> list[int]:
    """Node order when replicas say which pool they run in (a Slurm job's pool step sets GYM_POOL):
    by pool in declaration order, then address, so each pool's replicas own its planned range
    whatever the addresses of another pool's (a heterogeneous job's CPU partition) are. Unless
    every replica names a planned pool, by address alone (node_owners)."""
    if not addresses or not all(pools.get(r) in ranks_of_pools for r in addresses):
        return node_owners(addresses)
    return sorted(addresses, key=lambda r: (ranks_of_pools[str(pools[r])], address_key(addresses[r])))
