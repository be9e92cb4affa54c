"""schemas.order.address_key reads a plain IPv4 address with inet_pton before ipaddress: the key
must be the one ipaddress alone gives, for any string (the agents assign nodes by it)."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import order


def reference_key(addr: str) -> tuple[int, int, int, str]:
    """The key as ipaddress alone reads it (the implementation before the IPv4 fast path)."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
        return (0, ip.version, int(ip), addr)
    except ValueError:
        return (1, 0, 0, addr)


EDGES = [
    "10.0.0.9", "10.0.0.10", "0.0.0.0", "255.255.255.255", "256.0.0.1", "10.0.0.010", "10.0.0.00",
    "010.0.0.1", "1.2.3", "1.2.3.4.5", "1.2.3.", ".1.2.3.4", "1..2.3", " 1.2.3.4", "1.2.3.4 ", "1.2.3.4\n",
    "1.2.3.4\x00", "1.2.3.\udc80", "\u0661.2.3.4", "1.2.3.4/32", "1.2.3.4%eth0", "0x1.2.3.4", "1e2.0.0.1",
    "fe80::1%eth0", "::1", "::ffff:10.0.0.1", "2001:db8::10", "::", "node-7", "", "%", "1.2.3.4%",
]  # fmt: skip


def test_edge_cases_key_as_ipaddress_does() -> None:
    for addr in EDGES:
        assert order.address_key(addr) == reference_key(addr), repr(addr)


@settings(max_examples=800, deadline=None)
@given(st.text(alphabet="0123456789.:%fxa \x00\u0661", max_size=18))
def test_any_string_keys_as_ipaddress_does(addr: str) -> None:
    assert order.address_key(addr) == reference_key(addr)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=3, max_size=5), st.sampled_from(["", "0", "00"]))
def test_dotted_numbers_key_as_ipaddress_does(octets: list[int], pad: str) -> None:
    addr = ".".join(str(o) for o in octets[:-1]) + "." + pad + str(octets[-1])
    assert order.address_key(addr) == reference_key(addr)


def test_node_order_is_numeric_ipv4_before_ipv6_then_names() -> None:
    addrs = {0: "node-a", 1: "10.0.0.10", 2: "::1", 3: "10.0.0.9", 4: "9.255.255.255"}
    assert order.node_owners(addrs) == [4, 3, 1, 2, 0]
