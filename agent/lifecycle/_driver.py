"""The driver as lifecycle steps: its environment and command line, running it (on the driver's
node; the other nodes wait for that node's acknowledgement), completion and the acknowledgements.

Sees the run context and, after plan agreement, the topology; never the Agent itself.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from agent.coord.context import RunContext
from agent.coord.topology import Topology
from agent.ground import clock
from agent.ground.failure import Failure
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle._console_tee import ConsoleTee
from agent.lifecycle._driver_stop import DriverStop, await_driver_node
from agent.lifecycle._evidence_tail import EvidenceTail
from agent.lifecycle._progress_watch import ProgressThread, ProgressWatch, Sources, board_reader, evidence_source
from agent.preflight.runtime import driver_env_values
from agent.proc import collective_hook, driver_local
from agent.proc.supervisor import ExitPolicy, child_env
from agent.ray.runtime import RayRuntime
from schemas import DriverEnv, FailureKind, Phase, credentials, names, records

__all__ = ["DriverRuntime"]


class DriverRuntime:
    """The run steps of one agent: driver, complete, acknowledge."""

    def __init__(self, ctx: RunContext, judges: JudgeRuntime, ray: RayRuntime, replicas: int) -> None:
        self.ctx = ctx
        self.judges = judges
        self.ray = ray
        self.replicas = replicas
        self.tee: ConsoleTee | None = None  # exists once this node started the driver
        self._done = threading.Event()
        self._seconds = 0.0
        self._wrote_complete = False  # this node wrote complete.json (the driver's node)
        self.watch: ProgressWatch | None = None  # the driver's progress (the driver's node, once it runs)
        self._board: str | None = None  # the progress board's node-local path
        self._driver_pid: int | None = None  # said in the heartbeat while the driver runs (gym-launch status)
        # Called with the hang before it trips (the agent takes every process's stacks then).
        self.before_hang: Callable[[Failure], None] = lambda _failure: None

    # -- environment and command line -------------------------------------------------------------

    def env(self, topo: Topology) -> dict[str, str]:
        ctx = self.ctx
        run = ctx.run
        plan_json = ctx.plan.to_json()
        plan_json["addresses"] = [p.address for p in topo.peers]
        run.ensure_dir(names.CHECKPOINTS_DIR)  # one directory for every attempt of the run
        gcs = self.ray.gcs_address
        extra = {
            **(
                {DriverEnv.RAY_ADDRESS: gcs, DriverEnv.ray_address(ctx.config.ray.name): gcs}
                if ctx.config.ray.enabled
                else {}
            ),
            **self._miles_env(topo),
            DriverEnv.RUN_DIR: str(run.path),
            DriverEnv.RANK: str(ctx.rank),
            DriverEnv.NODE_INDEX: str(topo.node.index),
            DriverEnv.NODE_ADDRESS: ctx.address,
            DriverEnv.FINGERPRINT: ctx.config.fingerprint,
            DriverEnv.INCARNATION: ctx.writer.incarnation,
            DriverEnv.ATTEMPT: str(run.attempt),
            DriverEnv.CHECKPOINT_DIR: str(run.path / names.CHECKPOINTS_DIR),
            DriverEnv.PLAN: json.dumps(plan_json, sort_keys=True),
            DriverEnv.DRIVER_RESULT: str(run.path / names.DRIVER_RESULT),
            **({DriverEnv.PROGRESS_FILE: self._board} if self._board else {}),
            **({DriverEnv.STACK_DUMP_DIR: ctx.local_dir} if ctx.local_dir else {}),
            **collective_hook.env(
                ctx.config.driver.collective_trace, ctx.local_dir, {**os.environ, **ctx.config.driver.env}
            ),
            **self._rendezvous_env(),
            **({DriverEnv.STOP_FILE: str(run.path / names.DRIVER_STOP)} if self._grace() else {}),
            **self._run_file_env(),
            **self.judges.driver_env(),
            **self._spec_env(),
        }
        return child_env(extra)

    def _rendezvous_env(self) -> dict[str, str]:
        """GYM_TRAINER_RENDEZVOUS: this node and the spare port of its Ray block, for a trainer's
        torch.distributed rendezvous (the driver runs here)."""
        port = self.ray.rendezvous_port
        return {DriverEnv.TRAINER_RENDEZVOUS: f"{self.ctx.address}:{port}"} if port is not None else {}

    def _miles_env(self, topo: Topology) -> dict[str, str]:
        """What open-instruct's MILES launcher gives its trainer besides the judge registry: the
        replica's rank and count and, with Ray, this node's address and Ray's devices only."""
        ctx = self.ctx
        env = {DriverEnv.MILES_REPLICA_RANK: str(ctx.rank), DriverEnv.MILES_REPLICA_COUNT: str(self.replicas)}
        if ctx.config.ray.enabled:
            vis = ctx.visible_devices
            env[DriverEnv.RAY_NODE_IP_ADDRESS] = ctx.address
            env["CUDA_VISIBLE_DEVICES"] = ",".join(vis[i] for i in topo.node.ray_devices)
        return env

    def _run_file_env(self) -> dict[str, str]:
        """The user's run file, byte for byte, for a driver that reads it (a MILES trainer does)."""
        text = self.ctx.config.spec.source_text
        if text is None:
            return {}
        rel = names.run_file(text)
        if not self.ctx.listed(rel):
            try:
                self.ctx.run.write_bytes(rel, text.encode("utf-8"))
            except OSError as exc:  # a full disk found by this write first (issue 51: it was "internal")
                raise self.ctx.refused(exc, rel) from exc
        return {DriverEnv.RUN_FILE: str(self.ctx.run.path / rel)}

    def _spec_env(self) -> dict[str, str]:
        """``[driver] env``; a ``runtime:VAR`` value is VAR of the job's environment."""
        return driver_env_values(self.ctx.config.driver.env)

    def argv(self) -> tuple[list[str], bool]:
        """The driver's command line as the spec spells it (references kept), and whether it is one
        shell command: what the agent's log and status show."""
        cmd = self.ctx.config.driver.command
        if isinstance(cmd, str):
            return [cmd], True
        return list(cmd), False

    def exec_argv(self) -> tuple[list[str], bool]:
        """The command line the driver is exec'd with: each ``${runtime:NAME}`` its value (an argv)
        or the shell's own ``${NAME}`` (a shell string); nothing else sees it."""
        argv, shell = self.argv()
        if shell:
            return [credentials.shell_form(argv[0])], True
        return credentials.substitute(argv, os.environ), False

    # -- driver ----------------------------------------------------------------------------------

    def detail(self, topo: Topology) -> str:
        if not topo.is_driver_node:
            return f"supervising; the driver runs on node {self.ctx.plan.driver_node}"
        return " ".join(self.argv()[0])

    def exit_failure(self, code: int) -> Failure:
        """The one place the driver's non-zero exit becomes a failure. When its last grade went
        unanswered (a judge that accepts requests and never answers), the judge is named: the
        ending is the judge's (read from the node-local progress board: no I/O)."""
        cause = f"the driver exited with code {code}"
        reading = self._board_reading()
        judge = None
        if reading is not None and reading.unanswered is not None:
            outcome, judge = reading.unanswered
            cause += (
                f" after judge {judge} left its last grade unanswered ({outcome}: see its log and "
                f"{names.grades(self.ctx.rank)})"
            )
        return Failure(
            kind=FailureKind.DRIVER_EXIT,
            cause=cause,
            phase=str(Phase.DRIVER),
            log=names.driver_log(self.ctx.rank),
            exit_code=code,
            judge=judge or None,
        )

    def _board_reading(self) -> driver_local.BoardReading | None:
        if self._board is None:
            return None
        try:
            reader = driver_local.BoardReader(self._board)
        except OSError:
            return None
        try:
            return reader.read()
        finally:
            reader.close()

    def degraded_failure(self) -> Failure | None:
        """The degraded-judge alarm the driver's judge client library raised (judge_degraded-RANK.json,
        agent/judges/_alarm.py), as this run's failure; None while there is none. Read directly, not
        by listing: its writer (the driver) runs on this host, so no other client's cache is in the way."""
        ctx = self.ctx
        if not ctx.config.bindings:
            return None  # no verifier binding: no judge client in the driver, so no alarm (no read)
        rel = names.judge_degraded(ctx.rank)
        doc = ctx.run.read_json(rel, attempts=1)
        if doc is None or doc.get("fingerprint") != ctx.config.fingerprint or not isinstance(doc.get("binding"), str):
            return None
        shown = "; ".join(
            f"seq {b.get('seq')} {b.get('outcome')}: {b.get('excerpt')!r}"
            for b in doc.get("bad_replies") or []
            if isinstance(b, dict)
        )
        judge = doc.get("judge")
        return Failure(
            kind=FailureKind.JUDGE_DEGRADED,
            cause=f"judge degraded: binding {doc['binding']!r} (judge {judge}, rubric {doc.get('rubric')}): "
            f"{doc.get('bad')} of its last {doc.get('replies')} replies were invalid or truncated, more than "
            f"[judging] degraded_max_share {doc.get('max_share')} x degraded_window {doc.get('window')} allows "
            f"({rel}); {shown}",
            phase=str(Phase.DRIVER),
            log=names.driver_log(ctx.rank),
            judge=judge if isinstance(judge, str) else None,
            binding=doc["binding"],
        )

    def _trip_if_degraded(self) -> bool:
        failure = self.degraded_failure()
        if failure is None:
            return False
        self.ctx.signal.trip(failure)
        return True

    def arm_grace(self, topo: Topology) -> None:
        """From the moment the topology is known, a node without the driver waits for the driver's
        checkpoint before stopping: this node may still be starting (a slow judge, a loaded host)
        while the driver already runs, and its early exit would end the job's step, the driver
        with it (srun --kill-on-bad-exit)."""
        grace = self._grace()
        if grace and not topo.is_driver_node:
            poll = self.ctx.config.coordination.poll_interval
            self.ctx.supervisor.before_stop(partial(await_driver_node, self.ctx.run, self.ctx.signal, grace, poll))

    def run(self, topo: Topology) -> str:
        ctx = self.ctx
        if not topo.is_driver_node:
            # The driver's node acknowledges right after writing complete.json. Its ack is found by
            # listing acks/ (empty while the driver runs), not the large top-level directory:
            # O(1) per poll per agent instead of O(N). The checkpoint grace was armed by arm_grace.
            driver_ack = names.leaf(names.ack(topo.rank_of_node(ctx.plan.driver_node)))
            ctx.wait_unbounded(lambda: ctx.listed(driver_ack, names.ACKS_DIR), files=True)
            return ""
        argv, shell = self.exec_argv()
        t0 = clock.mono()

        def on_exit(code: int) -> None:
            # A driver that died of the alarm's exception failed because its judge degraded.
            if code != 0 and not self._trip_if_degraded():
                ctx.signal.trip(self.exit_failure(code))
            self._done.set()
            ctx.wake.set()  # the wait below may sleep a heartbeat interval

        evidence = EvidenceTail(ctx.run, ctx.config.driver.evidence) if ctx.config.driver.evidence.declared else None
        if ctx.local_dir is not None:
            self._board = os.path.join(ctx.local_dir, "progress")
            driver_local.create_board(self._board)
        self.judges.start_canary_watch()  # judges that drift during the run fail it (canary_interval)
        # driver-RANK.log keeps every byte; the console (the job log on Slurm/Beaker) gets each line
        # with a rank prefix (and the evidence's log pattern sees it).
        try:
            log_fd = ctx.run.open_log(names.driver_log(ctx.rank))
        except OSError as exc:
            raise ctx.refused(exc, names.driver_log(ctx.rank)) from exc
        tee = ConsoleTee(
            log_fd,
            f"[rank {ctx.rank} driver] ",
            on_line=evidence.log_line if evidence is not None else None,
        )
        self.tee = tee
        try:
            group = ctx.supervisor.start(
                "driver",
                argv,
                env=self.env(topo),
                log_fd=tee.write_fd,
                policy=ExitPolicy(FailureKind.DRIVER_EXIT, names.driver_log(ctx.rank), on_exit),
                shell=shell,
            )
        finally:
            tee.close_child_end()
        self._driver_pid = group.pid
        self._watch_progress(evidence, tee)
        grace = self._grace()
        if grace:
            stop = DriverStop(ctx.run, ctx.writer, ctx.signal, grace, ctx.out)
            ctx.supervisor.before_stop(partial(stop.wait_for, group))
        # The alarm fails the run even when the driver catches JudgeDegraded and goes on.
        # The alarm file is read once per heartbeat interval while the doorbell carries.
        ctx.wait_unbounded(lambda: self._done.is_set() or self._trip_if_degraded(), files=True)
        self._trip_if_degraded()  # written just before a clean exit, between two polls
        self.judges.stop_canary_watch()
        ctx.signal.raise_if_set()
        self._seconds = clock.mono() - t0
        return "exit 0"

    def _grace(self) -> float | None:
        return self.ctx.config.driver.checkpoint_grace

    # -- progress --------------------------------------------------------------------------------

    def _watch_progress(self, evidence: EvidenceTail | None, tee: ConsoleTee) -> None:
        """From the driver's start: its progress is watched; none for the bound is a hang."""
        sources = Sources(
            board=board_reader(self._board),
            evidence=evidence_source(evidence),
            output=lambda: tee.bytes,
            log_size=tee.log_size,
        )
        watch = ProgressWatch(self.ctx.config.driver, sources, self.ctx.rank)
        watch.start()
        self.watch = watch
        if self.ctx.config.driver.progress_timeout > 0:
            poll = self.ctx.config.coordination.poll_interval
            ProgressThread(watch, self.ctx.signal, poll, self._done, self.before_hang).start()

    def heartbeat_fields(self) -> dict[str, Any]:
        """The driver's node's heartbeat says how long the driver has made no progress (the other
        nodes read it when the scheduler's walltime warning comes) and the driver's pid (gym-launch status)."""
        watch, pid = self.watch, self._driver_pid
        if self._done.is_set():
            return {}
        return {
            **({"progress": watch.status()} if watch is not None else {}),
            **({"driver_pid": pid} if pid is not None else {}),
        }

    def stuck_at_walltime(self) -> Failure | None:
        """The driver's node, on the walltime warning: a stuck driver makes it a hang."""
        watch = self.watch
        if watch is None or self._done.is_set():
            return None
        watch.look()
        return watch.stuck_at_walltime()

    def drain(self, timeout: float) -> None:
        """Let the driver's last console lines (a traceback) through before the agent's own."""
        if self.tee is not None:
            self.tee.join(timeout)

    # -- complete and acknowledge ----------------------------------------------------------------

    def complete(self, topo: Topology) -> str:
        """The driver's node records completion; every other node confirms it can read it."""
        ctx = self.ctx
        if topo.is_driver_node:
            try:
                ctx.run.write_artifact(
                    names.COMPLETE,
                    ctx.writer,
                    records.complete_fields(driver_rank=ctx.rank, driver_seconds=self._seconds),
                )
            except OSError as exc:
                raise ctx.refused(exc, names.COMPLETE) from exc
            self._wrote_complete = True
            return ""
        if ctx.run.read_json(names.COMPLETE) is None:
            raise ctx.fail(FailureKind.INTERNAL, "the driver's node acknowledged but complete.json is unreadable")
        return ""

    def acknowledge(self) -> str:
        """This replica's ack, then every replica's (bounded by ack_timeout)."""
        ctx = self.ctx
        try:
            ctx.run.write_artifact(names.ack(ctx.rank), ctx.writer, records.ack_fields())
        except OSError as exc:
            raise ctx.refused(exc, names.ack(ctx.rank)) from exc
        if self._wrote_complete:
            ctx.notify_complete()  # the other nodes wait for this ack: wake them (doorbell)
        every_ack = {names.leaf(names.ack(r)) for r in range(self.replicas)}

        def all_acked() -> bool:
            return every_ack <= set(ctx.run.listdir(names.ACKS_DIR))

        ctx.wait_bounded(
            "an acknowledgement from every replica",
            all_acked,
            kind=FailureKind.ACK_TIMEOUT,
            timeout=ctx.config.coordination.ack_timeout,
        )
        return ""
