"""Ray port blocks: replicas of one run sharing a host never pick overlapping ports, blocks stay
out of the kernel's ephemeral range, and a block held by another process is skipped."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agent.proc import tempdirs
from agent.proc.ports import free, port_bases
from agent.ray import node as ray_node
from agent.ray.node import PORT_BLOCK, RayPorts, pick_ports

EPHEMERAL = (32768, 60999)


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks held by other processes on this machine (agent/proc/ports.py) stay out of these picks."""
    monkeypatch.setenv(tempdirs.ROOT_ENV, str(tmp_path))


def _span(p: RayPorts) -> range:
    return range(p.gcs, p.max_worker + 1)


def test_slots_of_one_run_get_disjoint_blocks_outside_the_ephemeral_range() -> None:
    count, attempts = 16, 3
    picked = [pick_ports("run-a", slot, count * attempts, EPHEMERAL) for slot in range(count * attempts)]
    used: set[int] = set()
    for p in picked:
        span = set(_span(p))
        assert not span & used, "two slots of one run share a port"
        used |= span
        assert p.max_worker < EPHEMERAL[0] or p.gcs > EPHEMERAL[1]
        assert (
            len(
                {
                    p.gcs,
                    p.node_manager,
                    p.object_manager,
                    p.dashboard_agent_listen,
                    p.dashboard_agent_grpc,
                    p.metrics_export,
                    p.runtime_env_agent,
                }
            )
            == 7
        )
        assert p.max_worker - p.min_worker + 1 == ray_node.WORKER_PORT_SPAN
        assert p.max_worker < p.gcs + PORT_BLOCK


def test_every_agent_of_a_run_computes_the_same_block_for_a_slot() -> None:
    assert pick_ports("run-b", 2, 9, EPHEMERAL) == pick_ports("run-b", 2, 9, EPHEMERAL)


def test_a_block_held_by_another_process_is_skipped_without_taking_another_slots_block() -> None:
    slots = 6
    first = pick_ports("run-c", 0, slots, EPHEMERAL)
    others = [set(_span(pick_ports("run-c", s, slots, EPHEMERAL))) for s in range(1, slots)]
    with socket.socket() as holder:
        holder.bind(("", first.node_manager))  # bound, as another run's Ray would hold it
        moved = pick_ports("run-c", 0, slots, EPHEMERAL)
    assert moved != first
    assert all(not set(_span(moved)) & o for o in others)


def test_port_bases_respect_a_custom_ephemeral_range() -> None:
    bases = port_bases((20000, 40000))
    assert bases and all(b + PORT_BLOCK <= 20000 or b > 40000 for b in bases)


def test_ray_is_up_only_when_every_port_accepts() -> None:
    ports = pick_ports("run-d", 0, 1, EPHEMERAL)
    servers = []
    try:
        for port in (ports.node_manager, ports.object_manager):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            servers.append(s)
        assert not ray_node.ray_is_up("127.0.0.1", ports, is_head=False)  # runtime-env agent missing
        s = socket.socket()
        s.bind(("127.0.0.1", ports.runtime_env_agent))
        s.listen()
        servers.append(s)
        assert ray_node.ray_is_up("127.0.0.1", ports, is_head=False)
        assert not ray_node.ray_is_up("127.0.0.1", ports, is_head=True)  # no GCS
    finally:
        for s in servers:
            s.close()


def test_a_port_held_only_on_ipv6_is_not_free() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    with socket.socket(socket.AF_INET6) as holder:
        holder.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            holder.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this host")
        port = holder.getsockname()[1]
        assert not free(port)
    assert free(port)


def test_an_ephemeral_range_covering_every_block_still_yields_disjoint_blocks() -> None:
    everything = (1024, 65535)
    assert port_bases(everything) == []
    a, b = pick_ports("run-e", 0, 2, everything), pick_ports("run-e", 1, 2, everything)
    assert not set(_span(a)) & set(_span(b))
