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
import socket
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from launch.config import JudgeConfig
from launch.data_check import DataError, check_data
from launch.sglang_argv import judge_command
from schemas import names

from . import clock
from .failure import Failure
from .judges.bindings import clients_from_registry, rubrics_from_registry
from .judges.canary import run_canaries
from .judges.engine_health import EngineHealthRegistry, EngineStatus
from .judges.prepared import prove_revision
from .judges.reference_server import read_port_file
from .judges.rubrics import resolve_rubric
from .procgroup import ProcessGroup
from .supervisor import ExitPolicy, child_env

if TYPE_CHECKING:
    from .lifecycle import Agent

CANARY_REPETITIONS = 3  # known-good must beat known-bad every time: one lucky sample proves little
HEALTH_FAILURES = 3
SPAWN_ATTEMPTS = 3
PORT_RACE_MARKERS = ("address already in use", "eaddrinuse", "errno 98")


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
    started: float = 0.0


class JudgeRuntime:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.local: dict[str, LocalJudge] = {}
        self.health: EngineHealthRegistry | None = None
        self.registry: dict[str, Any] | None = None
        self._tmp: str | None = None

    # -- data -------------------------------------------------------------------------------------

    def check_data(self) -> str:
        """Every judge-graded verifier in the data has a binding (before any GPU work)."""
        cfg = self.agent.config
        if not (cfg.data.train or cfg.data.eval):
            return "no [data]"
        bindings = {b.verifier: {"judge": b.judge, "rubric": b.rubric} for b in cfg.bindings}
        try:
            report = check_data(*cfg.data_paths(), bindings)
        except DataError as exc:
            raise self.agent.fail("data", str(exc)) from None
        if not report.ok:
            raise self.agent.fail("data", "; ".join(p.message for p in report.problems))
        unused = f"; bindings unused by the data: {', '.join(report.unused_bindings)}" if report.unused_bindings else ""
        rows = sum(f.rows for f in report.files)
        return f"{rows} rows, {len(report.judged_verifiers)} judge-graded verifier(s){unused}"

    # -- managed judges on this node --------------------------------------------------------------

    def start_local(self) -> int:
        a = self.agent
        node = a.node
        assert node is not None
        if not node.judges:
            return 0
        for name in node.judges:
            judge_cfg = a.config.judges[name]
            if judge_cfg.backend == "sglang" and judge_cfg.revision and judge_cfg.prepared_dir:
                # The pinned revision must mean something at run time: refuse other weights.
                proof = prove_revision(judge_cfg.prepared_dir, judge_cfg.revision)
                if not proof.ok:
                    raise a.fail("judge", f"judge {name}: {proof.detail}")
        self._tmp = tempfile.mkdtemp(prefix="gj-", dir="/tmp" if os.path.isdir("/tmp") else None)
        assert a.supervisor is not None
        a.supervisor.tell_reaper(f"tmp {self._tmp}")  # removed by the reaper if we are SIGKILLed
        vis = a.ident.visible_devices
        for name in node.judges:
            devices = list(node.judge_devices[name])
            judge = LocalJudge(
                a.config.judges[name],
                devices,
                ",".join(vis[i] for i in devices),
                f"{self._tmp}/{name}.port.json",
                names.judge_log(name, a.rank),
            )
            self.local[name] = judge
            self._spawn(judge)
        return len(self.local)

    def _spawn(self, j: LocalJudge) -> None:
        a = self.agent
        j.attempts += 1
        j.exits.clear()
        j.port = None
        port = 0 if j.config.backend == "reference" else _free_port(a.ident.address)
        cmd = judge_command(j.config, host=a.ident.address, port=port, port_file=j.port_file)
        if j.config.backend != "reference":
            j.port = port
        j.argv = list(cmd.argv)
        env = child_env({**dict(cmd.env), "CUDA_VISIBLE_DEVICES": j.cuda_visible_devices})
        assert a.supervisor is not None
        # On probation until healthy: an early exit may be a lost port race, retried below.
        j.group = a.supervisor.start(
            f"judge-{j.config.name}",
            j.argv,
            env=env,
            log_fd=a.run.open_log(j.log),
            policy=ExitPolicy("judge", j.log, on_exit=j.exits.append),
        )
        j.started = clock.mono()

    def wait_local_healthy(self) -> None:
        a = self.agent
        if not self.local:
            return
        probe = httpx.Client(timeout=2.0)
        try:
            for name, j in self.local.items():
                while not self._healthy_once(probe, j):
                    a.signal.raise_if_set()
                    if clock.mono() >= a.deadline:
                        raise a.fail(
                            "startup_timeout",
                            f"judge {name} did not answer /health within startup_timeout {a.coord.startup_timeout:g}s",
                            log=j.log,
                        )
                    time.sleep(min(0.5, a.coord.poll_interval))
                assert j.group is not None and a.supervisor is not None
                a.supervisor.set_policy(j.group, ExitPolicy("judge", j.log))
                self._write_endpoint(j, ready_after=clock.mono() - j.started)
        finally:
            probe.close()
        self._start_health_probes()

    def _healthy_once(self, probe: httpx.Client, j: LocalJudge) -> bool:
        a = self.agent
        if j.exits:
            code = j.exits[0]
            if j.attempts < SPAWN_ATTEMPTS and self._lost_port_race(j):
                self._spawn(j)
                return False
            raise a.fail(
                "judge",
                f"judge {j.config.name} exited with code {code} before it became healthy (attempt {j.attempts})",
                log=j.log,
            )
        if j.port is None:
            j.port = read_port_file(j.port_file)
            if j.port is None:
                return False
        try:
            return probe.get(f"http://{_host(a.ident.address)}:{j.port}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _lost_port_race(self, j: LocalJudge) -> bool:
        try:
            tail = self.agent.run.read_bytes(j.log)[-20000:].decode(errors="replace").lower()
        except OSError:
            return False
        return any(m in tail for m in PORT_RACE_MARKERS)

    def _endpoint(self, j: LocalJudge) -> str:
        return f"http://{_host(self.agent.ident.address)}:{j.port}"

    def _write_endpoint(self, j: LocalJudge, ready_after: float) -> None:
        a = self.agent
        assert j.group is not None and j.port is not None
        a.run.write_artifact(
            names.judge_endpoint(j.config.name, a.rank),
            "judge-endpoint",
            a.writer,
            {
                "name": j.config.name,
                "backend": j.config.backend or "sglang",
                "model": j.config.model,
                "endpoint": self._endpoint(j),
                "host": a.ident.address,
                "port": j.port,
                "pid": j.group.pid,
                "devices": j.devices,
                "argv": j.argv,
                "ready": True,
                "ready_after_s": round(ready_after, 3),
                "log": j.log,
            },
        )

    def _start_health_probes(self) -> None:
        a = self.agent
        interval = a.coord.heartbeat_interval

        def quarantined(status: EngineStatus) -> None:
            j = self.local[status.engine_id]
            a.signal.trip(
                Failure(
                    kind="judge_health",
                    cause=f"judge {status.engine_id} failed {HEALTH_FAILURES} consecutive /health probes "
                    f"(last: {status.last_error or 'no answer'})",
                    phase=a.log.phase_name(),
                    log=j.log,
                )
            )

        self.health = EngineHealthRegistry(
            failure_threshold=HEALTH_FAILURES,
            interval=interval,
            probe_timeout=max(1.0, min(5.0, 2 * interval)),
            on_quarantine=quarantined,
        )
        for name, j in self.local.items():
            self.health.register(name, self._endpoint(j))
        self.health.start()

    def stop(self) -> None:
        """Stop probing before the judges are stopped: their exit then is no health failure."""
        if self.health is not None:
            self.health.stop(timeout=5)
            self.health = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- registry and canaries (the driver's node) -------------------------------------------------

    def write_registry(self) -> str:
        a = self.agent
        cfg = a.config
        judges: dict[str, Any] = {}
        for j in cfg.bound_judges:
            entry: dict[str, Any] = {
                "mode": j.mode,
                "backend": j.backend,
                "model": j.model,
                "timeout": j.timeout,
                "max_context_length": j.max_context_length,
                "max_concurrent_calls": j.max_concurrent_calls,
            }
            if j.managed:
                index = a.plan.judge_node(j.name)
                assert index is not None
                rank = a.peers[index].rank
                rel = names.judge_endpoint(j.name, rank)
                doc: dict[str, Any] = {}

                def ready(rel: str = rel, doc: dict[str, Any] = doc) -> bool:
                    if not a.listed(rel):
                        return False
                    got = a.run.read_json(rel)
                    if got and got.get("ready") and got.get("fingerprint") == cfg.fingerprint:
                        doc.update(got)
                        return True
                    return False

                a.wait_for(f"judge {j.name}'s endpoint record from rank {rank}", ready)
                entry.update(endpoint=doc["endpoint"], rank=rank, devices=doc["devices"])
            else:
                entry.update(endpoint=j.endpoint, rank=None, devices=[])
            judges[j.name] = entry
        used = {b.rubric for b in cfg.bindings}
        rubrics = {}
        for name, r in cfg.rubrics.items():
            if name in used:
                table = {"profile": r.profile, "max_output_tokens": r.max_output_tokens, "temperature": r.temperature}
                rubrics[name] = {**table, "digest": resolve_rubric(name, table).profile.digest}
        bindings = {b.verifier: {"judge": b.judge, "rubric": b.rubric} for b in cfg.bindings}
        self.registry = {"judges": judges, "rubrics": rubrics, "bindings": bindings}
        a.run.write_artifact(names.REGISTRY, "registry", a.writer, self.registry)
        return f"{len(judges)} judge(s), {len(rubrics)} rubric(s), {len(bindings)} binding(s)"

    def run_canaries(self) -> str:
        a = self.agent
        registry = self.registry or {"judges": {}, "rubrics": {}, "bindings": {}}
        clients = clients_from_registry(registry)
        try:
            report = run_canaries(
                registry["bindings"], clients, rubrics_from_registry(registry), repetitions=CANARY_REPETITIONS
            )
        finally:
            for c in clients.values():
                c.close()
        a.run.write_artifact(names.CANARIES, "judge-canaries", a.writer, report.to_json())
        if not report.passed:
            logs = [self._judge_log(b.judge) for b in report.failures()]
            raise a.fail("canary", report.summary(), log=next((x for x in logs if x), None))
        return report.summary()

    def _judge_log(self, judge: str) -> str | None:
        a = self.agent
        index = a.plan.judge_node(judge)
        return names.judge_log(judge, a.peers[index].rank) if index is not None else None

    def driver_env(self) -> dict[str, str]:
        if self.registry is None:
            return {}
        return {
            "GYM_REGISTRY": json.dumps(self.registry, sort_keys=True),
            "GYM_REGISTRY_FILE": str(self.agent.run.path / names.REGISTRY),
        }


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _free_port(address: str) -> int:
    """A free port now. SGLang binds it minutes later; if someone took it meanwhile SGLang exits
    with EADDRINUSE and the judge is started again on a new port (see _lost_port_race)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])
