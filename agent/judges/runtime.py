"""The judge phases of the lifecycle: data check, managed judges, health, registry, canaries.

With no bound judge every step is a no-op. Managed judges (SGLang, or the project's reference
server) run in their own process groups with only their own devices visible, log to
`judge-NAME-RANK.log`, and are probed on `/health` (non-generating) on a connection pool of their
own; three consecutive failures fail the run — there is no reward-zero fallback.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from agent.coord.context import RunContext
from agent.coord.topology import Topology
from agent.ground import clock
from agent.ground.failure import Failure
from agent.ground.waits import poll_until
from agent.judges import _judge_ports as judge_ports
from agent.judges._gateways import LocalGateways
from agent.judges._health_gate import health_deadline
from agent.judges._policy import PolicyRuntime
from agent.judges._prepared import prove_revision
from agent.judges.rubrics import RubricError, rubric_from_spec
from agent.proc import tempdirs
from agent.proc.procgroup import ProcessGroup
from agent.proc.segments import group_segments, release_segments
from agent.proc.supervisor import ExitPolicy, child_env
from launch.spec.data_check import DataError, check_data, spec_bindings
from launch.spec.miles_handoff import judge_registry_json, openai_base
from launch.spec.sections import JudgeConfig
from launch.spec.sglang_argv import judge_command
from launch.spec.vllm_argv import ENGINE_PYTHON_ENV
from schemas import DriverEnv, FailureKind, names, records
from schemas.safe_io import RunDirError

if TYPE_CHECKING:
    from agent.judges._canary_watch import CanaryRound, CanaryWatch
    from agent.judges._engine_health import EngineHealthRegistry, EngineStatus

__all__ = ["CANARY_REPETITIONS", "HEALTH_FAILURES", "JudgeRuntime", "LocalJudge", "SPAWN_ATTEMPTS"]

CANARY_REPETITIONS = 3  # known-good must beat known-bad every time: one lucky sample proves little
HEALTH_FAILURES = 3
SPAWN_ATTEMPTS = 3  # starts of a judge that lost its ports to another process (judge_ports)
ENGINES = ("sglang", "vllm")  # real inference engines (the reference judge is the project's own)
# What vLLM's API server logs once its EngineCore is gone (it then answers /health with 503).
ENGINE_DEATH_MARKERS = ("engine core exited unexpectedly", "EngineDeadError", "EngineCore encountered an issue")
ENGINE_DEATH_SCAN = 1 << 20  # bytes of the judge log's end read for them
# SIGTERM to vLLM's API server alone stops its EngineCore, workers and resource tracker in order (2.5-3 s,
# /dev/shm clean); SIGTERM to the whole group at once let the tracker die first, leaving semaphores.
ENGINE_STOP_LEADER = ("vllm",)


@dataclass
class LocalJudge:
    """A managed judge this node hosts."""

    config: JudgeConfig
    devices: list[int]
    cuda_visible_devices: str
    port_file: str
    log: str
    group: ProcessGroup | None = None
    port: int | None = None
    argv: list[str] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    attempts: int = 0
    given: list[int] = field(default_factory=list)  # the --port of every start so far (never reused)
    started: float = 0.0
    log_start: int = 0  # where this start's part of the log begins (earlier starts' lines are not its)
    segments: set[str] = field(default_factory=set)  # /dev/shm files its processes mapped (agent/proc/segments.py)
    last_check: str | None = None  # what its health check got last while starting (for the failure's cause)


class JudgeRuntime:
    """The judge steps of one agent. Sees the run context and, after plan agreement, the
    topology; never the Agent itself."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.local: dict[str, LocalJudge] = {}
        self.health: EngineHealthRegistry | None = None
        self.registry: dict[str, Any] | None = None
        self.miles_registry: str | None = None  # OI_MILES_JUDGE_REGISTRY, once the endpoints are known
        self.gateways = LocalGateways(ctx)
        self.watch: CanaryWatch | None = None
        self._canaries: dict[str, Any] | None = None  # judge-canaries.json's body, rounds added as they come
        self._gateway_endpoints: dict[str, str] = {}
        self._epochs: dict[str, int] = {}
        self._tmp: str | None = None
        self.policy = PolicyRuntime(ctx, HEALTH_FAILURES)  # started, gated and stopped with the judges; never graded

    # -- data -------------------------------------------------------------------------------------

    def check_data(self) -> str:
        """Every judge-graded verifier in the data has a binding (before any GPU work)."""
        cfg = self.ctx.config
        if not (cfg.data.train or cfg.data.eval):
            return "no [data]"
        bindings = spec_bindings(cfg)
        try:
            report = check_data(*cfg.data_paths(), bindings)
        except DataError as exc:
            raise self.ctx.fail(FailureKind.DATA, str(exc)) from None
        if not report.ok:
            raise self.ctx.fail(FailureKind.DATA, "; ".join(p.message for p in report.problems))
        rows = sum(f.rows for f in report.files)  # a passing check has no unused binding (each is a problem)
        return f"{rows} rows, {len(report.judged_verifiers)} judge-graded verifier(s)"

    # -- managed judges on this node --------------------------------------------------------------

    def start_local(self, topo: Topology) -> str:
        ctx = self.ctx
        node = topo.node
        for name in node.judges:
            judge_cfg = ctx.config.judges[name]
            if judge_cfg.backend in ENGINES and judge_cfg.revision and judge_cfg.prepared_dir:
                # The pinned revision must mean something at run time: refuse other weights.
                proof = prove_revision(judge_cfg.prepared_dir, judge_cfg.revision)
                if not proof.ok:
                    raise ctx.fail(FailureKind.JUDGE, f"judge {name}: {proof.detail}", judge=name)
        # Gateways: beside this node's managed judges, and here for the external ones on the driver's node.
        gateways = [ctx.config.judges[n] for n in node.judges] + (
            [j for j in ctx.config.bound_judges if not j.managed] if topo.is_driver_node else []
        )
        if node.judges or gateways:
            self._tmp = tempdirs.make(tempdirs.JUDGE_PREFIX)
            ctx.reaper.temp_dir(self._tmp)  # removed by the reaper if we are SIGKILLed
        vis = ctx.visible_devices
        for name in node.judges:
            devices = list(node.judge_devices[name])
            judge = LocalJudge(
                ctx.config.judges[name],
                devices,
                ",".join(vis[i] for i in devices),
                f"{self._tmp}/{name}.port.json",
                names.judge_log(name, ctx.rank),
            )
            self.local[name] = judge
            self._spawn(judge)
        if gateways:
            assert self._tmp is not None
            self.gateways.start(gateways, self._tmp)
        policy = self.policy.start(topo)
        return f"{len(self.local)} managed judge(s), {len(gateways)} gateway(s) on this node" + (
            f"; {policy}" if policy else ""
        )

    def _spawn(self, j: LocalJudge) -> None:
        ctx = self.ctx
        j.attempts += 1
        j.exits.clear()
        j.port = None
        try:
            # The reference server binds port 0 itself and publishes it: no window to guard.
            port = (
                0
                if j.config.backend == "reference"
                else judge_ports.reserve(j.config, ctx.run.path.name, j.attempts, avoid=frozenset(j.given))
            )
        except OSError as exc:
            raise ctx.fail(
                FailureKind.PORTS,
                f"no free ports for judge {j.config.name} on {ctx.address}: {exc.strerror or exc}",
                judge=j.config.name,
            ) from None
        # An engine may live in an interpreter of its own (a venv or image beside the agent's).
        python = os.environ.get(ENGINE_PYTHON_ENV) if j.config.backend in ENGINES else None
        cmd = judge_command(j.config, host=ctx.address, port=port, port_file=j.port_file, python=python or None)
        if j.config.backend != "reference":
            j.port = port
            j.given.append(port)
        proc = ctx.service_process(f"judges.{j.config.name}", j.config, cmd.argv, j.cuda_visible_devices)
        j.argv = list(proc.argv)
        extra = {**dict(cmd.env), **proc.env, "CUDA_VISIBLE_DEVICES": j.cuda_visible_devices}
        if j.config.backend in ENGINES and self._tmp is not None:
            # An engine's own temp files (vLLM's file:// rendezvous, its sockets) go where the agent
            # removes them: /tmp kept vLLM's vllm_dist_* files after a clean exit.
            extra["TMPDIR"] = self._tmp
        env = child_env(extra)
        log_fd = ctx.run.open_log(j.log)
        j.log_start = os.fstat(log_fd).st_size
        # On probation until healthy: an early exit may be a lost port race, retried below.
        j.group = ctx.supervisor.start(
            f"judge-{j.config.name}",
            j.argv,
            env=env,
            log_fd=log_fd,
            policy=ExitPolicy(FailureKind.JUDGE, j.log, on_exit=j.exits.append, judge=j.config.name),
            term_leader_only=j.config.backend in ENGINE_STOP_LEADER,
        )
        j.started = clock.mono()

    def wait_local_healthy(self) -> str:
        """Every local judge answers /health (probed through the health registry's own pool),
        then the registry keeps probing them for the rest of the run."""
        ctx = self.ctx
        policy = self.policy.wait_ready()
        if not self.local:
            return policy
        self.health = self._new_health_registry()
        poll = min(0.5, ctx.config.coordination.poll_interval)
        for name, j in self.local.items():
            progress = ctx.progress(self._loading_line(name, j))
            deadline, bound = health_deadline(ctx, j.config, j.started)
            if not poll_until(
                partial(self._healthy_once, j),
                deadline=deadline,
                interval=poll,
                signal=ctx.signal,
                progress=progress,
            ):
                from agent.judges._engine_health import health_check_cause

                url = self._endpoint(j) + j.config.health_path if j.port is not None else j.config.health_path
                where = f"node {ctx.rank} ({ctx.address})"
                cause = health_check_cause(f"judge {name}", url, where, j.last_check, clock.mono() - j.started, bound)
                raise ctx.fail(FailureKind.STARTUP_TIMEOUT, cause, log=j.log, judge=name)
            assert j.group is not None
            ctx.supervisor.set_policy(j.group, ExitPolicy(FailureKind.JUDGE, j.log, judge=name))
            self.gateways.point_at(name, self._endpoint(j))
            self._write_endpoint(j, ready_after=clock.mono() - j.started)
            j.segments |= group_segments(j.group.session)
        self.health.start()
        return policy

    @staticmethod
    def _loading_line(name: str, j: LocalJudge) -> Callable[[float], str]:
        def line(left: float) -> str:
            return f"judge {name}: loading, {clock.mono() - j.started:.0f} s; {left:.0f} s left"

        return line

    def _exited(self, j: LocalJudge, kind: FailureKind, cause: str, code: int) -> Exception:
        """The run's failure for judge ``j``, which exited before it became healthy: its log, its exit
        code and its process group."""
        child = j.group.name if j.group is not None else None
        return self.ctx.fail(kind, cause, log=j.log, exit_code=code, child=child, judge=j.config.name)

    def _healthy_once(self, j: LocalJudge) -> bool:
        ctx = self.ctx
        assert self.health is not None
        if j.exits:
            code = j.exits[0]
            lost = self._lost_port_race(j)
            if lost and j.attempts < SPAWN_ATTEMPTS:
                self._spawn(j)
                self._epochs.pop(j.config.name, None)
                return False
            if lost:
                assert j.port is not None
                raise self._exited(
                    j,
                    FailureKind.PORTS,
                    f"judge {j.config.name} lost its ports to another process on every one of {j.attempts} starts; "
                    f"the last was given {judge_ports.describe(j.config, j.port)} on {ctx.address} and logged: {lost}",
                    code,
                )
            raise self._exited(
                j,
                FailureKind.JUDGE,
                f"judge {j.config.name} exited with code {code} before it became healthy (attempt {j.attempts})",
                code,
            )
        if j.port is None:
            from agent.judges._port_file import read_port_file

            j.port = read_port_file(j.port_file)
            if j.port is None:
                j.last_check = "no port yet (the server has not published one)"
                return False
        name, path = j.config.name, j.config.health_path
        if name not in self._epochs:
            self._epochs[name] = self.health.register(name, self._endpoint(j), path)
        # A failed probe while starting is no health failure (the judge is still loading): only
        # a success is recorded, which makes the engine healthy in the registry.
        result = self.health.probe(name, self._epochs[name], self._endpoint(j), path)
        if not result.ok:
            j.last_check = result.error
            return False
        # Healthy is not yet serving: the engine is ready once /v1/models lists its served name.
        if not self._serves_model(j):
            j.last_check = f"a 2xx answer, but /v1/models does not list {j.config.model!r} yet"
            return False
        self.health.record(result)
        return True

    def _serves_model(self, j: LocalJudge) -> bool:
        """Does the judge's /v1/models list its model? False while it cannot say; a list without
        it fails the run (the server serves something else)."""
        from agent.judges.client import JudgeClient, JudgeError

        client = JudgeClient(self._endpoint(j), j.config.model, timeout=5.0, max_retries=0)
        try:
            listed = client.list_models()
        except JudgeError:
            return False
        finally:
            client.close()
        if j.config.model not in listed:
            raise self.ctx.fail(
                FailureKind.JUDGE,
                f"judge {j.config.name}'s /v1/models lists {listed}, not its model {j.config.model!r}",
                log=j.log,
                judge=j.config.name,
            )
        return True

    def _new_health_registry(self) -> EngineHealthRegistry:
        # The judge client (httpx) is imported only by a node that serves judges: an agent
        # without judges stays small (README, "Performance").
        from agent.judges._engine_health import agent_registry, quarantine_cause

        ctx = self.ctx

        def quarantined(status: EngineStatus) -> None:
            j = self.local[status.engine_id]
            died = self._engine_died(j)
            if died is not None:
                # Not a judge that stopped answering: its engine is gone and its server says so.
                cause = f"judge {status.engine_id}'s engine died; its server logged: {died}"
                ctx.signal.trip(
                    Failure(kind=FailureKind.JUDGE, cause=cause, phase=ctx.phase(), log=j.log, judge=j.config.name)
                )
                return
            ctx.signal.trip(
                Failure(
                    kind=FailureKind.JUDGE_HEALTH,
                    cause=quarantine_cause(f"judge {status.engine_id}", status, HEALTH_FAILURES),
                    phase=ctx.phase(),
                    log=j.log,
                    judge=status.engine_id,
                )
            )

        return agent_registry(ctx.config.coordination.heartbeat_interval, HEALTH_FAILURES, quarantined)

    def _engine_died(self, j: LocalJudge) -> str | None:
        """The line of this start's log where the server says its engine process died (vLLM keeps
        serving /health with 503 after its EngineCore exits), or None."""
        try:
            part = self.ctx.run.read_bytes(j.log)[j.log_start :][-ENGINE_DEATH_SCAN:]
        except OSError:
            return None
        for line in part.decode(errors="replace").splitlines():
            if any(m in line for m in ENGINE_DEATH_MARKERS):
                return line.strip()[: judge_ports.MAX_LINE]
        return None

    def _lost_port_race(self, j: LocalJudge) -> str | None:
        """The line of this start's log saying a port was taken (only SGLang's ports are the
        agent's choice: the reference server binding port 0 never loses one)."""
        if j.config.backend == "reference":
            return None
        try:
            part = self.ctx.run.read_bytes(j.log)[j.log_start :]
        except OSError:
            return None
        return judge_ports.lost_race(part.decode(errors="replace"))

    def _endpoint(self, j: LocalJudge) -> str:
        return f"http://{_host(self.ctx.address)}:{j.port}"

    def _write_endpoint(self, j: LocalJudge, ready_after: float) -> None:
        ctx = self.ctx
        assert j.group is not None and j.port is not None
        fields = records.judge_endpoint_fields(
            name=j.config.name,
            backend=j.config.backend or "sglang",
            model=j.config.model,
            endpoint=self._endpoint(j),
            host=ctx.address,
            port=j.port,
            pid=j.group.pid,
            devices=j.devices,
            argv=j.argv,
            ready_after_s=ready_after,
            log=j.log,
        )
        ctx.run.write_artifact(names.judge_endpoint(j.config.name, ctx.rank), ctx.writer, fields)

    def stop(self) -> None:
        """Stop probing before the judges are stopped: their exit then is no health failure."""
        self.stop_canary_watch()
        self.policy.stop()
        for j in self.local.values():
            if j.group is not None:
                j.segments |= group_segments(j.group.session)  # the last look while its engine runs
        if self.health is not None:
            self.health.stop(timeout=5)
            self.health = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def release_segments(self) -> None:
        """Once every engine here has ended: remove the /dev/shm files they mapped that nothing maps
        now (a killed engine cannot unlink its own)."""
        names = set(self.policy.segments).union(*(j.segments for j in self.local.values()))
        removed = release_segments(names)
        if removed:
            self.ctx.out(f"removed {len(removed)} /dev/shm file(s) the engines left: {', '.join(removed)}")

    # -- registry and canaries (the driver's node) -------------------------------------------------

    def write_registry(self, topo: Topology) -> str:
        ctx = self.ctx
        cfg = ctx.config
        judges: dict[str, Any] = {}
        for j in cfg.bound_judges:
            # Every client of the run talks to the judge through its gateway; `upstream` is the judge itself.
            if j.managed:
                rank, doc = self._endpoint_record(topo, j)
                where: dict[str, Any] = {"upstream": doc["endpoint"], "rank": rank, "devices": doc["devices"]}
            else:
                where = {"upstream": j.endpoint, "rank": None, "devices": []}
            judges[j.name] = records.registry_judge(
                mode=j.mode,
                backend=j.backend,
                model=j.model,
                timeout=j.timeout,
                max_context_length=j.max_context_length,
                context_check=j.context_check,
                max_concurrent_calls=j.max_concurrent_calls,
                endpoint=self.gateway_endpoint(j.name),
                **where,
            )
        used = {b.rubric for b in cfg.bindings}
        rubrics = {}
        for name, r in cfg.rubrics.items():
            if name in used:
                # A template file is read again here and must still match its pin: the file may
                # have changed since gym-launch validated the spec.
                try:
                    rubrics[name] = rubric_from_spec(name, r.table(cfg.spec.base_dir)).to_json()
                except RubricError as exc:
                    raise ctx.fail(FailureKind.DATA, str(exc)) from None
        judging = cfg.judging
        self.registry = records.registry_fields(
            judges=judges,
            rubrics=rubrics,
            bindings={b.verifier: (b.judge, b.rubric) for b in cfg.bindings},
            # What the driver's judge client library applies: agent/judges/_grade_log.py and _alarm.py.
            judging={
                "grades_max_bytes": judging.grades_max_bytes,
                "grades_keep": judging.grades_keep,
                "degraded_window": judging.degraded_window,
                "degraded_max_share": judging.degraded_max_share,
            },
        )
        bindings = self.registry["bindings"]
        ctx.run.write_artifact(names.REGISTRY, ctx.writer, self.registry)
        self.handoff_registry(topo)
        return f"{len(judges)} judge(s), {len(rubrics)} rubric(s), {len(bindings)} binding(s)"

    def _endpoint_record(self, topo: Topology, j: JudgeConfig) -> tuple[int, dict[str, Any]]:
        """The rank hosting managed judge ``j`` and its endpoint record, once it is ready (waits
        within the startup deadline)."""
        ctx = self.ctx
        index = ctx.plan.judge_node(j.name)
        assert index is not None
        rank = topo.rank_of_node(index)
        rel = names.judge_endpoint(j.name, rank)
        doc: dict[str, Any] = {}

        def ready() -> bool:
            if not ctx.listed(rel):
                return False
            got = ctx.run.read_json(rel)
            if got and got.get("ready") and got.get("fingerprint") == ctx.config.fingerprint:
                doc.update(got)
                return True
            return False

        ctx.wait_startup(f"judge {j.name}'s endpoint record from rank {rank}", ready)
        return rank, doc

    def gateway_endpoint(self, judge: str) -> str:
        """Judge's gateway (``gateway-NAME.json``), the URL every client is given; waits within the
        startup deadline for its host to publish it (it is started with the judge, before Ray)."""
        if judge not in self._gateway_endpoints:
            ctx = self.ctx
            rel = names.gateway_record(judge)
            doc: dict[str, Any] = {}

            def published() -> bool:
                if not ctx.listed(rel):
                    return False
                got = ctx.run.read_json(rel)
                if got and got.get("fingerprint") == ctx.config.fingerprint:
                    doc.update(got)
                    return True
                return False

            ctx.wait_startup(f"judge {judge}'s gateway record", published)
            self._gateway_endpoints[judge] = str(doc["endpoint"])
        return self._gateway_endpoints[judge]

    def handoff_registry(self, topo: Topology) -> str | None:
        """``OI_MILES_JUDGE_REGISTRY`` (launch/spec/miles_handoff.py): the bound judges with their
        gateways as endpoints; None without bindings. Built once: the driver's environment and this
        node's ``ray start`` get the same value. Gateways publish their address while their judges
        still load, so this waits for no judge's health."""
        cfg = self.ctx.config
        if not cfg.bindings:
            return None
        if self.miles_registry is None:
            endpoints = {j.name: self.gateway_endpoint(j.name) for j in cfg.bound_judges}
            self.miles_registry = judge_registry_json(cfg, endpoints)
        return self.miles_registry

    def ray_env(self, topo: Topology) -> dict[str, str]:
        """What this node's ``ray start`` adds for the judges' clients in Ray actors."""
        registry = self.handoff_registry(topo)
        return {DriverEnv.MILES_JUDGE_REGISTRY: registry} if registry is not None else {}

    def run_canaries(self, topo: Topology) -> str:
        ctx = self.ctx
        registry = self.registry or {"judges": {}, "rubrics": {}, "bindings": {}}
        from agent.judges._bindings import clients_from_registry, rubrics_from_registry
        from agent.judges._canary import run_canaries
        from agent.judges._gateway import CANARY_HEADER

        # Canaries are in judge-canaries.json only, and marked for the gateway: not training grades.
        clients = clients_from_registry(registry, recorder=None, headers={CANARY_HEADER: "1"})
        off = {j.name for j in ctx.config.bound_judges if not j.canary}
        checked = {v: b for v, b in registry["bindings"].items() if str(b["judge"]) not in off}
        try:
            report = run_canaries(checked, clients, rubrics_from_registry(registry), repetitions=CANARY_REPETITIONS)
        finally:
            for c in clients.values():
                c.close()
        self._canaries = report.to_json()
        ctx.run.write_artifact(names.CANARIES, ctx.writer, self._canaries)
        if not report.passed:
            failed = report.failures()
            logs = [self._judge_log(topo, b.judge) for b in failed]
            judges = {b.judge for b in failed}
            raise ctx.fail(
                FailureKind.CANARY,
                report.summary(),
                log=next((x for x in logs if x), None),
                judge=next(iter(judges)) if len(judges) == 1 else None,
            )
        if off:
            return f"{report.summary()}; canary = false for judge(s) {', '.join(sorted(off))}: grades unchecked"
        return report.summary()

    # -- canaries during the run (the driver's node) -----------------------------------------------

    def start_canary_watch(self) -> None:
        """Canary rounds every [judges.NAME] canary_interval while the driver runs (agent/judges/_canary_watch.py)."""
        cfg = self.ctx.config
        intervals = {j.name: j.canary_interval for j in cfg.bound_judges if j.canary}
        if self.registry is None or not cfg.bindings or not any(intervals.values()):
            return
        from agent.judges._canary_watch import CanaryWatch
        from agent.judges._gateway import CANARY_HEADER

        self.watch = CanaryWatch(
            self.registry,
            intervals,
            repetitions=CANARY_REPETITIONS,
            on_round=self._record_round,
            on_failure=self._degraded,
            headers={CANARY_HEADER: "1"},
        )
        self.watch.start()

    def stop_canary_watch(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None

    def _record_round(self, result: CanaryRound) -> None:
        from agent.judges._canary_watch import MAX_ROUNDS

        doc = self._canaries if self._canaries is not None else records.canaries_fields(passed=True, bindings=[])
        rounds: list[Any] = list(doc.get("rounds") or [])
        doc["rounds"] = [*rounds, result.to_json()][-MAX_ROUNDS:]
        try:
            self.ctx.run.write_artifact(names.CANARIES, self.ctx.writer, doc)
        except (OSError, RunDirError) as exc:
            self.ctx.out(f"canaries: cannot record the round of judge {result.judge}: {exc}")

    def _degraded(self, result: CanaryRound) -> None:
        from agent.judges._canary_watch import describe_failure

        failed = [b for b in result.bindings if not b.passed]
        self.ctx.signal.trip(
            Failure(
                kind=FailureKind.JUDGE_DEGRADED,
                cause=describe_failure(result),
                phase=self.ctx.phase(),
                judge=result.judge,
                binding=failed[0].verifier if failed else None,
            )
        )

    def _judge_log(self, topo: Topology, judge: str) -> str | None:
        index = self.ctx.plan.judge_node(judge)
        return names.judge_log(judge, topo.rank_of_node(index)) if index is not None else None

    def driver_env(self) -> dict[str, str]:
        if self.registry is None:
            return self.policy.driver_env()
        return {
            **self.policy.driver_env(),
            DriverEnv.REGISTRY: json.dumps(self.registry, sort_keys=True),
            DriverEnv.REGISTRY_FILE: str(self.ctx.run.path / names.REGISTRY),
            **({DriverEnv.MILES_JUDGE_REGISTRY: self.miles_registry} if self.miles_registry is not None else {}),
            **{
                DriverEnv.judge_url(name): openai_base(str(judge["endpoint"]))
                for name, judge in self.registry["judges"].items()
            },
        }


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
