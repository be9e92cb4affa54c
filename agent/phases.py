"""The agent's lifecycle as an explicit sequence of phases, and its printable state.

Like torch.distributed.elastic's WorkerState, the state is a documented enum; every phase
transition is printed as one line and recorded with its times in `phases-RANK.json`.
"""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    """Lifecycle phases in order. Some overlap: judges load while Ray starts."""

    RENDEZVOUS = "rendezvous"  # address records exchanged through the run directory
    PLAN_AGREEMENT = "plan_agreement"  # every replica resolved the same spec fingerprint
    DEVICES = "devices"  # judge devices removed from Ray's CUDA mask and GPU count
    PLACEMENT = "placement"  # placement-RANK.json written
    JUDGES_START = "judges_start"  # managed judges started in their own process groups
    RAY_START = "ray_start"  # head on the lowest address, workers on the others
    JUDGE_HEALTH = "judge_health"  # managed judges answer /health
    READINESS = "readiness"  # Ray's live nodes equal the plan, per address
    REGISTRY = "registry"  # registry.json: judges, rubrics, bindings
    CANARIES = "canaries"  # known-good scores above known-bad through every binding
    DRIVER = "driver"  # the training driver runs (on one node); the others supervise
    COMPLETE = "complete"  # complete.json
    ACKNOWLEDGE = "acknowledge"  # every replica acknowledged before Ray is torn down
    TEARDOWN = "teardown"  # every process group stopped; cleanup-RANK.json


class AgentState(enum.StrEnum):
    """What the agent is doing overall (printed with every phase line)."""

    INIT = "INIT"  # parsing arguments, resolving identity
    STARTING = "STARTING"  # inside the single startup deadline
    RUNNING = "RUNNING"  # the driver runs
    STOPPING = "STOPPING"  # tearing down after success or failure
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
