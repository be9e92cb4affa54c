"""GPU placement: who gets which GPU on which planned node. Pure.

Packed placement with capacity C = ``launch.gpus_per_replica``:

1. Single node: with one trainer node and everything (trainer + rollout +
   bound managed judges) fitting C, the run is one replica and only the
   requested GPUs are allocated, so ``Plan.gpus_per_replica`` is the number of
   GPUs used (e.g. 2 trainer + 4 rollout at C = 8 allocates 6, not 8).
2. Otherwise: trainer nodes first (``trainer.gpus_per_node`` each); the final
   trainer node's spare GPUs take whole rollout engines,
   ``((C - trainer_per_node) // tp) * tp`` of them at most; then rollout nodes
   of ``min(C, remaining)``; then bound managed judges, in name order, go to the
   first node with room among the last node placed so far (the last rollout
   node, or the final trainer node when rollout fit there) and the judge nodes
   added after it, else a new judge node. Every replica has C GPUs;
   ``unused_gpus = C * replicas - used``.
3. Pools (``[pools.NAME]``): one job of ``sum(nodes)`` replicas; pools take contiguous node
   ranges in *declaration* order (the fingerprint keeps that order, so one fingerprint still gives
   one plan). A pool named by a ``node_pool`` (``trainer``, ``inference``, a bound managed judge) is
   reserved for what is pinned to it, which is packed as in 2 against that pool alone; what is
   not pinned is packed as in 2 over the other GPU pools' nodes. No single-node shrinking: pools
   state the allocation. A CPU pool (``gpus_per_node = 0``) gets no GPU work (its nodes have a
   capacity of 0, its agents run coordination only); a run whose pools are all CPU pools (a
   judge-only job with external judges, ``trainer.nodes = 0``) has a capacity of 0.

An evaluation run has no trainer (``trainer.nodes = 0``) but rollout engines (``inference.gpus > 0``)
and judges: it is packed as in 2 and 3 with no trainer node, and its driver goes to the first node of its
policy, the first rollout node (seed 001: it reaches the policy over localhost). A run with neither (a
judge-only job, a Ray service's benchmark) runs its driver on node 0.

The policy service (``[policy]``, seed 001; evaluation runs only) is packed after rollout on nodes of
its own, ``min(C, tensor_parallel_size)`` GPUs each (a policy larger than a node takes whole nodes:
one engine across them), and judges may share its last node; the driver runs on its first node.

Devices on a node are local indices 0..C-1: Ray gets the first ``ray_gpus``
(trainer, then rollout), the policy the next ``policy_gpus``, judges the next ones in name order, the
tail is unused.

Ray (when it starts: ``ray.enabled``, by default only for a trainer, rollout engines or a declared
``[ray]``): the head runs on the driver's node and the nodes of ``ray.node_pools`` join it (absent: every
node but a CPU pool's; ``[]``: the driver's node alone). Trainer or rollout GPUs planned on a node
that does not join Ray are refused, naming the pool. A joining node with no trainer or rollout GPUs
whose pool ``ray.node_pools`` names (or any, in a run with neither trainer nor rollout) gives Ray
its free tail (seed 001: a benchmark that places its own devices sees them), not 0.

Driver placement: ``"trainer"`` = the node of trainer rank 0; ``"inference"`` = the last
inference node, a node holding rollout GPUs and no trainer GPUs (no effect without one: rollout
engines on a trainer node's spare GPUs do not make it an inference node). Without a trainer the
placement is ``"policy"`` (the policy's first node) or ``"first"`` (node 0) whatever the spec says.

Bounds: the number of nodes a request needs is computed arithmetically before any node is
built, so an absurd request (10**12 rollout GPUs) is refused at once instead of being packed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from launch.spec.config import RunConfig
from launch.spec.errors import Problem, SpecError
from launch.spec.sections import MAX_NODES, JudgeConfig

__all__ = ["NodePlan", "Plan", "driver_placement", "placement_problems", "plan"]


@dataclass(frozen=True)
class NodePlan:
    """Planned node ``index``: GPU counts per role and the local devices of each role."""

    index: int
    trainer_gpus: int
    rollout_gpus: int
    judges: Mapping[str, int]  # name -> GPUs, name order
    # What Ray advertises on this node: trainer + rollout, or (seed 001) a spanned node's free GPUs.
    ray_gpus: int
    unused_gpus: int
    ray_devices: tuple[int, ...]
    judge_devices: Mapping[str, tuple[int, ...]]
    unused_devices: tuple[int, ...]
    pool: str | None = None
    # Colocated mode only: rollout engines sharing the trainer's devices (not extra GPUs).
    colocated_rollout_gpus: int = 0
    # The node's GPUs: the run's capacity, 0 on a CPU pool's node (its agent runs coordination only).
    gpus: int = 0
    # The policy service's GPUs here (seed 001), after Ray's and before the judges'.
    policy_gpus: int = 0
    policy_devices: tuple[int, ...] = ()

    @property
    def judge_gpus(self) -> int:
        return sum(self.judges.values())

    @property
    def used_gpus(self) -> int:
        return self.ray_gpus + self.policy_gpus + self.judge_gpus

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pool": self.pool,
            "gpus": self.gpus,
            "trainer_gpus": self.trainer_gpus,
            "rollout_gpus": self.rollout_gpus,
            "colocated_rollout_gpus": self.colocated_rollout_gpus,
            "ray_gpus": self.ray_gpus,
            "judges": dict(self.judges),
            "policy_gpus": self.policy_gpus,
            "policy_devices": list(self.policy_devices),
            "unused_gpus": self.unused_gpus,
            "ray_devices": list(self.ray_devices),
            "judge_devices": {k: list(v) for k, v in self.judge_devices.items()},
            "unused_devices": list(self.unused_devices),
        }


@dataclass(frozen=True)
class Plan:
    replicas: int
    gpus_per_replica: int
    allocated_gpus: int
    used_gpus: int
    unused_gpus: int
    driver_node: int  # index into nodes
    driver_placement: str
    placement_mode: str
    nodes: tuple[NodePlan, ...]
    # Ray (seed 001): the head runs on the driver's node; the nodes of ray.node_pools join it
    # (every node when node_pools is absent). Empty when Ray is off.
    ray_nodes: tuple[int, ...] = ()
    # The policy service's nodes (seed 001), its engine's node ranks in order; node 0 serves HTTP
    # and runs the driver. Empty without a policy service.
    policy_nodes: tuple[int, ...] = ()

    @property
    def ray_head(self) -> int:
        return self.driver_node

    def judge_node(self, name: str) -> int | None:
        """Index of the node running managed judge ``name`` (None if it takes no GPUs)."""
        return next((n.index for n in self.nodes if name in n.judges), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "allocated_gpus": self.allocated_gpus,
            "used_gpus": self.used_gpus,
            "unused_gpus": self.unused_gpus,
            "driver_node": self.driver_node,
            "driver_placement": self.driver_placement,
            "placement_mode": self.placement_mode,
            "nodes": [n.to_json() for n in self.nodes],
            "ray_head": self.ray_head,
            "ray_nodes": list(self.ray_nodes),
            "policy_nodes": list(self.policy_nodes),
        }


@dataclass
class _Slots:
    """Mutable builder for one node while packing."""

    trainer: int = 0
    rollout: int = 0
    colocated: int = 0
    policy: int = 0
    judges: dict[str, int] = field(default_factory=dict)
    pool: str | None = None

    def used(self) -> int:
        return self.trainer + self.rollout + self.policy + sum(self.judges.values())


def _pack(
    capacity: int,
    trainer_nodes: int,
    trainer_per_node: int,
    rollout: int,
    tp: int,
    judges: Sequence[JudgeConfig],
    colocated_rollout: int = 0,
    policy: int = 0,
) -> list[_Slots]:
    nodes = [_Slots(trainer=trainer_per_node) for _ in range(trainer_nodes)]
    if nodes and colocated_rollout:
        nodes[0].colocated = colocated_rollout
    remaining = rollout
    if nodes and remaining:
        # Only whole engines go on the final trainer node's spare GPUs.
        take = min(((capacity - trainer_per_node) // tp) * tp, remaining)
        nodes[-1].rollout += take
        remaining -= take
    while remaining > 0:
        # capacity and remaining are multiples of tp (checked), so engines stay whole.
        take = min(capacity, remaining)
        nodes.append(_Slots(rollout=take))
        remaining -= take
    # The policy on nodes of its own: whole nodes when it is larger than one (its engine spans them).
    while policy > 0:
        take = min(capacity, policy)
        nodes.append(_Slots(policy=take))
        policy -= take
    open_nodes = nodes[-1:]
    for judge in judges:
        for node in open_nodes:
            if capacity - node.used() >= judge.gpus:
                node.judges[judge.name] = judge.gpus
                break
        else:
            node = _Slots(judges={judge.name: judge.gpus})
            nodes.append(node)
            open_nodes.append(node)
    return nodes


def _node_plan(index: int, slots: _Slots, capacity: int) -> NodePlan:
    """Node ``index`` of ``capacity`` GPUs (0 on a CPU pool's node)."""
    ray = slots.trainer + slots.rollout
    cursor = ray + slots.policy
    judge_devices: dict[str, tuple[int, ...]] = {}
    for name in sorted(slots.judges):
        judge_devices[name] = tuple(range(cursor, cursor + slots.judges[name]))
        cursor += slots.judges[name]
    return NodePlan(
        index=index,
        trainer_gpus=slots.trainer,
        rollout_gpus=slots.rollout,
        judges=MappingProxyType({k: slots.judges[k] for k in sorted(slots.judges)}),
        ray_gpus=ray,
        unused_gpus=capacity - cursor,
        ray_devices=tuple(range(ray)),
        judge_devices=MappingProxyType(judge_devices),
        unused_devices=tuple(range(cursor, capacity)),
        pool=slots.pool,
        colocated_rollout_gpus=slots.colocated,
        gpus=capacity,
        policy_gpus=slots.policy,
        policy_devices=tuple(range(ray, ray + slots.policy)),
    )


def _shape_problems(config: RunConfig) -> list[Problem]:
    """Rejections that do not depend on the layout: sizes against one node."""
    return [*_replica_problems(config), *_engine_problems(config), *_colocation_problems(config)]


def _replica_problems(config: RunConfig) -> Iterator[Problem]:
    """A replica fits its node, and the trainer's share of a node fits a replica."""
    c = config.gpus_per_replica
    if c > config.node_gpus:
        yield Problem(
            "launch.gpus_per_replica",
            f"is {c} but a node has {config.node_gpus} GPUs (launch.node_gpus): a replica cannot be larger than a node",
        )
    t = config.trainer.gpus_per_node
    if t > c:
        yield Problem(
            "trainer.gpus_per_node",
            f"is {t} but a node holds {c} GPUs (launch.gpus_per_replica): the trainer is larger than a "
            "node; lower gpus_per_node and raise trainer.nodes",
        )


def _engine_problems(config: RunConfig) -> Iterator[Problem]:
    """Serving engines (rollout and judges) are whole and each within one node: no cross-node TP."""
    c = config.gpus_per_replica
    tp, r = config.inference.tensor_parallel_size, config.inference.gpus
    if tp > c:
        yield Problem(
            "inference.tensor_parallel_size",
            f"is {tp} but a node holds {c} GPUs: a rollout engine larger than a node would need "
            "cross-node serving TP, which is not supported",
        )
    elif c % tp:
        yield Problem(
            "inference.tensor_parallel_size",
            f"({tp}) must divide launch.gpus_per_replica ({c}) so whole engines fill each node",
        )
    if r % tp:
        yield Problem(
            "inference.gpus",
            f"({r}) must be a multiple of inference.tensor_parallel_size ({tp}): engines are whole",
        )
    policy = config.managed_policy
    if policy is not None and policy.tensor_parallel_size > c and policy.tensor_parallel_size % c:
        yield Problem(
            "policy.tensor_parallel_size",
            f"is {policy.tensor_parallel_size}, more than a node's {c} GPUs, so the policy spans whole nodes: "
            f"make it a multiple of {c}",
        )
    for judge in config.gpu_judges:
        if judge.gpus > c:
            yield Problem(
                f"judges.{judge.name}.gpus",
                f"is {judge.gpus} but a node holds {c} GPUs: a judge larger than a node would need "
                "cross-node serving TP, which is not supported",
            )


def _colocation_problems(config: RunConfig) -> Iterator[Problem]:
    """Colocated rollout shares one node's trainer GPUs: a single-node trainer, and no more GPUs than it has."""
    if config.inference.placement_mode != "colocated":
        return
    r = config.inference.gpus
    if config.trainer.nodes > 1:
        yield Problem(
            "inference.placement_mode",
            f'"colocated" is single-node only but trainer.nodes is {config.trainer.nodes}: '
            'multi-node colocation is not supported; use "disaggregated"',
        )
    if not config.trainer.nodes and r:
        yield Problem(
            "inference.placement_mode",
            '"colocated" shares the trainer\'s GPUs, and a run without a trainer (trainer.nodes = 0) has '
            'none: use "disaggregated"',
        )
    elif r > config.trainer.gpus:
        yield Problem(
            "inference.gpus",
            f"({r}) colocated rollout shares the trainer's GPUs, so it can use at most {config.trainer.gpus}",
        )


def _standard_layout(config: RunConfig) -> tuple[list[_Slots], int, list[Problem]]:
    c = config.gpus_per_replica
    colocated = config.inference.placement_mode == "colocated"
    nodes = _pack(
        c,
        config.trainer.nodes,
        config.trainer.gpus_per_node,
        0 if colocated else config.inference.gpus,
        config.inference.tensor_parallel_size,
        config.gpu_judges,
        colocated_rollout=config.inference.gpus if colocated else 0,
        policy=_policy_gpus(config, None),
    )
    if len(nodes) == 1:
        # Single node: allocate only what is requested.
        return nodes, nodes[0].used(), []
    problems: list[Problem] = []
    if colocated and config.trainer.nodes == 1:
        problems.append(
            Problem(
                "inference.placement_mode",
                f'"colocated" is single-node only, but trainer and judges need {len(nodes)} nodes of {c} '
                'GPUs: multi-node colocation is not supported; use "disaggregated" or fewer judge GPUs',
            )
        )
    return nodes, c, problems


def _pinned(config: RunConfig) -> dict[str | None, list[str]]:
    """Pool (None: the unreserved pools) -> what runs there: "trainer", "rollout", judge names."""
    out: dict[str | None, list[str]] = {}
    if config.trainer.nodes:
        out.setdefault(config.trainer.node_pool, []).append("trainer")
    if config.inference.gpus:
        out.setdefault(config.inference.node_pool, []).append("rollout")
    if config.managed_policy is not None:
        out.setdefault(config.managed_policy.node_pool, []).append("policy")
    for j in config.gpu_judges:
        out.setdefault(j.node_pool, []).append(f"judge {j.name}")
    return out


def _policy_gpus(config: RunConfig, pool: str | None) -> int:
    """The policy service's GPUs packed with what is pinned to ``pool`` (None: the unpinned)."""
    policy = config.managed_policy
    return policy.tensor_parallel_size if policy is not None and policy.node_pool == pool else 0


def _pack_group(config: RunConfig, capacity: int, pool: str | None) -> list[_Slots]:
    """The nodes of what is pinned to ``pool`` (None: what is not pinned), packed as in 2."""
    colocated = config.inference.placement_mode == "colocated"
    trainer_here = config.trainer.node_pool == pool
    rollout_here = config.inference.node_pool == pool
    rollout = config.inference.gpus if rollout_here and not colocated else 0
    return _pack(
        capacity,
        config.trainer.nodes if trainer_here else 0,
        config.trainer.gpus_per_node,
        rollout,
        config.inference.tensor_parallel_size,
        [j for j in config.gpu_judges if j.node_pool == pool],
        colocated_rollout=config.inference.gpus if colocated and trainer_here else 0,
        policy=_policy_gpus(config, pool),
    )


def _fits_pool(config: RunConfig, pool: Any) -> list[Problem]:
    """What is pinned to ``pool`` fits one of its nodes (a pool of another size than the replica's)."""
    size, out = pool.gpus_per_node, []
    where = f"pool {pool.name}'s nodes have {size} GPUs (pools.{pool.name}.gpus_per_node)"
    if config.trainer.nodes and config.trainer.node_pool == pool.name and config.trainer.gpus_per_node > size:
        out.append(Problem("trainer.gpus_per_node", f"is {config.trainer.gpus_per_node} but {where}"))
    tp = config.inference.tensor_parallel_size
    if config.inference.gpus and config.inference.node_pool == pool.name and (tp > size or size % tp):
        out.append(Problem("inference.tensor_parallel_size", f"({tp}) must divide {size}: {where}"))
    ptp = _policy_gpus(config, pool.name)
    if ptp > size and ptp % size:
        out.append(
            Problem("policy.tensor_parallel_size", f"({ptp}) must be a multiple of {size} over whole nodes: {where}")
        )
    for j in config.gpu_judges:
        if j.node_pool == pool.name and j.gpus > size:
            out.append(Problem(f"judges.{j.name}.gpus", f"is {j.gpus} but {where}"))
    return out


def _pool_layout(config: RunConfig) -> tuple[list[_Slots], int, list[Problem]]:
    # A CPU pool's nodes get no GPU work; a run of CPU pools only has a capacity of 0.
    gpu_pools = [p for p in config.pool_list if not p.cpu_only]
    c = config.gpus_per_replica if gpu_pools else 0
    pinned = _pinned(config)
    reserved = {name for name in pinned if name is not None}
    general = [p for p in gpu_pools if p.name not in reserved]
    problems: list[Problem] = []
    by_pool: dict[str, list[_Slots]] = {}

    def spread(packed: list[_Slots], pools: Sequence[Any]) -> None:
        it = iter(packed)
        for pool in pools:
            by_pool[pool.name] = [s for _, s in zip(range(pool.nodes), it, strict=False)]

    packed = _pack_group(config, c, None)
    capacity_nodes = sum(p.nodes for p in general)
    if packed and not general:
        problems.append(
            Problem(
                "pools",
                "every GPU pool is reserved for the services pinned to it with node_pool; declare a pool for the "
                f"{', '.join(pinned.get(None, []))} (not pinned), or pin them with node_pool",
            )
        )
    elif len(packed) > capacity_nodes:
        names = ", ".join(p.name for p in general)
        problems.append(
            Problem(
                f"pools.{general[-1].name}.nodes",
                f"{', '.join(pinned.get(None, []))} (not pinned) need {len(packed)} nodes but pools {names} give "
                f"{capacity_nodes}; add nodes to these pools",
            )
        )
    if config.inference.placement_mode == "colocated" and len(packed) > 1:
        problems.append(Problem("inference.placement_mode", '"colocated" is single-node only; use "disaggregated"'))
    spread(packed, general)
    for pool in config.pool_list:
        if pool.name not in reserved:
            continue
        problems += _fits_pool(config, pool)
        slots = _pack_group(config, pool.gpus_per_node, pool.name)
        if len(slots) > pool.nodes:
            problems.append(
                Problem(
                    f"pools.{pool.name}.nodes",
                    f"{', '.join(pinned[pool.name])} pinned to pool {pool.name} need {len(slots)} nodes of "
                    f"{pool.gpus_per_node} "
                    f"GPUs, the pool has {pool.nodes}",
                )
            )
        spread(slots, [pool])
    nodes: list[_Slots] = []
    for pool in config.pool_list:
        slots = by_pool.get(pool.name, [])
        slots = slots + [_Slots() for _ in range(pool.nodes - len(slots))]
        for s in slots:
            s.pool = pool.name
        nodes += slots
    return nodes, c, problems


def _node_bound(config: RunConfig) -> list[Problem]:
    """Refuse a request that needs more than MAX_NODES nodes, counted without building them."""
    c = config.gpus_per_replica
    if config.pool_list:
        nodes = sum(p.nodes for p in config.pool_list)
        key = "pools"
    else:
        spare = ((c - config.trainer.gpus_per_node) // config.inference.tensor_parallel_size) * (
            config.inference.tensor_parallel_size
        )
        rollout = 0 if config.inference.placement_mode == "colocated" else config.inference.gpus
        rollout_nodes = -(-max(rollout - spare, 0) // c)
        policy_nodes = -(-_policy_gpus(config, None) // max(c, 1))
        nodes = config.trainer.nodes + rollout_nodes + policy_nodes + len(config.gpu_judges)
        key = "inference.gpus" if rollout_nodes > config.trainer.nodes else "trainer.nodes"
    if nodes > MAX_NODES:
        return [Problem(key, f"this request needs about {nodes} nodes; at most {MAX_NODES} are supported")]
    return []


def _layout(config: RunConfig) -> tuple[list[_Slots], int, list[Problem]]:
    problems = _shape_problems(config) or _node_bound(config)
    if problems:
        return [], config.gpus_per_replica, problems
    nodes, capacity, problems = _pool_layout(config) if config.pools else _standard_layout(config)
    if len(nodes) > 1 and capacity and config.gpus_per_replica != config.node_gpus:
        problems.append(
            Problem(
                "launch.gpus_per_replica",
                f"is {config.gpus_per_replica} but this run needs {len(nodes)} nodes: multi-node replicas "
                f"must be whole nodes (launch.node_gpus = {config.node_gpus}) because partial-node replicas "
                "could share a physical host",
            )
        )
    return nodes, capacity, problems


def placement_problems(config: RunConfig) -> list[Problem]:
    """Every reason ``config`` cannot be placed (empty when ``plan`` would succeed)."""
    return _build(config)[1]


def driver_placement(config: RunConfig) -> str:
    """The driver's placement: the spec's, except that a run without a trainer (an evaluation run,
    ``trainer.nodes = 0``) puts it on the first node of its policy (``"policy"``, seed 001): the policy
    service's, else the rollout engines' (a run with neither: node 0, ``"first"``)."""
    if config.trainer.nodes:
        return config.driver.placement
    return "policy" if config.policy.managed or config.inference.gpus else "first"


def _driver_node(config: RunConfig, nodes: Sequence[NodePlan]) -> int:
    policy = [n.index for n in nodes if n.policy_gpus]
    if policy:
        # Seed 001: the driver reaches the policy over localhost, on the first node of its pool.
        return policy[0]
    if config.trainer.nodes == 0:
        # An evaluation run's rollout engines serve its policy: the driver on their first node (seed 001);
        # with none (a judge-only job, a Ray service's benchmark), on node 0.
        return next((n.index for n in nodes if n.rollout_gpus), 0)
    trainer_node = next((n.index for n in nodes if n.trainer_gpus), 0)
    if driver_placement(config) == "inference":
        inference = [n.index for n in nodes if n.rollout_gpus and not n.trainer_gpus]
        if inference:
            return inference[-1]
    return trainer_node


def _ray_nodes(config: RunConfig, nodes: Sequence[NodePlan], driver: int) -> tuple[int, ...]:
    if not config.ray.enabled:
        return ()
    spanned = config.ray.node_pools
    if spanned is None:
        # Every node but a CPU pool's: Ray spans a CPU pool only when ray.node_pools names it.
        cpu = {p.name for p in config.pool_list if p.cpu_only}
        return tuple(n.index for n in nodes if n.index == driver or n.pool not in cpu)
    return tuple(n.index for n in nodes if n.index == driver or n.pool in spanned)


def _ray_sees_free_gpus(config: RunConfig, node: NodePlan, joined: frozenset[int]) -> bool:
    """Seed 001: a node that joins Ray and holds no trainer or rollout GPUs gives Ray the GPUs nothing else
    uses there (Ray would detect them) when its pool is named in ray.node_pools or the run has neither a
    trainer nor rollout (a Ray service for a benchmark that places its own devices)."""
    if node.index not in joined or node.ray_gpus or not node.unused_gpus:
        return False
    named = config.ray.node_pools is not None and node.pool in config.ray.node_pools
    return named or (config.trainer.nodes == 0 and config.inference.gpus == 0)


def _with_free_gpus_to_ray(node: NodePlan) -> NodePlan:
    return dataclasses.replace(
        node, ray_gpus=node.unused_gpus, ray_devices=node.unused_devices, unused_gpus=0, unused_devices=()
    )


def _outside_ray(config: RunConfig, nodes: Sequence[NodePlan], ray_nodes: Sequence[int]) -> list[Problem]:
    """GPU work for Ray (trainer, rollout) planned on a node that never starts Ray."""
    if not config.ray.enabled:
        return []
    joined = set(ray_nodes)
    out: list[Problem] = []
    for pool in dict.fromkeys(n.pool for n in nodes if n.ray_gpus and n.index not in joined):
        where = [n for n in nodes if n.pool == pool and n.ray_gpus and n.index not in joined]
        gpus = sum(n.ray_gpus for n in where)
        out.append(
            Problem(
                "ray.node_pools",
                f"leaves out pool {pool}, yet the plan puts {gpus} trainer/rollout GPU(s) on its node(s) "
                f"{', '.join(str(n.index) for n in where)}, which would never join Ray: add {pool!r} to "
                "ray.node_pools, or pin the trainer and rollout (trainer.node_pool, inference.node_pool) to a "
                "spanned pool",
            )
        )
    return out


def _build(config: RunConfig) -> tuple[Plan | None, list[Problem]]:
    slots, capacity, problems = _layout(config)
    if problems:
        return None, problems
    # A pool's nodes have its own GPUs (0: a CPU pool); without pools every node has the capacity.
    size = {p.name: p.gpus_per_node for p in config.pool_list}
    nodes = tuple(_node_plan(i, s, size.get(s.pool, capacity) if s.pool else capacity) for i, s in enumerate(slots))
    allocated = sum(n.gpus for n in nodes)
    driver = _driver_node(config, nodes)
    ray_nodes = _ray_nodes(config, nodes, driver)
    problems = _outside_ray(config, nodes, ray_nodes)
    if problems:
        return None, problems
    joined = frozenset(ray_nodes)  # asked once per node: a tuple's `in` is a scan of every node
    nodes = tuple(_with_free_gpus_to_ray(n) if _ray_sees_free_gpus(config, n, joined) else n for n in nodes)
    used = sum(n.used_gpus for n in nodes)
    return (
        Plan(
            replicas=len(nodes),
            gpus_per_replica=capacity,
            allocated_gpus=allocated,
            used_gpus=used,
            unused_gpus=allocated - used,
            driver_node=driver,
            driver_placement=driver_placement(config),
            placement_mode=config.inference.placement_mode,
            nodes=nodes,
            ray_nodes=ray_nodes,
            policy_nodes=tuple(n.index for n in nodes if n.policy_gpus),
        ),
        [],
    )


def plan(config: RunConfig) -> Plan:
    """The placement of a valid config. Raises SpecError naming the key to change."""
    built, problems = _build(config)
    if built is None:
        raise SpecError(problems)
    return built
