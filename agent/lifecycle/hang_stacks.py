"""A hang's evidence on every node: before anything is torn down, the stacks of every process this
agent supervises, kept in stacks-RANK.json.

Which failures keep them: a hang (the driver's node called it), a reaction to one (every other
node, rung or reading its record), and the scheduler's walltime warning while the driver is stuck
(the driver's node calls that a hang; the other nodes read the driver node's heartbeat, which says
how long the driver has made no progress). The stacks are taken in the supervisor's thread, first
thing in its stop (agent/proc/supervisor.py before_stop: node-local work only, bounded by
stack_dump_timeout); the record is written by the teardown, which may touch the shared filesystem.
"""

from __future__ import annotations

import dataclasses
import logging

from agent.coord.durable import RecordKeeper
from agent.coord.failure import Failure
from agent.lifecycle.context import RunContext
from agent.lifecycle.driver import DriverRuntime
from agent.lifecycle.topology import Topology
from agent.stacks import Capture, StackReason, capture, supervised
from agent.stacks.capture import trigger_of
from schemas import FailureKind, names

log = logging.getLogger(__name__)

MAX_PROCESSES = 256


def reason_for(failure: Failure | None) -> StackReason | None:
    """Why this failure keeps the stacks, or None when it does not."""
    if failure is None:
        return None
    if failure.kind == FailureKind.HANG:
        return StackReason.HANG
    if (failure.reacting_to or {}).get("kind") == FailureKind.HANG:
        return StackReason.HANG
    if failure.keep_stacks:
        return StackReason.WALLTIME
    return None


class HangStacks:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.taken: Capture | None = None

    def take(self) -> None:
        """The supervisor's before-stop hook: every supervised process's stacks, while they still
        run, when the failure is a hang's."""
        failure = self.ctx.signal.failure
        reason = reason_for(failure)
        if reason is None or failure is None:
            return
        targets, more = supervised(self.ctx.supervisor.groups(), MAX_PROCESSES)
        self.taken = capture(
            targets,
            reason=reason,
            timeout=self.ctx.config.coordination.stack_dump_timeout,
            dump_dir=self.ctx.local_dir,
            more=more,
            trigger=trigger_of(str(failure.kind), failure.cause),
        )

    def write(self, keeper: RecordKeeper) -> None:
        """stacks-RANK.json (kept on this node and retried when the run directory refuses it)."""
        taken = self.taken
        if taken is None:
            return
        rel = names.stacks(self.ctx.rank)
        keeper.write(rel, self.ctx.writer, taken.fields)
        self.ctx.out(
            f"stacks of {taken.with_stacks} of {taken.processes} process(es) kept in {rel} "
            f"({taken.seconds:.1f}s; {taken.fields['fallback_dumps']} by the driver API's fallback)"
        )


def walltime_failure(ctx: RunContext, topo: Topology, driver: DriverRuntime, failure: Failure) -> Failure:
    """The walltime warning's failure on this node (the liveness thread calls it): on the driver's
    node a stuck driver makes it a hang; elsewhere the driver node's heartbeat says whether the
    driver is stuck, and then this node keeps its stacks too."""
    if topo.is_driver_node:
        hung = driver.stuck_at_walltime()
        return hung if hung is not None else failure
    driver_rank = topo.rank_of_node(ctx.plan.driver_node)
    doc = ctx.run.read_json(names.heartbeat(driver_rank), attempts=1)
    progress = (doc or {}).get("progress")
    if not isinstance(progress, dict) or progress.get("stuck") is not True:
        return failure
    idle = progress.get("idle_seconds")
    return dataclasses.replace(
        failure,
        cause=f"{failure.cause}; the driver (rank {driver_rank}) had made no progress for {idle}s: a hang, "
        "this node's stacks are kept",
        keep_stacks=True,
    )
