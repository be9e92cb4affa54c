"""Rank, count, address and GPU resolution from flags and environment."""

from __future__ import annotations

import pytest

from agent.coord.identity import IdentityError, address_sort_key, resolve_address, resolve_rank, visible_devices


def test_rank_sources_in_order() -> None:
    env = {
        "GYM_REPLICA_RANK": "1",
        "GYM_REPLICA_COUNT": "3",
        "BEAKER_REPLICA_RANK": "2",
        "BEAKER_REPLICA_COUNT": "4",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "5",
    }
    assert resolve_rank(None, None, env) == (1, 3)
    assert resolve_rank(None, None, {k: v for k, v in env.items() if not k.startswith("GYM")}) == (2, 4)
    assert resolve_rank(None, None, {"SLURM_PROCID": "0", "SLURM_NTASKS": "5"}) == (0, 5)
    assert resolve_rank(2, 3, env) == (2, 3)


def test_rank_errors_say_what_to_set() -> None:
    with pytest.raises(IdentityError, match="--rank R --replicas N"):
        resolve_rank(None, None, {})
    with pytest.raises(IdentityError, match="outside 0..2"):
        resolve_rank(3, 3, {})
    with pytest.raises(IdentityError, match="BEAKER_REPLICA_RANK must be an integer"):
        resolve_rank(None, None, {"BEAKER_REPLICA_RANK": "x", "BEAKER_REPLICA_COUNT": "2"})


def test_addresses_sort_numerically_ipv4_before_ipv6() -> None:
    addrs = ["10.0.0.10", "10.0.0.9", "fd00::2", "10.0.1.1", "fd00::10", "9.255.255.255"]
    assert sorted(addrs, key=address_sort_key) == [
        "9.255.255.255",
        "10.0.0.9",
        "10.0.0.10",
        "10.0.1.1",
        "fd00::2",
        "fd00::10",
    ]
    assert sorted(addrs) != sorted(addrs, key=address_sort_key)  # string order would be wrong


def test_loopback_is_refused_unless_explicit() -> None:
    with pytest.raises(IdentityError, match="loopback"):
        resolve_address(None, {"BEAKER_NODE_HOSTNAME": "127.0.0.1"})
    assert resolve_address("127.0.0.3", {}) == ("127.0.0.3", True)
    assert resolve_address("::1", {}) == ("::1", True)


def test_visible_devices_from_cuda_visible_devices() -> None:
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "3, 1,2"}) == ("3", "1", "2")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == ()
