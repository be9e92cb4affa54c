"""Ray port blocks: replicas of one run sharing a host never pick overlapping ports, blocks stay
out of the kernel's ephemeral range, and a block held by another process is skipped."""

from __future__ import annotations

import importlib.util
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from agent.proc import tempdirs
from agent.proc.ports import free, port_bases
from agent.ray import node as ray_node
from agent.ray.node import PORT_BLOCK, RayPorts, pick_ports
from schemas import names

EPHEMERAL = (32768, 60999)


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks held by other processes on this machine (agent/proc/ports.py) stay out of these picks."""
    monkeypatch.setenv(tempdirs.ROOT_ENV, str(tmp_path))


def _span(p: RayPorts) -> range:
    return range(p.gcs, p.client_server + 1)


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
        assert p.dashboard not in range(p.min_worker, p.max_worker + 1)
        assert p.max_worker < p.client_server < p.gcs + PORT_BLOCK


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


# --- the head's block a Slurm job fixes (seed 001: its host:port is exported to the job) -------------


def test_the_jobs_head_block_is_the_one_the_heads_own_choice_tries_first() -> None:
    from schemas import port_grid

    for uuid, rank in (("run-a", 0), ("run-b", 2), ("e2e-x-1a2b3c", 5)):
        fixed = port_grid.head_block(uuid, rank)
        assert port_grid.on_grid(fixed) and (fixed + PORT_BLOCK <= EPHEMERAL[0] or fixed > EPHEMERAL[1])
        assert pick_ports(uuid, rank, 9, EPHEMERAL).gcs == fixed  # a free host: what the head picks anyway


def test_a_fixed_block_is_held_exactly_or_refused_naming_its_port() -> None:
    base = next(b for b in port_bases(EPHEMERAL) if all(free(p) for p in range(b, b + PORT_BLOCK)))
    assert ray_node.hold_fixed_block(base, "GYM_RAY_ADDRESS_CLUSTER=10.0.0.1:X").gcs == base
    with socket.socket() as holder:
        holder.bind(("", base + 2))  # another process took the block's object-manager port
        with pytest.raises(ray_node.PortsError) as err:
            ray_node.hold_fixed_block(base, "GYM_RAY_ADDRESS_CLUSTER=10.0.0.1:X")
    assert f"port(s) {base + 2} taken" in str(err.value) and "GYM_RAY_ADDRESS_CLUSTER=10.0.0.1:X" in str(err.value)
    with pytest.raises(ray_node.PortsError, match="does not start a block"):
        ray_node.hold_fixed_block(base + 1, "GYM_RAY_ADDRESS_CLUSTER=10.0.0.1:X")


@pytest.mark.ray(seconds=5)
def test_a_head_whose_exported_address_names_another_node_fails_before_starting_ray(tmp_path: Path) -> None:
    """A real one-replica run (gym-launch local, rank 0 on 127.0.0.2) whose job exported another host as
    the Ray head's: the head's agent refuses to start Ray on an address the job's steps would not reach."""
    from tests.harness import assert_artifacts_valid, failures, launch_local, uid
    from tests.harness.specs import small_spec

    exported = "127.0.0.99:19400"
    run = launch_local(tmp_path, small_spec(replicas=1), uid("rayaddr"), env={"GYM_RAY_ADDRESS_CLUSTER": exported})
    assert run.wait(90) == 1, run.text[-3000:]
    assert_artifacts_valid(run.run_dir)
    (record,) = failures(run.run_dir).values()
    assert (record["kind"], record["phase"]) == ("placement", "ray_start"), record
    assert f"GYM_RAY_ADDRESS_CLUSTER={exported}" in record["cause"] and "127.0.0.2" in record["cause"]
    assert not (run.run_dir / names.ray_log(0)).exists()  # Ray never started


# --- what a head binds beyond the raylet's ports; when a node counts as started ----------------------


def _spec(is_head: bool, ports: RayPorts, dashboard: bool = False) -> ray_node.RayNodeSpec:
    return ray_node.RayNodeSpec(
        is_head=is_head,
        address="127.0.0.2",
        head_address="127.0.0.2:1",
        ports=ports,
        num_gpus=0,
        num_cpus=1,
        object_store_memory=None,
        temp_dir="/tmp/x",
        resources={},
        extra_args=(),
        dashboard=dashboard,
    )


def test_ray_dashboard_flags_only_on_the_head_when_asked() -> None:
    ports = pick_ports("dash-test", 0, 1)
    assert "--include-dashboard=false" in ray_node.ray_start_argv(_spec(True, ports))
    on = ray_node.ray_start_argv(_spec(True, ports, dashboard=True))
    assert "--include-dashboard=true" in on and f"--dashboard-port={ports.dashboard}" in on
    assert ports.dashboard not in (ports.gcs, ports.node_manager, ports.min_worker)
    worker = ray_node.ray_start_argv(_spec(False, ports, dashboard=True))
    assert not any(a.startswith("--include-dashboard") for a in worker)


def test_a_head_binds_its_client_server_and_api_server_inside_its_own_block() -> None:
    """Ray's defaults (client server 10001, API server 8265) are one port per host: two heads on one
    host (two runs, or a test's two clusters) would share them, and the second head's `ray start
    --block` ends its node when that server dies."""
    p = pick_ports("run-f", 0, 1, EPHEMERAL)
    for dashboard in (False, True):
        argv = ray_node.ray_start_argv(_spec(True, p, dashboard))
        assert f"--ray-client-server-port={p.client_server}" in argv and f"--dashboard-port={p.dashboard}" in argv
    worker = ray_node.ray_start_argv(_spec(False, p))
    assert not any(a.startswith(("--ray-client-server-port", "--dashboard-port", "--port=")) for a in worker)
    with socket.socket() as holder:
        holder.bind(("", p.client_server))  # the block is not free while its client-server port is taken
        assert pick_ports("run-f", 0, 1, EPHEMERAL).gcs != p.gcs


def test_a_head_without_ray_client_gets_no_client_server_port() -> None:
    """A plain `pip install ray` has no grpcio: Ray refuses `--ray-client-server-port` then ("Ray
    Client requires pip package ray[client]"), so the head is started without it (issue 46). The
    wheel installed without extras runs the demo in .ci/plain-install."""
    p = pick_ports("run-c", 0, 1, EPHEMERAL)
    argv = ray_node.ray_start_argv(replace(_spec(True, p), client_server=False))
    assert not any(a.startswith("--ray-client-server-port") for a in argv)
    assert ray_node.ray_client_installed() == (importlib.util.find_spec("grpc") is not None)


def test_a_node_counts_as_started_once_ray_start_wrote_its_address_file(tmp_path: Path) -> None:
    assert not ray_node.ray_started(str(tmp_path))
    (tmp_path / ray_node.STARTED_FILE).write_text("127.0.0.2:1")
    assert ray_node.ray_started(str(tmp_path))
    ray_node.forget_started(str(tmp_path))  # before a new start: an earlier one's file vouches for nothing
    assert not ray_node.ray_started(str(tmp_path))
    ray_node.forget_started(str(tmp_path))


def test_a_stale_registration_on_a_shared_address_is_not_counted_as_live() -> None:
    """A raylet stopped by a `ray start` that missed its registration wait may still be registered
    late by the GCS: where an address has two live nodes, only the one whose raylet answers counts."""
    from agent.ray._probe import live_nodes

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections
            dead = closed.getsockname()[1]
            nodes = [
                {"Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeManagerPort": dead, "NodeID": "old"},
                {"Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeManagerPort": port, "NodeID": "new"},
                {"Alive": True, "NodeManagerAddress": "127.0.0.9", "NodeManagerPort": dead, "NodeID": "alone"},
                {"Alive": False, "NodeManagerAddress": "127.0.0.9", "NodeManagerPort": port, "NodeID": "gone"},
            ]
            assert [n["NodeID"] for n in live_nodes(nodes)] == ["new", "alone"]


def _time_wait_on(port: int) -> None:
    """Leave `port` as an ended server does: no listener, its closed connections in TIME_WAIT."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server closes first: its side of the connection waits in TIME_WAIT
        client.close()


def test_a_fixed_block_left_in_time_wait_by_an_ended_node_is_held_again() -> None:
    """Ray's registration wait ended the head's first start; the start on the same fixed block must
    not be refused for the 60 s its GCS port's closed connections stay in TIME_WAIT (Ray binds
    with SO_REUSEADDR), while a port another process still binds is refused."""
    base = next(b for b in port_bases(EPHEMERAL) if all(free(p) for p in range(b, b + PORT_BLOCK)))
    _time_wait_on(base)
    assert not free(base)  # a plain bind still fails: the check for ports of other children
    assert ray_node.hold_fixed_block(base, "GYM_RAY_ADDRESS_CLUSTER=10.0.0.1:X").gcs == base
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("", base))
        holder.listen()  # a live GCS on the block
        with pytest.raises(ray_node.PortsError, match=f"port\\(s\\) {base} taken"):
            ray_node.hold_fixed_block(base, "GYM_RAY_ADDRESS_CLUSTER=10.0.0.1:X")


def test_a_ray_start_that_raised_is_blamed_on_its_exception_not_a_guess(tmp_path: Path) -> None:
    """Issue 46: a plain install's head ended with Ray's traceback (captured from that run); the cause
    quotes its exception line, and the audit's excerpt shows it. The port/registration guess stays
    for a log that says nothing better."""
    from agent.ray.runtime import start_failure_cause
    from audit._logs import excerpt

    log = (Path(__file__).parent / "data" / "ray-client-missing.log").read_text()
    raised = "ValueError: Ray Client requires pip package `ray[client]`."
    cause = start_failure_cause(log)
    assert raised in cause and "registration wait" not in cause
    assert any(ln.startswith(raised) for ln in excerpt(log.splitlines()))
    assert "registration wait" in start_failure_cause("[2026-12-04 13:09:47] ray start: node stopped\n")
