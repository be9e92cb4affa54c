"""Property tests over random valid placement requests (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from launch.spec.config import RunConfig
from launch.spec.load import resolved_from_dict
from launch.spec.plan import Plan, plan
from launch.spec.validate import validate


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    capacity = draw(st.sampled_from([1, 2, 4, 8, 8, 8, 16]))
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if capacity % d == 0]))
    trainer_nodes = draw(st.integers(1, 4))
    per_node = draw(st.integers(1, capacity))
    rollout = tp * draw(st.integers(0, 3 * capacity // tp))
    judges = draw(st.dictionaries(st.sampled_from(["a", "b", "c", "d-x", "e_y"]), st.integers(1, capacity), max_size=4))
    unbound = draw(st.booleans())
    data: dict[str, Any] = {
        "launch": {"gpus_per_replica": capacity, "node_gpus": capacity},
        "trainer": {"nodes": trainer_nodes, "gpus_per_node": per_node},
        "inference": {"gpus": rollout, "tensor_parallel_size": tp},
        "driver": {
            "command": "python train.py",
            "placement": draw(st.sampled_from(["trainer", "inference"])),
        },
    }
    if judges:
        data["judges"] = {
            name: {
                "mode": "managed",
                "backend": "reference",
                "model": "m",
                "gpus": gpus,
                "tensor_parallel_size": gpus,
                "max_context_length": 4096,
                "max_concurrent_calls": 2,
            }
            for name, gpus in judges.items()
        }
        data["rubrics"] = {"r": {"profile": "general-quality", "max_output_tokens": 64}}
        bound = sorted(judges)[1:] if unbound else sorted(judges)
        data["judging"] = {"bindings": {f"v-{name}": {"judge": name, "rubric": "r"} for name in bound}}
    return data


def _plan(data: dict[str, Any]) -> tuple[RunConfig, Plan]:
    assert validate(data) == []
    config = RunConfig.from_spec(resolved_from_dict(data))
    return config, plan(config)


@settings(max_examples=400, deadline=None)
@given(requests())
def test_every_gpu_has_exactly_one_role_or_is_unused(data: dict[str, Any]) -> None:
    _, p = _plan(data)
    c = p.gpus_per_replica
    for node in p.nodes:
        devices = list(node.ray_devices) + [d for ds in node.judge_devices.values() for d in ds]
        devices += list(node.unused_devices)
        assert sorted(devices) == list(range(c)), node  # disjoint and covering 0..C-1
        assert len(node.ray_devices) == node.ray_gpus == node.trainer_gpus + node.rollout_gpus
        assert {k: len(v) for k, v in node.judge_devices.items()} == dict(node.judges)
        assert len(node.unused_devices) == node.unused_gpus
        assert node.ray_gpus + sum(node.judges.values()) + node.unused_gpus == c  # replicas equal size


@settings(max_examples=400, deadline=None)
@given(requests())
def test_totals_add_up(data: dict[str, Any]) -> None:
    config, p = _plan(data)
    assert p.replicas == len(p.nodes) and [n.index for n in p.nodes] == list(range(p.replicas))
    assert p.allocated_gpus == p.replicas * p.gpus_per_replica
    assert p.used_gpus + p.unused_gpus == p.allocated_gpus
    assert p.unused_gpus == sum(n.unused_gpus for n in p.nodes)
    assert sum(n.trainer_gpus for n in p.nodes) == config.trainer.gpus
    assert sum(n.rollout_gpus for n in p.nodes) == config.inference.gpus
    placed = [(name, gpus) for n in p.nodes for name, gpus in n.judges.items()]
    # Every bound judge exactly once with all its GPUs; unbound judges nowhere.
    assert sorted(placed) == sorted((j.name, j.gpus) for j in config.gpu_judges)


@settings(max_examples=400, deadline=None)
@given(requests())
def test_engines_whole_and_trainer_first(data: dict[str, Any]) -> None:
    config, p = _plan(data)
    tp = config.inference.tensor_parallel_size
    assert all(n.rollout_gpus % tp == 0 for n in p.nodes)  # no engine split across nodes
    trainer_nodes = [n.index for n in p.nodes if n.trainer_gpus]
    assert trainer_nodes == list(range(config.trainer.nodes))
    assert all(n.trainer_gpus == config.trainer.gpus_per_node for n in p.nodes if n.trainer_gpus)
    # Rollout on trainer nodes only on the final one.
    assert all(n.rollout_gpus == 0 for n in p.nodes[: config.trainer.nodes - 1])


@settings(max_examples=400, deadline=None)
@given(requests())
def test_single_node_iff_it_fits_and_allocates_only_what_is_used(data: dict[str, Any]) -> None:
    config, p = _plan(data)
    total = config.trainer.gpus + config.inference.gpus + sum(j.gpus for j in config.gpu_judges)
    fits = config.trainer.nodes == 1 and total <= config.gpus_per_replica
    assert (p.replicas == 1) == fits
    if fits:
        assert p.gpus_per_replica == p.used_gpus == total and p.unused_gpus == 0
    else:
        assert p.gpus_per_replica == config.gpus_per_replica
        # Packing never wastes a whole node.
        assert all(n.unused_gpus < p.gpus_per_replica for n in p.nodes)


@settings(max_examples=300, deadline=None)
@given(requests())
def test_driver_node(data: dict[str, Any]) -> None:
    config, p = _plan(data)
    # Inference nodes hold rollout GPUs and no trainer GPUs; engines on a trainer node's spare
    # GPUs do not make it one, and without an inference node the placement has no effect.
    inference_nodes = [n.index for n in p.nodes if n.rollout_gpus and not n.trainer_gpus]
    if config.driver.placement == "inference" and inference_nodes:
        assert p.driver_node == inference_nodes[-1]
    else:
        assert p.driver_node == 0


@settings(max_examples=200, deadline=None)
@given(requests())
def test_plan_is_a_function_of_the_fingerprinted_json(data: dict[str, Any]) -> None:
    resolved = resolved_from_dict(data)
    again = resolved_from_dict(json.loads(resolved.canonical_json()))
    assert again.fingerprint == resolved.fingerprint
    assert plan(RunConfig.from_spec(again)) == plan(RunConfig.from_spec(resolved))


@st.composite
def pooled_requests(draw: st.DrawFn) -> dict[str, Any]:
    data = draw(requests())
    capacity = data["launch"]["gpus_per_replica"]
    names = draw(st.lists(st.sampled_from(["judge", "main", "aux", "policy"]), min_size=1, max_size=3, unique=True))
    data["pools"] = {name: {"nodes": draw(st.integers(1, 5)), "gpus_per_node": capacity} for name in names}
    for judge in data.get("judges", {}).values():
        pool = draw(st.sampled_from([None, *names]))
        if pool:
            judge["node_pool"] = pool
    return data


@settings(max_examples=400, deadline=None)
@given(pooled_requests())
def test_pools_keep_every_invariant(data: dict[str, Any]) -> None:
    problems = validate(data)
    # Pools may be too small for the request; then the problem names a pool key.
    assert all(p.key.startswith("pools") for p in problems), problems
    if problems:
        return
    config, p = _plan(data)
    assert p.replicas == sum(pool.nodes for pool in config.pool_list)
    assert p.gpus_per_replica == config.gpus_per_replica
    # Contiguous ranges in declaration order.
    assert [n.pool for n in p.nodes] == [name for name, pool in data["pools"].items() for _ in range(pool["nodes"])]
    for node in p.nodes:
        devices = list(node.ray_devices) + [d for ds in node.judge_devices.values() for d in ds]
        assert sorted(devices + list(node.unused_devices)) == list(range(p.gpus_per_replica))
        for name in node.judges:
            pinned = config.judges[name].node_pool
            assert pinned is None or pinned == node.pool
            if pinned:
                # A pool that hosts pinned judges is theirs alone.
                assert node.ray_gpus == 0
    assert p.used_gpus + p.unused_gpus == p.allocated_gpus
    assert sum(n.trainer_gpus for n in p.nodes) == config.trainer.gpus
    assert sum(n.rollout_gpus for n in p.nodes) == config.inference.gpus
    placed = sorted((name, gpus) for n in p.nodes for name, gpus in n.judges.items())
    assert placed == sorted((j.name, j.gpus) for j in config.gpu_judges)
