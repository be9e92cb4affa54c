"""Who is who once every replica agreed on the plan: this node, its peers in node order, the head
and the driver's node. Apart from context.py so that the run context does not import the
rendezvous (which takes a run context): the two would import each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.coord.rendezvous import Peer
from launch.spec.plan import NodePlan
from schemas import records

__all__ = ["Topology"]


@dataclass(frozen=True)
class Topology:
    """Who is who, once every replica agreed on the plan."""

    node: NodePlan
    peers: tuple[Peer, ...]  # in node order: peers[i] owns planned node i
    driver_node: int
    ray_nodes: tuple[int, ...] = ()  # planned nodes that run Ray (seed 001: the spanned pools)

    @property
    def head_address(self) -> str:
        # The Ray head runs on the driver's node (seed 001), where the driver reaches it locally.
        return self.peers[self.driver_node].address

    @property
    def is_head(self) -> bool:
        return self.node.index == self.driver_node

    @property
    def in_ray(self) -> bool:
        return self.node.index in self.ray_nodes

    @property
    def is_driver_node(self) -> bool:
        return self.node.index == self.driver_node

    def rank_of_node(self, index: int) -> int:
        return self.peers[index].rank

    def placement_fields(
        self,
        address: str,
        visible_devices: Sequence[str],
        filesystem: Mapping[str, Any] | None = None,
        gpus: Sequence[Mapping[str, Any]] = (),
        ray_address_exported: str | None = None,
    ) -> dict[str, Any]:
        """placement-RANK.json of this node (schemas.records.placement_fields)."""
        node = self.node
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
            is_head=self.is_head,
            is_driver_node=self.is_driver_node,
            filesystem=filesystem,
            pool=node.pool,
            in_ray=self.in_ray,
            gpus=gpus,
            ray_address_exported=ray_address_exported,
            policy_devices=node.policy_devices,
        )
