"""failure-RANK.json: the one writer of a failure record (the agent's own, or the reaper's for a
killed agent)."""

from __future__ import annotations

import sys
from typing import Any

from agent.coord.durable import RecordKeeper, held_by_another_incarnation
from agent.ground.failure import Failure
from schemas import FailureKind, RunDir, Writer, names, records
from schemas.safe_io import Sync

__all__ = ["write_failure_record"]


def write_failure_record(
    run: RunDir,
    writer: Writer,
    rank: int,
    failure: Failure,
    phase: str,
    keeper: RecordKeeper | None = None,
    *,
    started_mono: float | None = None,
) -> bool:
    """Write failure-RANK.json (the agent's own, or the reaper's for a killed agent).

    A hung or broken shared filesystem (OSError) is survivable: peers still see our silence, and
    with a `keeper` the record is kept on this node and retried (agent/coord/durable.py).
    A record that does not match its schema is an agent bug, and must not cost the evidence:
    it is reported on stderr and replaced by an `internal` record that quotes it."""
    fields = records.failure_fields(
        kind=failure.kind,
        cause=failure.cause,
        phase=failure.phase or phase,
        wall_time=failure.wall_time,
        monotonic_time=failure.monotonic_time,
        log=failure.log,
        reacting_to=failure.reacting_to,
        peers=failure.peers,
        sender=failure.sender,
        exit_code=failure.exit_code,
        child=failure.child,
        judge=failure.judge,
        binding=failure.binding,
        signal=failure.signal,
        fs_condition=failure.fs_condition,
        checks=failure.checks,
        hang=failure.hang,
        # The agent's start on the same host's monotonic clock (the reaper is told it).
        since_start=max(0.0, failure.monotonic_time - started_mono) if started_mono is not None else None,
    )
    if held_by_another_incarnation(run, names.failure(rank), writer.incarnation):
        print(f"gym-agent: [rank {rank}] not overwriting another incarnation's failure record", file=sys.stderr)
        return False
    try:
        # Visible first, durable before we return: peers are waiting for this one.
        run.write_artifact(names.failure(rank), writer, fields, sync=Sync.AFTER_RENAME)
        return True
    except OSError:
        return keeper.write(names.failure(rank), writer, fields) if keeper is not None else False
    except ValueError as exc:
        return _write_internal_instead(run, writer, rank, failure, fields, exc)


def _write_internal_instead(
    run: RunDir, writer: Writer, rank: int, failure: Failure, fields: dict[str, Any], exc: ValueError
) -> bool:
    """The record its schema rejected (`fields`), reported on stderr and replaced by an `internal`
    record that quotes it."""
    print(f"gym-agent: [rank {rank}] failure record rejected by its schema: {exc}", file=sys.stderr, flush=True)
    # Only the fields that cannot be wrong: a bad fact must not sink its own report.
    fallback = records.failure_fields(
        kind=FailureKind.INTERNAL,
        cause=f"the failure record did not match its schema ({exc}); it said: {fields['kind']!r}: {fields['cause']!r}",
        phase=str(fields["phase"]),
        wall_time=failure.wall_time,
        monotonic_time=failure.monotonic_time,
        log=names.agent_log(rank),
        reacting_to=None,
    )
    try:
        run.write_artifact(names.failure(rank), writer, fallback)
        return True
    except OSError:
        return False
