"""The end of every path: stop every process group, write the cleanup record, reap the reaper,
say the outcome. After a failure the record comes first: the teardown waits a moment for it,
then yields the CPU to peers still writing theirs; records a full disk refuses are retried."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from agent.coord.durable import local_dir
from agent.ground.failure import Failure
from agent.lifecycle._doorbell_link import DoorbellLink
from agent.lifecycle._failure_writer import FailureWriter
from agent.lifecycle._phase_log import PhaseLog
from agent.lifecycle._running import Running
from agent.lifecycle._state import StateMachine
from agent.lifecycle.init import Joined
from agent.lifecycle.steps import TEARDOWN
from agent.proc.cpu_priority import lower_priority
from agent.proc.procgroup import escaped_descendants, session_members
from schemas import AgentState, FailureKind, PhaseOutcome, RunOutcome, names, records

__all__ = ["RunResult", "Teardown", "stop_everything"]

RECORD_RETRY_S = 20.0  # how long refused records are retried (space may come back) before exit
FAILURE_WRITE_BUDGET_S = 5.0  # a hung shared filesystem must not stop us from killing children
LIVENESS_JOIN_S = 2.0  # bounded: a hung shared filesystem may hold its last heartbeat write
RECORD_FIRST_S = 1.0  # how long the rest of a failed teardown waits for the failure record first
TEE_DRAIN_S = 2.0


@dataclass(frozen=True)
class RunResult:
    """All-or-nothing outcome of one agent: it succeeded, or it failed with one recorded cause."""

    state: AgentState
    failure: Failure | None
    exit_code: int


def stop_everything(running: Running) -> list[dict[str, Any]]:
    """Stop every process group and thread this node started; the groups as the cleanup record has them."""
    supervisor = running.ctx.supervisor
    running.live.stop()
    running.judges.stop()
    records_ = supervisor.stop_all()
    running.judges.release_segments()  # what a killed engine could not unlink itself
    supervisor.halt()
    running.driver.drain(TEE_DRAIN_S)  # the driver's last lines (a traceback) reach the console first
    running.liveness.stop()
    # A heartbeat write in flight finishes (the process ends without finalization).
    running.liveness.join(LIVENESS_JOIN_S)
    running.ray.keep_session_logs()
    if running.ctx.local_dir is not None:
        shutil.rmtree(running.ctx.local_dir, ignore_errors=True)
    return [r.to_json() for r in records_]


class Teardown:
    def __init__(
        self, joined: Joined, states: StateMachine, log: PhaseLog, failure_writer: FailureWriter, bell: DoorbellLink
    ) -> None:
        self.run, self.writer, self.rank, self.out = joined.run, joined.writer, joined.ident.rank, joined.out
        self.states, self.log = states, log
        self.failure_writer = failure_writer  # its signal is the agent's
        self.bell = bell

    def succeeded(self, running: Running) -> RunResult:
        supervisor = running.ctx.supervisor
        supervisor.reaper.stopping()
        self.states.advance(AgentState.STOPPING)
        self.log.begin(TEARDOWN.phase)
        groups = stop_everything(running)
        self.run.write_artifact(
            names.cleanup(self.rank), self.writer, self._cleanup(RunOutcome.SUCCESS, running, groups)
        )
        self.log.end(detail=f"{len(groups)} process group(s) stopped")
        self.states.advance(AgentState.SUCCEEDED)
        supervisor.finish_reaper()
        _reap(running.reaper)
        self.out("SUCCEEDED")
        self._summary(None)
        return RunResult(AgentState.SUCCEEDED, None, 0)

    def failed(self, running: Running, failure: Failure) -> RunResult:
        supervisor = running.ctx.supervisor
        supervisor.reaper.stopping()  # heartbeats stop now: the reaper must not fence us
        # The failure record's writer started when the signal tripped; the rest of the teardown
        # waits a moment for it, so that in a failure wave records reach the disk before teardowns
        # compete for the CPU. The supervisor thread is stopping our children meanwhile. (The
        # signal's event is set once its listeners ran: the writer has started.)
        record = self.failure_writer
        record.signal.wait(RECORD_FIRST_S)
        record.join(RECORD_FIRST_S)
        if record.written():  # published: the rest of the teardown yields to peers' records
            lower_priority((running.reaper.pid,))
        self.log.end(PhaseOutcome.FAILED, failure.cause[:300])
        self.states.advance(AgentState.STOPPING)
        if failure.kind == FailureKind.DRIVER_EXIT:
            running.driver.drain(0.5)  # the driver's last words come before our verdict on it
        self.out(f"FAILED in {failure.phase or self.log.phase_name()}: {failure.kind}: {failure.cause}")
        groups = stop_everything(running)
        record.join(FAILURE_WRITE_BUDGET_S)
        running.stacks.write(record.keeper)  # taken before the first child was stopped
        record.keeper.write(names.cleanup(self.rank), self.writer, self._cleanup(RunOutcome.FAILURE, running, groups))
        self.states.advance(AgentState.FAILED)
        supervisor.finish_reaper()
        _reap(running.reaper)
        if record.keeper.pending and not record.keeper.flush(RECORD_RETRY_S):
            pending = sorted(record.keeper.pending)
            self.out(f"gave up writing {pending} to the run directory; see {local_dir(self.run)}")
        self._summary(failure)
        return RunResult(AgentState.FAILED, failure, 1)

    def _cleanup(self, outcome: RunOutcome, running: Running, groups: list[dict[str, Any]]) -> dict[str, Any]:
        """cleanup-RANK.json: the groups, what outlived them, the doorbell's and liveness' counts."""
        return records.cleanup_fields(
            outcome=outcome,
            groups=groups,
            leftover_pids=_leftovers(running, groups),
            extra={**self.bell.summary(), **_liveness_summary(running), **running.preflight.residue_fields()},
        )

    def _summary(self, failure: Failure | None) -> None:
        """The last lines of the job log: the outcome, the cause, and where to look next."""
        if failure is None:
            # An agent sees its own lifecycle, not whether the driver trained: the verdict is the audit's.
            self.out(f"summary: agents succeeded (the driver exited 0); the verdict: gym-audit {self.run.path}")
            return
        where = failure.phase or self.log.phase_name()
        self.out(f"summary: run FAILED; this replica: {failure.kind} in {where}: {failure.cause}")
        if failure.log:
            self.out(f"summary: log: {self.run.path / failure.log}")
        self.out(f"summary: the run's first cause and every rank's view: gym-audit {self.run.path}")


def _leftovers(running: Running, groups: list[dict[str, Any]]) -> list[int]:
    """Whatever still lives in a recorded session or escaped them all: never report a clean
    sweep that was not."""
    sessions = {int(g["session"]) for g in groups}
    left = [p.pid for sid in sessions for p in session_members(sid)]
    return sorted(set(left) | {p.pid for p in escaped_descendants(sessions, {running.reaper.pid})})


def _liveness_summary(running: Running) -> dict[str, Any]:
    """Heartbeat files that read corrupt while we watched them (the audit warns of them)."""
    corrupt = running.liveness.corrupt_heartbeats()
    return {"corrupt_heartbeats": {str(r): n for r, n in sorted(corrupt.items())}} if corrupt else {}


def _reap(reaper: subprocess.Popen[str]) -> None:
    try:
        reaper.wait(timeout=10)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()
