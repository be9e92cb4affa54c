"""The network check: the socket-interface variables of the run's environment name an interface
that exists here and is the one this node's advertised address is on, and every peer's address
answers a probe from ours.

The variables and their rules:
- NCCL_SOCKET_IFNAME (NCCL's rules): comma-separated prefixes; `^` first excludes the listed
  prefixes instead; `=` first matches the names exactly (`^=` excludes exact names);
- GLOO_SOCKET_IFNAME (Gloo, torch.distributed): exact names, comma-separated;
- TP_SOCKET_IFNAME (TensorPipe, torch RPC): one exact name.
An address is "on" an interface when that interface carries it; every address of 127.0.0.0/8 is
on the interface that carries a loopback address (lo), as the kernel routes it. Gloo left unset
falls back to the address the hostname resolves to, which on many images is 127.0.1.1: the
advertised address check is what catches a variable that does not lead to the run's address.

The probe goes to each peer's doorbell (agent/coord/doorbell_probe.py): the port already listens,
no new one is opened.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from agent.coord.doorbell_probe import Probed
from agent.preflight._outcome import Observed

__all__ = ["Interfaces", "RULES", "SOCKET_VARS", "check_network", "check_variables", "exact_selects", "nccl_selects"]

SOCKET_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


@dataclass(frozen=True)
class Interfaces:
    """This node's interfaces (name -> its IP addresses)."""

    addresses: Mapping[str, tuple[str, ...]]

    @classmethod
    def here(cls) -> Interfaces:
        names = {name for _i, name in socket.if_nameindex()}
        out: dict[str, list[str]] = {n: [] for n in names}
        for name, addrs in psutil.net_if_addrs().items():
            out.setdefault(name, [])
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    out[name].append(a.address.split("%")[0])
        return cls({k: tuple(v) for k, v in sorted(out.items())})

    @property
    def names(self) -> list[str]:
        return sorted(self.addresses)

    def carrying(self, address: str) -> str | None:
        """The interface `address` is on: the one carrying it, or for 127.0.0.0/8 the loopback one."""
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return None
        for name, addrs in self.addresses.items():
            if any(_same(ip, a) for a in addrs):
                return name
        if ip.version == 4 and ip.is_loopback:
            for name, addrs in self.addresses.items():
                if any(_loopback_v4(a) for a in addrs):
                    return name
        return None


def _same(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, text: str) -> bool:
    try:
        return ipaddress.ip_address(text) == ip
    except ValueError:
        return False


def _loopback_v4(text: str) -> bool:
    try:
        a = ipaddress.ip_address(text)
    except ValueError:
        return False
    return a.version == 4 and a.is_loopback


def nccl_selects(value: str, names: Sequence[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME=`value` selects among `names`."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    items = [x.strip() for x in rest.split(",") if x.strip()]

    def matches(name: str) -> bool:
        return any(name == x if exact else name.startswith(x) for x in items)

    return [n for n in names if matches(n) != exclude]


def exact_selects(value: str, names: Sequence[str]) -> list[str]:
    wanted = [x.strip() for x in value.split(",") if x.strip()]
    return [n for n in names if n in wanted]


RULES: Mapping[str, tuple[Callable[[str, Sequence[str]], list[str]], str]] = {
    "NCCL_SOCKET_IFNAME": (nccl_selects, "prefixes, ^ to exclude, = for exact names"),
    "GLOO_SOCKET_IFNAME": (exact_selects, "exact interface names, comma-separated (no ^ or =: those are NCCL's)"),
    "TP_SOCKET_IFNAME": (exact_selects, "one exact interface name"),
}


def check_variables(
    env: Mapping[str, tuple[str, str]], address: str, ifs: Interfaces
) -> tuple[list[str], list[dict[str, object]]]:
    """Problems and facts of the socket-interface variables; env maps a variable to (value, where set)."""
    problems: list[str] = []
    facts: list[dict[str, object]] = []
    names = ifs.names
    home = ifs.carrying(address)
    listed = ", ".join(names)
    for var in SOCKET_VARS:
        if var not in env:
            continue
        value, source = env[var]
        rule, how = RULES[var]
        picked = rule(value, names)
        facts.append({"variable": var, "value": value, "set_in": source, "selects": picked, "address_on": home})
        fix = f"set it to {home!r} (the interface of this node's address {address})" if home else "set it"
        if not picked:
            problems.append(f"{var}={value!r} ({source}) names no interface here ({how}); interfaces: {listed}; {fix}")
        elif home is not None and home not in picked:
            problems.append(
                f"{var}={value!r} ({source}) selects {', '.join(picked)}, but this node's address {address} is on "
                f"{home}: peers would be reached from another network; {fix}, or advertise an address of "
                f"{picked[0]} (gym-agent --address)"
            )
    return problems, facts


def check_network(
    env: Mapping[str, tuple[str, str]],
    address: str,
    probe: Callable[[], list[Probed]] | None,
    probe_note: str,
    ifs: Interfaces | None = None,
) -> Observed:
    ifs = ifs or Interfaces.here()
    problems, variables = check_variables(env, address, ifs)
    home = ifs.carrying(address)
    probes = probe() if probe is not None else []
    unanswered = [p for p in probes if not p.answered and p.port is not None and not p.stopped]
    for p in unanswered:
        problems.append(
            f"rank {p.rank}'s address {p.address} (doorbell port {p.port}) does not answer from {address}: {p.error}; "
            "check the route and firewall between the two nodes, or exclude the unreachable one"
        )
    parts = [f"address {address} on {home or 'no interface here (NAT?)'}"]
    if variables:
        parts.append(", ".join(f"{v['variable']}={v['value']}" for v in variables))
    if probe is not None:
        answered = [p for p in probes if p.answered]
        slowest = max((p.seconds for p in answered), default=0.0)
        parts.append(
            f"{len(answered)}/{len(probes)} peer(s) answered"
            + (f" (slowest {slowest * 1000:.1f} ms)" if answered else "")
        )
    elif probe_note:
        parts.append(probe_note)
    facts = {
        "address": address,
        "address_on": home,
        "interfaces": {k: list(v) for k, v in ifs.addresses.items()},
        "variables": variables,
        "probes_sent": len(probes),
        "probes": [p.to_json() for p in _kept(probes)],
    }
    return Observed("; ".join(parts), tuple(problems), facts)


def _kept(probes: list[Probed]) -> list[Probed]:
    """Every probe of a small run; of a large one those unanswered and the ten slowest answers."""
    if len(probes) <= 64:
        return probes
    answered = sorted((p for p in probes if p.answered), key=lambda p: p.seconds)
    return [p for p in probes if not p.answered] + answered[-10:]
