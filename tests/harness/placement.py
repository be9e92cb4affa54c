"""placement-RANK.json of a node, from its topology, as the agent's placement step builds it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.lifecycle.topology import Topology
from schemas import records


def placement_fields(topo: Topology, address: str, visible_devices: Sequence[str]) -> dict[str, Any]:
    """The fields the agent writes for the node `topo` (schemas.records.placement_fields)."""
    node = topo.node
    return records.placement_fields(
        node_index=node.index,
        address=address,
        visible_devices=visible_devices,
        trainer_gpus=node.trainer_gpus,
        rollout_gpus=node.rollout_gpus,
        ray_devices=node.ray_devices,
        ray_num_gpus=node.ray_gpus,
        judge_devices=node.judge_devices,
        unused_devices=node.unused_devices,
        is_head=topo.is_head,
        is_driver_node=topo.is_driver_node,
    )
