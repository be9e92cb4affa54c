"""GPU placement: the allocation table of docs/spec.md, every rejection, driver placement, pools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec, resolved_from_dict
from launch.spec.plan import Plan, plan
from launch.spec.validate import validate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def make_spec(
    trainer: int,
    rollout: int,
    judges: dict[str, int] | None = None,
    *,
    trainer_nodes: int = 1,
    tp: int = 1,
    gpus_per_replica: int = 8,
    node_gpus: int = 8,
    mode: str = "disaggregated",
    placement: str = "trainer",
    pools: dict[str, dict[str, Any]] | None = None,
    pinned: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A valid spec: ``trainer`` GPUs per trainer node, ``rollout`` GPUs, bound reference judges."""
    data: dict[str, Any] = {
        "launch": {"gpus_per_replica": gpus_per_replica, "node_gpus": node_gpus},
        "trainer": {"nodes": trainer_nodes, "gpus_per_node": trainer},
        "inference": {"gpus": rollout, "tensor_parallel_size": tp, "placement_mode": mode},
        "driver": {"command": ["python", "train.py"], "placement": placement},
    }
    if judges:
        data["judges"] = {
            name: {
                "mode": "managed",
                "backend": "reference",
                "model": "reference-judge",
                "gpus": gpus,
                "max_context_length": 4096,
                "max_concurrent_calls": 4,
            }
            for name, gpus in judges.items()
        }
        for name, pool in (pinned or {}).items():
            data["judges"][name]["node_pool"] = pool
        data["rubrics"] = {"q": {"profile": "general-quality", "max_output_tokens": 256}}
        data["judging"] = {"bindings": {f"{name}-v": {"judge": name, "rubric": "q"} for name in judges}}
    if pools:
        data["pools"] = pools
    return data


def plan_of(data: dict[str, Any]) -> Plan:
    return plan(RunConfig.from_spec(resolved_from_dict(data)))


def rejection(data: dict[str, Any]) -> dict[str, str]:
    """Placement problems by key; plan() and validate() must agree on them."""
    with pytest.raises(SpecError) as info:
        plan_of(data)
    assert info.value.problems == tuple(validate(data))
    return {p.key: p.message for p in info.value.problems}


def layout(p: Plan) -> list[tuple[int, int, dict[str, int], int]]:
    return [(n.trainer_gpus, n.rollout_gpus, dict(n.judges), n.unused_gpus) for n in p.nodes]


# --- the allocation table (the acceptance test) -----------------------------------


@pytest.mark.parametrize(
    ("trainer", "rollout", "judge", "replicas", "allocated", "unused"),
    [
        (2, 6, 0, 1, 8, 0),
        (8, 7, 1, 2, 16, 0),
        (4, 11, 1, 2, 16, 0),
        (4, 19, 1, 3, 24, 0),
        (8, 23, 1, 4, 32, 0),
        (8, 8, 1, 3, 24, 7),
    ],
)
def test_seed_000_allocation_table(
    trainer: int, rollout: int, judge: int, replicas: int, allocated: int, unused: int
) -> None:
    p = plan_of(make_spec(trainer, rollout, {"general": judge} if judge else None))
    assert (p.replicas, p.allocated_gpus, p.unused_gpus) == (replicas, allocated, unused)
    assert p.gpus_per_replica == 8
    assert p.used_gpus == trainer + rollout + judge


def test_table_layouts_node_by_node() -> None:
    assert layout(plan_of(make_spec(8, 7, {"general": 1}))) == [(8, 0, {}, 0), (0, 7, {"general": 1}, 0)]
    assert layout(plan_of(make_spec(4, 11, {"general": 1}))) == [(4, 4, {}, 0), (0, 7, {"general": 1}, 0)]
    assert layout(plan_of(make_spec(8, 23, {"general": 1}))) == [
        (8, 0, {}, 0),
        (0, 8, {}, 0),
        (0, 8, {}, 0),
        (0, 7, {"general": 1}, 0),
    ]
    # The last row deliberately keeps all eight rollout GPUs: the judge gets its own node.
    assert layout(plan_of(make_spec(8, 8, {"general": 1}))) == [
        (8, 0, {}, 0),
        (0, 8, {}, 0),
        (0, 0, {"general": 1}, 7),
    ]


@pytest.mark.parametrize(("name", "replicas", "allocated"), [("node.toml", 1, 8), ("three-node.toml", 3, 24)])
def test_examples_plan(name: str, replicas: int, allocated: int) -> None:
    p = plan(RunConfig.from_spec(load_spec(EXAMPLES / name)))
    assert (p.replicas, p.allocated_gpus, p.unused_gpus) == (replicas, allocated, 0)


def test_three_node_devices() -> None:
    p = plan(RunConfig.from_spec(load_spec(EXAMPLES / "three-node.toml")))
    last = p.nodes[2]
    assert last.ray_devices == (0, 1, 2, 3, 4, 5, 6)
    assert dict(last.judge_devices) == {"general": (7,)}
    assert last.unused_devices == ()
    assert p.judge_node("general") == 2


def test_single_node_allocates_only_what_is_requested() -> None:
    p = plan_of(make_spec(2, 4, {"general": 1}))
    assert (p.replicas, p.gpus_per_replica, p.allocated_gpus, p.unused_gpus) == (1, 7, 7, 0)
    node = p.nodes[0]
    assert (node.ray_devices, dict(node.judge_devices), node.unused_devices) == (
        (0, 1, 2, 3, 4, 5),
        {"general": (6,)},
        (),
    )


def test_single_node_partial_replica_is_allowed() -> None:
    # One replica cannot share a host with another, so a partial node is fine.
    p = plan_of(make_spec(2, 2, gpus_per_replica=4))
    assert (p.replicas, p.allocated_gpus) == (1, 4)


def test_spare_trainer_gpus_take_only_whole_engines() -> None:
    # 3 spare GPUs on the trainer node hold one TP-2 engine; 1 stays unused.
    p = plan_of(make_spec(5, 6, tp=2))
    assert layout(p) == [(5, 2, {}, 1), (0, 4, {}, 4)]
    assert p.unused_gpus == 5


def test_judges_fill_last_node_in_name_order_then_new_nodes() -> None:
    p = plan_of(make_spec(8, 6, {"b": 4, "a": 2, "c": 1}))
    # a (2) fills the rollout node's spare 2; b (4) opens a judge node; c (1) fits there.
    assert layout(p) == [(8, 0, {}, 0), (0, 6, {"a": 2}, 0), (0, 0, {"b": 4, "c": 1}, 3)]
    assert dict(p.nodes[2].judge_devices) == {"b": (0, 1, 2, 3), "c": (4,)}
    assert p.nodes[2].unused_devices == (5, 6, 7)


def test_judges_on_final_trainer_node_when_rollout_fits_there() -> None:
    p = plan_of(make_spec(4, 4, {"general": 1}))  # 9 GPUs: multi-node
    assert layout(p) == [(4, 4, {}, 0), (0, 0, {"general": 1}, 7)]
    p = plan_of(make_spec(4, 2, {"general": 1}, trainer_nodes=2))
    assert layout(p) == [(4, 0, {}, 4), (4, 2, {"general": 1}, 1)]


def test_unbound_and_external_judges_take_no_gpus() -> None:
    data = make_spec(4, 19, {"general": 1})
    data["judges"]["idle"] = dict(data["judges"]["general"], gpus=8)
    data["judges"]["remote"] = {
        "mode": "external",
        "endpoint": "http://judge:8000/v1",
        "model": "m",
        "max_context_length": 4096,
        "max_concurrent_calls": 4,
    }
    data["judging"]["bindings"]["remote-v"] = {"judge": "remote", "rubric": "q"}
    p = plan_of(data)
    assert (p.replicas, p.unused_gpus) == (3, 0)
    assert all(set(n.judges) <= {"general"} for n in p.nodes)
    assert p.judge_node("remote") is None and p.judge_node("idle") is None


def test_to_json_shape() -> None:
    out = plan_of(make_spec(4, 11, {"general": 1})).to_json()
    assert {"replicas", "gpus_per_replica", "allocated_gpus", "unused_gpus", "driver_node", "nodes"} <= set(out)
    assert out["nodes"][1] == {
        "index": 1,
        "pool": None,
        "gpus": 8,
        "trainer_gpus": 0,
        "rollout_gpus": 7,
        "colocated_rollout_gpus": 0,
        "ray_gpus": 7,
        "judges": {"general": 1},
        "policy_gpus": 0,
        "policy_devices": [],
        "unused_gpus": 0,
        "ray_devices": [0, 1, 2, 3, 4, 5, 6],
        "judge_devices": {"general": [7]},
        "unused_devices": [],
    }


# --- driver placement ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "placement", "node"),
    [
        (make_spec(4, 19, {"general": 1}), "trainer", 0),
        (make_spec(4, 19, {"general": 1}), "inference", 2),
        (make_spec(8, 8, {"general": 1}), "inference", 1),  # judge node holds no rollout
        (make_spec(8, 0, {"general": 1}, trainer_nodes=2), "inference", 0),  # no inference nodes
        (make_spec(2, 6), "inference", 0),
        (make_spec(4, 4, {"general": 1}), "inference", 0),  # rollout only on the trainer node
    ],
)
def test_driver_placement(spec: dict[str, Any], placement: str, node: int) -> None:
    spec["driver"]["placement"] = placement
    p = plan_of(spec)
    assert (p.driver_node, p.driver_placement) == (node, placement)


# --- an evaluation run: rollout engines and judges, no trainer ----------------------


@pytest.mark.parametrize(
    ("rollout", "judges", "pools", "want"),
    [
        # Fits one node: only the requested GPUs are allocated, the driver on that node.
        (2, {"general": 1}, None, [(0, 2, {"general": 1}, 0)]),
        # Rollout nodes, then the judge on the last rollout node's spare GPUs; the driver on the first.
        (12, {"general": 1}, None, [(0, 8, {}, 0), (0, 4, {"general": 1}, 3)]),
        # Pools: the judge pinned to its own; the rollout fills the general pool.
        (
            16,
            {"general": 1},
            {"policy": {"nodes": 2, "gpus_per_node": 8}, "judge": {"nodes": 1, "gpus_per_node": 8}},
            [(0, 8, {}, 0), (0, 8, {}, 0), (0, 0, {"general": 1}, 7)],
        ),
    ],
)
def test_an_evaluation_run_plans_with_its_driver_on_the_first_rollout_node(
    rollout: int, judges: dict[str, int], pools: dict[str, Any] | None, want: list[Any]
) -> None:
    spec = make_spec(4, rollout, judges, trainer_nodes=0, pools=pools, pinned={"general": "judge"} if pools else None)
    assert validate(spec) == []
    p = plan_of(spec)
    assert layout(p) == want
    rollout_nodes = [n.index for n in p.nodes if n.rollout_gpus]
    # The spec says "trainer", but there is no trainer rank 0: seed 001 puts the driver on the first node of
    # the policy (the rollout engines serve it), which it reaches over localhost.
    assert (p.driver_node, p.driver_placement) == (rollout_nodes[0], "policy")
    assert p.ray_head == p.driver_node and set(rollout_nodes) <= set(p.ray_nodes)


def test_an_evaluation_run_cannot_colocate_and_a_judge_only_job_still_needs_pools() -> None:
    found = rejection(make_spec(4, 2, trainer_nodes=0, mode="colocated"))
    assert (
        'a run without a trainer (trainer.nodes = 0) has none: use "disaggregated"' in found["inference.placement_mode"]
    )
    assert "judge-only job" in rejection(make_spec(4, 0, {"general": 1}, trainer_nodes=0))["trainer.nodes"]


# --- rejections --------------------------------------------------------------------


def test_trainer_larger_than_a_node() -> None:
    found = rejection(make_spec(16, 8))
    assert list(found) == ["trainer.gpus_per_node"]
    assert "larger than a node" in found["trainer.gpus_per_node"]


def test_engine_larger_than_a_node_is_cross_node_tp() -> None:
    found = rejection(make_spec(8, 16, tp=16))
    assert "cross-node serving TP" in found["inference.tensor_parallel_size"]


def test_tp_must_divide_node_capacity() -> None:
    found = rejection(make_spec(2, 6, tp=3))
    assert list(found) == ["inference.tensor_parallel_size"]
    assert "must divide launch.gpus_per_replica (8)" in found["inference.tensor_parallel_size"]


def test_inference_gpus_must_be_whole_engines() -> None:
    found = rejection(make_spec(4, 10, tp=4))
    assert list(found) == ["inference.gpus"]
    assert "multiple of inference.tensor_parallel_size (4)" in found["inference.gpus"]


def test_judge_larger_than_a_node() -> None:
    found = rejection(make_spec(8, 8, {"big": 16}))
    assert list(found) == ["judges.big.gpus"]
    assert "larger than a node" in found["judges.big.gpus"]


def test_multi_node_colocation_is_rejected() -> None:
    found = rejection(make_spec(8, 8, trainer_nodes=2, mode="colocated"))
    assert "multi-node colocation is not supported" in found["inference.placement_mode"]
    # One trainer node, but judges push the run past one node.
    found = rejection(make_spec(8, 8, {"general": 1}, mode="colocated"))
    assert "multi-node colocation is not supported" in found["inference.placement_mode"]


def test_colocated_single_node_shares_trainer_gpus() -> None:
    p = plan_of(make_spec(4, 4, {"general": 2}, mode="colocated", placement="inference"))
    node = p.nodes[0]
    assert (p.replicas, p.gpus_per_replica, node.ray_gpus, node.colocated_rollout_gpus) == (1, 6, 4, 4)
    assert dict(node.judge_devices) == {"general": (4, 5)}
    assert p.driver_node == 0
    found = rejection(make_spec(4, 8, mode="colocated"))
    assert "at most 4" in found["inference.gpus"]


def test_separate_evaluation_pools_are_rejected() -> None:
    data = make_spec(4, 19)
    data["inference"]["eval_gpus"] = 8
    assert (
        "separate evaluation GPU pools are not supported"
        in {p.key: p.message for p in validate(data)}["inference.eval_gpus"]
    )


def test_multi_node_replicas_must_be_whole_nodes() -> None:
    found = rejection(make_spec(4, 4, gpus_per_replica=4))
    assert list(found) == ["launch.gpus_per_replica"]
    assert "whole nodes (launch.node_gpus = 8)" in found["launch.gpus_per_replica"]


def test_replica_cannot_exceed_a_node() -> None:
    found = rejection(make_spec(4, 4, gpus_per_replica=16))
    assert "a replica cannot be larger than a node" in found["launch.gpus_per_replica"]


def test_all_shape_problems_are_reported_together() -> None:
    found = rejection(make_spec(16, 10, {"big": 12}, tp=3))
    assert set(found) == {
        "trainer.gpus_per_node",
        "inference.tensor_parallel_size",
        "inference.gpus",
        "judges.big.gpus",
    }


# --- pools -------------------------------------------------------------------------------


def test_judge_pinned_to_its_own_pool() -> None:
    pools = {
        "policy": {"nodes": 2, "gpus_per_node": 8, "partition": "batch"},
        "judge": {"nodes": 1, "gpus_per_node": 8},
    }
    p = plan_of(make_spec(8, 8, {"general": 8}, pools=pools, pinned={"general": "judge"}))
    # Pools take contiguous ranges in declaration order: policy (nodes 0-1), then judge (node 2).
    assert [n.pool for n in p.nodes] == ["policy", "policy", "judge"]
    assert layout(p) == [(8, 0, {}, 0), (0, 8, {}, 0), (0, 0, {"general": 8}, 0)]
    assert p.driver_node == 0
    assert (p.replicas, p.allocated_gpus, p.unused_gpus) == (3, 24, 0)


def test_unpinned_judges_share_general_pools_and_spare_nodes_are_unused() -> None:
    pools = {"main": {"nodes": 3, "gpus_per_node": 8}}
    p = plan_of(make_spec(4, 4, {"general": 1}, pools=pools))
    assert layout(p) == [(4, 4, {}, 0), (0, 0, {"general": 1}, 7), (0, 0, {}, 8)]
    assert p.unused_gpus == 15


def test_pool_too_small_names_its_nodes_key() -> None:
    pools = {"policy": {"nodes": 1, "gpus_per_node": 8}, "judge": {"nodes": 1, "gpus_per_node": 8}}
    found = rejection(make_spec(8, 8, {"a": 6, "b": 6}, pools=pools, pinned={"a": "judge", "b": "judge"}))
    assert "need 2 nodes" in found["pools.policy.nodes"]
    assert "pinned to pool judge need 2 nodes" in found["pools.judge.nodes"]


def test_every_pool_reserved_leaves_no_room_for_the_trainer() -> None:
    pools = {"judge": {"nodes": 1, "gpus_per_node": 8}}
    found = rejection(make_spec(4, 4, {"general": 1}, pools=pools, pinned={"general": "judge"}))
    assert "declare a pool for the trainer" in found["pools"]


def test_pools_with_a_partial_node_size_are_rejected_for_multi_node() -> None:
    pools = {"a": {"nodes": 2, "gpus_per_node": 4}}
    found = rejection(make_spec(4, 4, pools=pools, gpus_per_replica=4))
    assert "whole nodes" in found["launch.gpus_per_replica"]
