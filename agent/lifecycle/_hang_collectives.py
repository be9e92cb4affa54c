"""A hang's collective traces on this node (collectives-RANK.json), taken with its stacks: the
processes HangStacks reads are asked for their Flight Recorder (agent/stacks/collectives.py),
within COLLECT_S (at most stack_dump_timeout), before anything is torn down; written beside
stacks-RANK.json."""

from __future__ import annotations

import logging
from typing import Any

from agent.coord.context import RunContext
from agent.coord.durable import RecordKeeper
from agent.stacks import Target, collectives
from schemas import names

__all__ = ["HangCollectives", "publish_record"]

log = logging.getLogger(__name__)

# A dump takes ~0.05 s; a process whose hook cannot answer (its GIL held) must not eat the stacks'
# own bound, which the driver's node waits for on every peer.
COLLECT_S = 5.0


def publish_record(ctx: RunContext, rel: str, fields: dict[str, Any], what: str) -> bool:
    """A hang record written to the run directory as soon as it is taken; False (and said) when the
    filesystem refuses it now: the teardown's durable keeper writes it then."""
    try:
        ctx.run.write_artifact(rel, ctx.writer, fields)
        return True
    except (OSError, ValueError) as exc:
        log.warning("%s record not written yet (%s); the teardown retries", what, exc)
        return False


class HangCollectives:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.fields: dict[str, Any] | None = None
        self.published = False

    def take(self, targets: list[Target], reason: str) -> None:
        """Node-local: ask every target that armed the hook (none armed: no record)."""
        folder = self.ctx.local_dir
        if folder is None or self.fields is not None:
            return
        timeout = min(COLLECT_S, self.ctx.config.coordination.stack_dump_timeout)
        self.fields = collectives.collect(targets, dump_dir=folder, timeout=timeout, reason=reason)

    def publish(self) -> None:
        if self.fields is None or self.published:
            return
        self.published = publish_record(self.ctx, names.collectives(self.ctx.rank), self.fields, "collectives")

    def write(self, keeper: RecordKeeper) -> None:
        if self.fields is None:
            return
        rel = names.collectives(self.ctx.rank)
        if not self.published:
            keeper.write(rel, self.ctx.writer, self.fields)
        self.ctx.out(f"collectives of {len(self.fields['processes'])} process(es) kept in {rel}")
