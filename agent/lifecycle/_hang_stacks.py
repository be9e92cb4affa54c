"""A hang's evidence on every node: before anything is torn down, the stacks of every process this
agent supervises, kept in stacks-RANK.json.

Which failures keep them: a hang (the driver's node called it), a reaction to one (every other
node, rung or reading its record), and the scheduler's walltime warning while the driver is stuck
(the driver's node calls that a hang; the other nodes read the driver node's heartbeat, which says
how long the driver has made no progress). The node that calls the hang (and a node stopping for
a stuck run's walltime warning) takes them before it trips its failure: nothing of the run, on
any node, is torn down before those stacks are read (a peer's teardown would wake the driver out
of its ray.get). A node reacting to a hang takes them in the supervisor's thread, first thing in
its stop (agent/proc/supervisor.py before_stop). Either way node-local work only, bounded by
stack_dump_timeout; the record is written by the teardown, which may touch the shared filesystem.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from agent.coord.context import RunContext
from agent.coord.durable import RecordKeeper
from agent.coord.topology import Topology
from agent.ground import clock
from agent.ground.failure import Failure
from agent.lifecycle._driver import DriverRuntime
from agent.lifecycle._hang_collectives import HangCollectives, publish_record
from agent.stacks import Capture, StackReason, capture, supervised
from agent.stacks.capture import trigger_of
from schemas import FailureKind, names

__all__ = ["HangStacks", "MAX_PROCESSES", "PEERS_MARGIN_S", "PUBLISH_S", "log", "reason_for", "walltime_failure"]

log = logging.getLogger(__name__)

MAX_PROCESSES = 256
PUBLISH_S = 5.0  # the record's write, from the stop (a hung shared filesystem: the teardown retries it)
PEERS_MARGIN_S = 5.0  # beyond stack_dump_timeout: a peer hears of the hang and writes its record


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
        self.published = False  # stacks-RANK.json is in the run directory
        self.driver_node = False  # set once the topology is known: this node waits for the others
        self._lock = threading.Lock()  # the progress watch and the supervisor may both ask: one capture
        self.collectives = HangCollectives(ctx)  # torch.distributed's Flight Recorder, asked alongside

    def take(self) -> None:
        """The supervisor's before-stop hook: every supervised process's stacks, while they still
        run, when the failure is a hang's (unless they were taken before the failure tripped); then
        the record, and on the driver's node the other nodes' records: stopping the driver ends its
        Ray actors on every node, so it waits (bounded) until the other nodes have read theirs."""
        self.take_for(self.ctx.signal.failure)
        if self.taken is None:
            return
        self._bounded(self._publish, PUBLISH_S)
        if self.driver_node:
            wait = self.ctx.config.coordination.stack_dump_timeout + PEERS_MARGIN_S
            self._bounded(lambda: self._await_peers(wait), wait + 1.0)

    def take_for(self, failure: Failure | None) -> None:
        """Take them now for `failure` (before it trips, on the node that calls the hang)."""
        reason = reason_for(failure)
        if reason is None or failure is None:
            return
        with self._lock:
            if self.taken is None:
                self.taken = self._capture(reason, failure)

    def _capture(self, reason: StackReason, failure: Failure) -> Capture:
        targets, more = supervised(self.ctx.supervisor.groups(), MAX_PROCESSES)
        self.collectives.take(targets, str(reason))  # first: py-spy pauses each process it reads
        return capture(
            targets,
            reason=reason,
            timeout=self.ctx.config.coordination.stack_dump_timeout,
            dump_dir=self.ctx.local_dir,
            more=more,
            trigger=trigger_of(str(failure.kind), failure.cause),
        )

    @staticmethod
    def _bounded(work: Callable[[], None], seconds: float) -> None:
        """Run `work` (which touches the shared filesystem) in a helper thread: the supervisor's
        thread, which calls this, never blocks on the shared filesystem for longer than `seconds`."""
        helper = threading.Thread(target=work, name="hang-stacks", daemon=True)
        helper.start()
        helper.join(seconds)

    def _publish(self) -> None:
        self.collectives.publish()
        taken = self.taken
        if taken is None or self.published:
            return
        self.published = publish_record(self.ctx, names.stacks(self.ctx.rank), taken.fields, "stacks")

    def _await_peers(self, seconds: float) -> None:
        """Until every rank's stacks-RANK.json is listed (a frozen or dead node never writes one)."""
        ranks = range(self.ctx.plan.replicas)
        want = {names.stacks(r) for r in ranks if r != self.ctx.rank}
        deadline = clock.mono() + seconds
        while want and clock.mono() < deadline:
            want -= set(self.ctx.run.listdir())
            if want:
                time.sleep(self.ctx.config.coordination.poll_interval)
        if want:
            log.warning("tearing down without the stacks of %s (not written within %.0fs)", sorted(want), seconds)

    def write(self, keeper: RecordKeeper) -> None:
        """stacks-RANK.json when the stop could not write it (kept on this node and retried when the
        run directory refuses it); the console says where they are."""
        self.collectives.write(keeper)
        taken = self.taken
        if taken is None:
            return
        rel = names.stacks(self.ctx.rank)
        if not self.published:
            keeper.write(rel, self.ctx.writer, taken.fields)
        self.ctx.out(
            f"stacks of {taken.with_stacks} of {taken.processes} process(es) kept in {rel} "
            f"({taken.seconds:.1f}s; {taken.fields['fallback_dumps']} by the driver API's fallback)"
        )


def walltime_failure(
    ctx: RunContext, topo: Topology, driver: DriverRuntime, stacks: HangStacks, failure: Failure
) -> Failure:
    """The walltime warning's failure on this node (the liveness thread calls it, before it trips):
    on the driver's node a stuck driver makes it a hang; elsewhere the driver node's heartbeat says
    whether the driver is stuck, and then this node keeps its stacks too. Taken here, first."""
    if topo.is_driver_node:
        hung = driver.stuck_at_walltime()
        if hung is None:
            return failure
        stacks.take_for(hung)
        return hung
    driver_rank = topo.rank_of_node(ctx.plan.driver_node)
    doc = ctx.run.read_json(names.heartbeat(driver_rank), attempts=1)
    progress = (doc or {}).get("progress")
    if not isinstance(progress, dict) or progress.get("stuck") is not True:
        return failure
    idle = progress.get("idle_seconds")
    kept = dataclasses.replace(
        failure,
        cause=f"{failure.cause}; the driver (rank {driver_rank}) had made no progress for {idle}s: a hang, "
        "this node's stacks are kept",
        keep_stacks=True,
    )
    stacks.take_for(kept)
    return kept
