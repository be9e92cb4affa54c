"""Who is who once every replica agreed on the plan: this node, its peers in node order, the head
and the driver's node. Apart from context.py so that the run context does not import the
rendezvous (which takes a run context): the two would import each other."""

from __future__ import annotations

from dataclasses import dataclass

from agent.coord.rendezvous import Peer
from launch.spec.plan import NodePlan


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
