"""What a training driver started by the agent can use: its Ray, the plan, the judges, its result,
`progress(step)`, the cheapest way to tell the agent that it is not hung, and the sample ledger
(`ledger(step, ids)`, `checkpoint(step)`), from which the audit proves that a resumed run skipped
and repeated no sample.

The agent tells the driver everything through its environment (schemas.DriverEnv names it).
Importing this module in a process the agent started arms a fallback stack dump (faulthandler on
agent.proc.driver_local.STACK_SIGNAL, into a node-local file): where py-spy cannot attach, the
agent can still record that process's stacks when the run hangs; with GYM_COLLECTIVE_TRACE set it
also answers for its collectives (agent/proc/collective_hook.py, never importing torch itself).
"""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import Any

from agent.proc import collective_hook, driver_local
from agent.proc import ledger as _ledger
from schemas import DriverEnv, RunDir, Writer, WriterKind, names, records
from schemas.ledger_order import epoch_order as _epoch_order

__all__ = [
    "checkpoint",
    "connect_ray",
    "epoch_order",
    "ledger",
    "plan",
    "progress",
    "registry",
    "rendezvous",
    "run_file",
    "write_result",
]

_board: driver_local.BoardWriter | driver_local._NoBoard | None = None  # opened at the first call


def progress(step: int | None = None) -> None:
    """Tell the agent the driver made progress (an optimizer step, a rollout batch), optionally
    with its step number. Node-local and cheap (a store into a shared page, no system call): call
    it as often as you like. Without a call for [driver] progress_timeout the run ends as `hang`,
    with every process's stacks recorded. Outside a run the agent started it does nothing."""
    board = _board
    if board is None:
        board = _open_board()
    board.progress(step)


def ledger(step: int, ids: _ledger.SampleIds, epoch: int = 0) -> None:
    """Record which sample ids the optimizer step `step` trained on, in order (str or int ids, as
    in the file [driver.ledger] order names; `epoch`: which pass over that order they belong to).
    Also counts as progress(step). Node-local and cheap: the line is queued in memory and appended
    to ledger-RANK.jsonl in the run directory at most once a second and at exit. Outside a run the
    agent started it only checks its arguments."""
    at = _whole("ledger", step)
    _ledger.writer().step(at, _ledger.ledger_ids(ids), _whole("ledger", epoch, "epoch"))
    progress(at)


def checkpoint(step: int) -> None:
    """Record that a checkpoint saved after step `step` is complete (call it once the checkpoint is
    on disk): the next attempt may resume from it. Writes the ledger through to the run directory
    before returning, so every step up to this one is on record."""
    _ledger.writer().checkpoint(_whole("checkpoint", step))


def epoch_order(count: int, seed: int, epoch: int) -> Any:
    """The order of epoch `epoch` under [driver.ledger] shuffle_seed = `seed`, for a dataset of `count`
    ids: a numpy array whose k-th entry is the line (0-based) of the order file the epoch yields k-th.
    A sampler that yields that order is one the audit can check (schemas/ledger_order.py)."""
    return _epoch_order(count, seed, epoch)


def _whole(call: str, value: object, name: str = "step") -> int:
    """An int >= 0 (a numpy or torch integer too), or TypeError naming the argument."""
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = -1
    if isinstance(value, bool) or number < 0:
        raise TypeError(f"{call}(): {name} must be an int >= 0, not {value!r}")
    return number


def _open_board() -> driver_local.BoardWriter | driver_local._NoBoard:
    global _board
    _board = driver_local.board()  # the one of this process (the judge client library records there too)
    return _board


def _forget_board() -> None:
    global _board
    _board = None  # a forked child counts under its own pid


os.register_at_fork(after_in_child=_forget_board)


def _arm_stack_dump() -> None:
    folder = os.environ.get(DriverEnv.STACK_DUMP_DIR)
    if folder and os.path.isdir(folder):
        driver_local.arm_stack_dump(folder)


_arm_stack_dump()


def _arm_collective_trace() -> None:
    # [driver] collective_trace: answer for this process's Flight Recorder on a hang. The hook never
    # imports torch; a process that never imports torch.distributed answers that it has none.
    folder = os.environ.get(DriverEnv.STACK_DUMP_DIR)
    if os.environ.get(DriverEnv.COLLECTIVE_TRACE) == "1" and folder and os.path.isdir(folder):
        collective_hook.arm(folder)


_arm_collective_trace()


def rendezvous() -> tuple[str, int] | None:
    """(host, port) for a trainer's torch.distributed rendezvous: the driver's node and a port the
    agent holds for it (its Ray block's spare port). None without Ray."""
    raw = os.environ.get(DriverEnv.TRAINER_RENDEZVOUS)
    if not raw:
        return None
    host, _, port = raw.rpartition(":")
    return host, int(port)


def connect_ray(**kwargs: Any) -> Any:
    """ray.init() against this run's cluster, as a driver on this node's own Ray address."""
    import ray

    return ray.init(
        address=os.environ[DriverEnv.RAY_ADDRESS], _node_ip_address=os.environ[DriverEnv.NODE_ADDRESS], **kwargs
    )


def run_file() -> Path | None:
    """The user's run file, byte for byte (set when the spec was loaded from a file)."""
    path = os.environ.get(DriverEnv.RUN_FILE)
    return Path(path) if path else None


def plan() -> dict[str, Any]:
    """The plan as JSON, plus `addresses`: the address that owns each planned node."""
    doc: dict[str, Any] = json.loads(os.environ[DriverEnv.PLAN])
    return doc


def registry() -> dict[str, Any]:
    """registry.json: judges (with endpoints), rubrics (with digests), bindings. Empty without judges."""
    raw = os.environ.get(DriverEnv.REGISTRY)
    return json.loads(raw) if raw else {"judges": {}, "rubrics": {}, "bindings": {}}


def write_result(**fields: Any) -> dict[str, Any]:
    """Write driver-result.json: the driver's own evidence (steps, finite loss, refreshes, judge replies)."""
    body = records.driver_result_fields(fields)
    run = RunDir.open(Path(os.environ[DriverEnv.RUN_DIR]))
    writer = Writer(
        os.environ[DriverEnv.FINGERPRINT],
        int(os.environ[DriverEnv.RANK]),
        os.environ[DriverEnv.INCARNATION],
        kind=WriterKind.DRIVER,
    )
    try:
        return run.write_artifact(names.DRIVER_RESULT, writer, body)
    finally:
        run.close()
