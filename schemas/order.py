"""The node order of a run: the replica whose address sorts i-th lowest owns planned node i.

Numeric order, IPv4 before IPv6, never string order ("10.0.0.9" < "10.0.0.10"). The agent
assigns nodes by it and the audit re-derives ownership by it, so both use this one key.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping


def address_key(addr: str) -> tuple[int, int, int, str]:
    """Sort key of an address. A name that is not an IP (only a broken record has one) sorts
    after every IP, by name."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
        return (0, ip.version, int(ip), addr)
    except ValueError:
        return (1, 0, 0, addr)


def node_owners(addresses: Mapping[int, str]) -> list[int]:
    """Ranks in node order: element i is the rank that owns planned node i."""
    return sorted(addresses, key=lambda rank: address_key(addresses[rank]))
