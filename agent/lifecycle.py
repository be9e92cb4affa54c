"""One replica's lifecycle: an explicit sequence of phases with a printable state.

rendezvous -> plan agreement -> devices -> placement -> judges start -> Ray start -> judge health
-> readiness (head) -> registry + canaries (driver node) -> driver -> complete -> acknowledge
-> teardown. Any failure (a child exits, the driver fails, SIGTERM/SIGINT, a peer's failure
record, a silent peer, the single startup deadline) writes this replica's failure record, stops
every local process group and writes its cleanup record; the agent then exits non-zero.
"""

from __future__ import annotations

import json
import os
import shutil
import signal as signal_mod
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launch.config import RunConfig
from launch.plan import NodePlan, Plan
from schemas import RunDir, Writer, names

from . import clock, judges_runtime, ray_node, rendezvous
from .failure import AgentFailed, Failure, FailureSignal
from .identity import Identity
from .liveness import Liveness
from .phases import AgentState, Phase
from .procgroup import session_members
from .supervisor import ExitPolicy, Supervisor, child_env

FAILURE_WRITE_BUDGET_S = 5.0  # a hung shared filesystem must not stop us from killing children
RAY_START_ATTEMPTS = 3
RAY_UP_MIN_WAIT_S = 30.0  # a node may come up slowly on a loaded machine, even past startup_timeout


@dataclass(frozen=True)
class RunResult:
    """All-or-nothing outcome of one agent: it succeeded, or it failed with one recorded cause."""

    state: AgentState
    failure: Failure | None
    exit_code: int


class PhaseLog:
    """Prints one line per phase transition and keeps `phases-RANK.json` current."""

    def __init__(self, run: RunDir, writer: Writer, rank: int, out: Callable[[str], None]) -> None:
        self.run = run
        self.writer = writer
        self.rank = rank
        self.out = out
        self.state = AgentState.INIT
        self.current: Phase | None = None
        self.entries: list[dict[str, Any]] = []
        self.node_index: int | None = None
        self.address: str | None = None
        self.on_phase: Callable[[str], None] = lambda _phase: None  # the reaper must know where we died
        self._lock = threading.Lock()

    def phase_name(self) -> str:
        return str(self.current) if self.current else "init"

    def begin(self, phase: Phase, detail: str = "") -> None:
        with self._lock:
            self.current = phase
            self.entries.append(
                {
                    "phase": str(phase),
                    "started_at": clock.wall(),
                    "ended_at": None,
                    "outcome": "running",
                    "detail": detail,
                }
            )
        self.out(f"{self.state} {phase} ...{' ' + detail if detail else ''}")
        self.on_phase(str(phase))
        self._save()

    def end(self, outcome: str = "ok", detail: str = "") -> None:
        with self._lock:
            if not self.entries or self.entries[-1]["outcome"] != "running":
                return
            e = self.entries[-1]
            e["ended_at"] = clock.wall()
            e["outcome"] = outcome
            if detail:
                e["detail"] = detail
            took = e["ended_at"] - e["started_at"]
        self.out(f"{self.state} {e['phase']} {outcome} ({took:.2f}s){' ' + detail if detail else ''}")
        self._save()

    def set_state(self, state: AgentState) -> None:
        self.state = state
        self._save()

    def _save(self) -> None:
        with self._lock:
            fields = {
                "state": str(self.state),
                "node_index": self.node_index,
                "address": self.address,
                "phases": [dict(e) for e in self.entries],
            }
        try:
            self.run.write_artifact(names.phases(self.rank), "phases", self.writer, fields)
        except OSError:
            pass  # the timeline is evidence, not control: never fail the run over it


class Agent:
    def __init__(
        self,
        config: RunConfig,
        plan: Plan,
        ident: Identity,
        run: RunDir,
        *,
        incarnation: str,
        started_mono: float,
        out: Callable[[str], None],
    ) -> None:
        self.config = config
        self.plan = plan
        self.ident = ident
        self.run = run
        self.rank = ident.rank
        self.coord = config.coordination
        self.writer = Writer(config.fingerprint, ident.rank, incarnation, clock_offset=clock.skew())
        self.signal = FailureSignal()
        self.log = PhaseLog(run, self.writer, ident.rank, out)
        self.out = out
        self.deadline = started_mono + self.coord.startup_timeout
        self.node: NodePlan | None = None
        self.peers: list[rendezvous.Peer] = []
        self.head_address: str | None = None
        self.gcs_address: str | None = None
        self.temp_dir: str | None = None
        self.reaper: subprocess.Popen | None = None
        self.supervisor: Supervisor | None = None
        self.liveness: Liveness | None = None
        self.judges = judges_runtime.JudgeRuntime(self)
        self._driver_done = threading.Event()
        self._agent_log_fd = run.open_log(names.agent_log(self.rank))

    # -- helpers ---------------------------------------------------------------------------------

    def fail(self, kind: str, cause: str, **kw: Any) -> AgentFailed:
        return AgentFailed(Failure(kind=kind, cause=cause, phase=self.log.phase_name(), **kw))

    def wait_for(
        self, what: str, predicate: Callable[[], bool], *, startup: bool = True, timeout: float | None = None
    ) -> None:
        """Poll `predicate` every poll interval until true, a failure, or the deadline."""
        end = self.deadline if startup else clock.mono() + (timeout or 0)
        while True:
            self.signal.raise_if_set()
            if predicate():
                return
            if clock.mono() >= end:
                if startup:
                    raise self.fail(
                        "startup_timeout",
                        f"{what} not reached within startup_timeout "
                        f"{self.coord.startup_timeout:g}s (counted from agent start)",
                    )
                raise self.fail("ack_timeout", f"{what} not reached within {timeout:g}s")
            self.signal.wait(self.coord.poll_interval)

    def listed(self, name: str, subdir: str = "") -> bool:
        """Is `name` in the run directory (or `subdir`)? By listing: NFS caches negative lookups."""
        return name in self.run.listdir(subdir)

    @property
    def is_head(self) -> bool:
        return self.node is not None and self.node.index == 0

    @property
    def is_driver_node(self) -> bool:
        return self.node is not None and self.node.index == self.plan.driver_node

    # -- entry -----------------------------------------------------------------------------------

    def run_lifecycle(self) -> RunResult:
        self._install_signal_handlers()
        self._start_reaper()
        supervisor = Supervisor(
            self.signal, self.coord.teardown_grace, self.reaper.stdin if self.reaper else None, self.log.phase_name
        )
        self.supervisor = supervisor
        self.log.on_phase = lambda phase: supervisor.tell_reaper(f"phase {phase}")
        self.liveness = Liveness(
            self.run,
            self.writer,
            self.rank,
            self.ident.count,
            heartbeat_interval=self.coord.heartbeat_interval,
            heartbeat_timeout=self.coord.heartbeat_timeout,
            poll_interval=self.coord.poll_interval,
            signal=self.signal,
            phase=self.log.phase_name,
        )
        self.liveness.start()
        self.log.set_state(AgentState.STARTING)
        try:
            self._startup()
            self.log.set_state(AgentState.RUNNING)
            self._drive()
            self._complete_and_acknowledge()
        except AgentFailed as exc:
            self.signal.trip(exc.failure)
        except Exception as exc:  # noqa: BLE001 - an agent bug still must clean up and say why
            self.signal.trip(
                Failure(
                    kind="internal",
                    cause=f"{type(exc).__name__}: {exc}",
                    phase=self.log.phase_name(),
                    log=names.agent_log(self.rank),
                )
            )
        if self.signal.is_set():
            return self._teardown_failed()
        return self._teardown_succeeded()

    # -- startup phases --------------------------------------------------------------------------

    def _check_host_allowed(self) -> None:
        """launch.hostnames is the one shared allowlist: a replica on another host fails the run."""
        allowed = self.config.hostnames
        host = self.ident.hostname
        if allowed and host not in allowed and host.split(".")[0] not in allowed:
            raise self.fail(
                "placement",
                f"host {host!r} is not in launch.hostnames ({', '.join(allowed)}); run on a listed host or add "
                "it to the allowlist",
            )

    def _startup(self) -> None:
        lg = self.log
        lg.begin(Phase.RENDEZVOUS, f"rank {self.rank}/{self.ident.count} at {self.ident.address}")
        self._check_host_allowed()
        rendezvous.publish(self.run, self.writer, self.ident)
        peers = rendezvous.gather(
            self.run,
            self.ident.count,
            deadline=self.deadline,
            poll=self.coord.poll_interval,
            signal=self.signal,
            phase=lg.phase_name(),
            startup_timeout=self.coord.startup_timeout,
        )
        lg.end()
        self.liveness.start_watching()

        lg.begin(Phase.PLAN_AGREEMENT)
        rendezvous.agree(peers, self.config.fingerprint, lg.phase_name())
        self.peers = rendezvous.node_order(peers, lg.phase_name())
        if len(self.peers) != self.plan.replicas:
            raise self.fail(
                "plan_mismatch",
                f"{len(self.peers)} replicas started but the plan has "
                f"{self.plan.replicas}; start exactly {self.plan.replicas} replicas",
            )
        index = next(i for i, p in enumerate(self.peers) if p.rank == self.rank)
        self.node = self.plan.nodes[index]
        self.head_address = self.peers[0].address
        lg.node_index, lg.address = index, self.ident.address
        lg.end(detail=f"node {index} of {self.plan.replicas}; head {self.head_address}")

        lg.begin(Phase.DEVICES)
        data_detail = self.judges.check_data()
        devices = self.ident.visible_devices
        if len(devices) != self.plan.gpus_per_replica:
            raise self.fail(
                "placement",
                f"rank {self.rank} sees {len(devices)} GPUs "
                f"(CUDA_VISIBLE_DEVICES={','.join(devices) or 'unset'}) but the plan needs "
                f"gpus_per_replica={self.plan.gpus_per_replica}; fix the allocation or "
                "launch.gpus_per_replica",
            )
        lg.end(detail=f"data: {data_detail}")

        lg.begin(Phase.PLACEMENT)
        self._write_placement()
        lg.end()

        lg.begin(Phase.JUDGES_START)
        started = self.judges.start_local()
        lg.end(detail=f"{started} managed judge(s) on this node")

        if self.config.ray.enabled:
            lg.begin(Phase.RAY_START, "head" if self.is_head else f"worker of {self.head_address}")
            self._start_ray()
            lg.end()

        lg.begin(Phase.JUDGE_HEALTH)
        self.judges.wait_local_healthy()
        lg.end()

        if self.is_head and self.config.ray.enabled:
            lg.begin(Phase.READINESS)
            self._readiness_gate()
            lg.end()

        if self.is_driver_node:
            if not self.is_head and self.config.ray.enabled:
                lg.begin(Phase.READINESS, "waiting for the head's layout check")
                self.wait_for("ray-layout.json from the head", lambda: self.listed(names.RAY_LAYOUT))
                layout = self.run.read_json(names.RAY_LAYOUT) or {}
                if not layout.get("passed"):
                    raise self.fail(
                        "layout", "the head's readiness gate failed: " + "; ".join(layout.get("problems", []))
                    )
                lg.end()
            lg.begin(Phase.REGISTRY)
            lg.end(detail=self.judges.write_registry())
            lg.begin(Phase.CANARIES)
            detail = self.judges.run_canaries()
            lg.end(detail=detail)

    def _write_placement(self) -> None:
        node = self.node
        assert node is not None
        vis = self.ident.visible_devices
        ray_devs = list(node.ray_devices)
        judge_devs = {name: list(devs) for name, devs in node.judge_devices.items()}
        ray_mask = {vis[i] for i in ray_devs}
        for name, devs in judge_devs.items():
            if ray_mask & {vis[i] for i in devs}:
                raise self.fail("placement", f"judge {name}'s devices overlap Ray's on node {node.index}")
        self.run.write_artifact(
            names.placement(self.rank),
            "placement",
            self.writer,
            {
                "node_index": node.index,
                "address": self.ident.address,
                "visible_devices": list(vis),
                "trainer_gpus": node.trainer_gpus,
                "rollout_gpus": node.rollout_gpus,
                "ray": {
                    "devices": ray_devs,
                    "cuda_visible_devices": ",".join(vis[i] for i in ray_devs),
                    "num_gpus": node.ray_gpus,
                },
                "judges": {
                    n: {"devices": d, "cuda_visible_devices": ",".join(vis[i] for i in d)}
                    for n, d in judge_devs.items()
                },
                "unused_devices": list(node.unused_devices),
                "is_head": self.is_head,
                "is_driver_node": self.is_driver_node,
            },
        )

    def _ray_resources(self) -> dict[str, float]:
        node = self.node
        assert node is not None
        res: dict[str, float] = {}
        if node.pool and node.pool in self.config.ray.resources:
            res.update({k: float(v) for k, v in self.config.ray.resources[node.pool].items()})
        return res

    def _start_ray(self) -> None:
        node = self.node
        assert node is not None
        self.temp_dir = ray_node.short_temp_dir()
        assert self.supervisor is not None
        self.supervisor.tell_reaper(f"tmp {self.temp_dir}")  # removed by the reaper if we are SIGKILLed
        if not self.is_head:
            self.wait_for("the Ray head's address", self._head_known)
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            ports = ray_node.pick_ports(
                self.run.path.name, self.rank + (attempt - 1) * self.ident.count, self.ident.count * RAY_START_ATTEMPTS
            )
            if self.is_head:
                self.gcs_address = f"{self.ident.address}:{ports.gcs}"
            if self._spawn_ray(ports, node):
                break
            if attempt == RAY_START_ATTEMPTS:
                raise self.fail(
                    "child_exit",
                    f"ray start exited at once {attempt} times (ports taken?)",
                    log=names.ray_log(self.rank),
                )
        if self.is_head:
            self.run.write_artifact(names.RAY_HEAD, "ray-head", self.writer, {"gcs_address": self.gcs_address})

    def _head_known(self) -> bool:
        if not self.listed(names.RAY_HEAD):
            return False
        doc = self.run.read_json(names.RAY_HEAD)
        if not doc or doc.get("fingerprint") != self.config.fingerprint:
            return False
        self.gcs_address = str(doc["gcs_address"])
        return True

    def _spawn_ray(self, ports: ray_node.RayPorts, node: NodePlan) -> bool:
        """Start Ray on probation until every port it should bind accepts connections. Ports are
        picked and then bound by Ray: if another process took one, Ray exits during probation,
        which is retried with new ports instead of failing the run. A fixed probation time is
        not enough: on a loaded host a node can take several seconds to bind its last port."""
        vis = self.ident.visible_devices
        spec = ray_node.RayNodeSpec(
            is_head=self.is_head,
            address=self.ident.address,
            head_address=self.gcs_address or "",
            ports=ports,
            num_gpus=node.ray_gpus,
            num_cpus=self.config.ray.num_cpus,
            object_store_memory=self.config.ray.object_store_memory,
            temp_dir=self.temp_dir or "",
            resources=self._ray_resources(),
            extra_args=self.config.ray.extra_args,
        )
        env = ray_node.ray_env(child_env({}), ",".join(vis[i] for i in node.ray_devices), self.temp_dir or "")
        assert self.supervisor is not None
        early: list[int] = []
        log = names.ray_log(self.rank)
        group = self.supervisor.start(
            "ray-head" if self.is_head else "ray-worker",
            ray_node.ray_start_argv(spec),
            env=env,
            log_fd=self.run.open_log(log),
            policy=ExitPolicy("child_exit", log, on_exit=early.append),
            term_leader_only=True,
        )
        t0 = clock.mono()
        limit = max(RAY_UP_MIN_WAIT_S, self.deadline - t0)
        while not early and not ray_node.ray_is_up(self.ident.address, ports, self.is_head):
            self.signal.raise_if_set()
            if clock.mono() - t0 > limit:
                raise self.fail(
                    "startup_timeout",
                    f"Ray did not open its ports within {limit:.0f}s (ports {ports.gcs}-{ports.max_worker})",
                    log=log,
                )
            time.sleep(0.2)
        if early:
            return False
        self.supervisor.set_policy(group, ExitPolicy("child_exit", log))
        return True

    def _readiness_gate(self) -> None:
        assert self.gcs_address is not None
        expected = {p.address: float(self.plan.nodes[i].ray_gpus) for i, p in enumerate(self.peers)}
        t0 = clock.mono()
        remaining = max(5.0, self.deadline - clock.mono())
        try:
            live = ray_node.probe_live_nodes(
                self.gcs_address, self.ident.address, len(expected), remaining, self._agent_log_fd, self.signal.is_set
            )
        except (RuntimeError, ValueError) as exc:
            self.signal.raise_if_set()
            raise self.fail("layout", f"could not read Ray's live nodes: {exc}", log=names.ray_log(self.rank)) from None
        check = ray_node.compare_layout(expected, live)
        self.run.write_artifact(
            names.RAY_LAYOUT,
            "ray-layout",
            self.writer,
            {
                "head_address": self.ident.address,
                "ray_address": self.gcs_address,
                "expected": check.expected,
                "actual": check.actual,
                "live_nodes": check.live_nodes,
                "passed": check.passed,
                "problems": check.problems,
                "waited_s": round(clock.mono() - t0, 3),
            },
        )
        if not check.passed:
            raise self.fail("layout", "Ray's live layout differs from the plan: " + "; ".join(check.problems))

    # -- driver ----------------------------------------------------------------------------------

    def driver_env(self) -> dict[str, str]:
        assert self.node is not None
        plan_json = self.plan.to_json()
        plan_json["addresses"] = [p.address for p in self.peers]
        extra = {
            **({"RAY_ADDRESS": self.gcs_address or ""} if self.config.ray.enabled else {}),
            "GYM_RUN_DIR": str(self.run.path),
            "GYM_RANK": str(self.rank),
            "GYM_NODE_INDEX": str(self.node.index),
            "GYM_NODE_ADDRESS": self.ident.address,
            "GYM_FINGERPRINT": self.config.fingerprint,
            "GYM_INCARNATION": self.writer.incarnation,
            "GYM_PLAN": json.dumps(plan_json, sort_keys=True),
            "GYM_DRIVER_RESULT": str(self.run.path / names.DRIVER_RESULT),
            **self._run_file_env(),
            **self.judges.driver_env(),
            **self._spec_env(),
        }
        return child_env(extra)

    def _run_file_env(self) -> dict[str, str]:
        """The user's run file, byte for byte, for a driver that reads it (a MILES trainer does)."""
        text = self.config.spec.source_text
        if text is None:
            return {}
        rel = names.run_file(text)
        if not self.listed(rel):
            self.run.write_bytes(rel, text.encode("utf-8"))
        return {"GYM_RUN_FILE": str(self.run.path / rel)}

    def _spec_env(self) -> dict[str, str]:
        """``[driver] env``; a ``runtime:VAR`` value is VAR of the job's environment (seed 001)."""
        out: dict[str, str] = {}
        for key, value in self.config.driver.env.items():
            if value.startswith("runtime:"):
                var = value[len("runtime:") :]
                if var not in os.environ:
                    raise self.fail(
                        "placement",
                        f"driver.env.{key} = {value!r} but {var} is not set in the job's environment",
                    )
                value = os.environ[var]
            out[key] = value
        return out

    def _drive(self) -> None:
        lg = self.log
        if not self.is_driver_node:
            lg.begin(Phase.DRIVER, f"supervising; the driver runs on node {self.plan.driver_node}")
            # The driver's node acknowledges right after writing complete.json. Its ack is found by
            # listing acks/ (empty while the driver runs), not the large top-level directory:
            # O(1) per poll per agent instead of O(N).
            driver_ack = f"ack-{self.peers[self.plan.driver_node].rank}.json"
            self.wait_for(
                "the driver node's completion",
                lambda: self.listed(driver_ack, names.ACKS_DIR),
                startup=False,
                timeout=float("inf"),
            )
            if self.run.read_json(names.COMPLETE) is None:
                raise self.fail("internal", "the driver's node acknowledged but complete.json is unreadable")
            lg.end()
            return
        cmd = self.config.driver.command
        shell = isinstance(cmd, str)
        argv = [cmd] if shell else list(cmd)
        lg.begin(Phase.DRIVER, " ".join(argv))
        t0 = clock.mono()

        def on_exit(code: int) -> None:
            if code != 0:
                self.signal.trip(
                    Failure(
                        kind="driver_exit",
                        cause=f"the driver exited with code {code}",
                        phase=str(Phase.DRIVER),
                        log=names.driver_log(self.rank),
                    )
                )
            self._driver_done.set()

        assert self.supervisor is not None
        self.supervisor.start(
            "driver",
            argv,
            env=self.driver_env(),
            log_fd=self.run.open_log(names.driver_log(self.rank)),
            policy=ExitPolicy("driver_exit", names.driver_log(self.rank), on_exit),
            shell=shell,
        )
        while not self._driver_done.is_set():
            self.signal.raise_if_set()
            self._driver_done.wait(self.coord.poll_interval)
        self.signal.raise_if_set()
        lg.end(detail="exit 0")
        self.run.write_artifact(
            names.COMPLETE,
            "complete",
            self.writer,
            {"driver_rank": self.rank, "driver_exit_code": 0, "driver_seconds": round(clock.mono() - t0, 3)},
        )

    def _complete_and_acknowledge(self) -> None:
        lg = self.log
        lg.begin(Phase.COMPLETE)
        lg.end()
        lg.begin(Phase.ACKNOWLEDGE)
        self.run.write_artifact(names.ack(self.rank), "ack", self.writer, {"outcome": "success"})

        def all_acked() -> bool:
            listed = set(self.run.listdir(names.ACKS_DIR))
            return all(f"ack-{r}.json" in listed for r in range(self.ident.count))

        self.wait_for("an acknowledgement from every replica", all_acked, startup=False, timeout=self.coord.ack_timeout)
        assert self.liveness is not None
        self.liveness.stop_watching()  # peers may now exit: their silence is expected
        lg.end()

    # -- teardown --------------------------------------------------------------------------------

    def _stop_everything(self) -> list[dict]:
        assert self.supervisor is not None
        self.judges.stop()
        records = self.supervisor.stop_all()
        self.supervisor.halt()
        if self.liveness:
            self.liveness.stop()
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return [r.to_json() for r in records]

    def _leftovers(self, groups: list[dict]) -> list[int]:
        return [p.pid for g in groups for p in session_members(int(g["session"]))]

    def _teardown_succeeded(self) -> RunResult:
        self.log.set_state(AgentState.STOPPING)
        self.log.begin(Phase.TEARDOWN)
        groups = self._stop_everything()
        leftovers = self._leftovers(groups)
        self.run.write_artifact(
            names.cleanup(self.rank),
            "cleanup",
            self.writer,
            {"outcome": "success", "groups": groups, "leftover_pids": leftovers},
        )
        self.log.end(detail=f"{len(groups)} process group(s) stopped")
        self.log.set_state(AgentState.SUCCEEDED)
        assert self.supervisor is not None
        self.supervisor.finish_reaper()
        self._reap_reaper()
        self.out("SUCCEEDED")
        return RunResult(AgentState.SUCCEEDED, None, 0)

    def _teardown_failed(self) -> RunResult:
        failure = self.signal.failure
        assert failure is not None
        self.log.end("failed", failure.cause[:300])
        self.log.set_state(AgentState.STOPPING)
        self.out(f"FAILED in {failure.phase or self.log.phase_name()}: {failure.kind}: {failure.cause}")
        # Write the failure record first (peers react to it) but never let a hung shared
        # filesystem delay killing our children: the write gets a bounded budget on its own thread.
        writer = threading.Thread(target=self._write_failure, args=(failure,), daemon=True)
        writer.start()
        groups = self._stop_everything()
        writer.join(FAILURE_WRITE_BUDGET_S)
        leftovers = self._leftovers(groups)
        try:
            self.run.write_artifact(
                names.cleanup(self.rank),
                "cleanup",
                self.writer,
                {"outcome": "failure", "groups": groups, "leftover_pids": leftovers},
            )
        except OSError:
            pass
        self.log.set_state(AgentState.FAILED)
        assert self.supervisor is not None
        self.supervisor.finish_reaper()
        self._reap_reaper()
        return RunResult(AgentState.FAILED, failure, 1)

    def _write_failure(self, failure: Failure) -> None:
        try:
            self.run.write_artifact(
                names.failure(self.rank),
                "failure",
                self.writer,
                {
                    "kind": failure.kind,
                    "cause": failure.cause,
                    "phase": failure.phase or self.log.phase_name(),
                    "wall_time": failure.wall_time,
                    "monotonic_time": failure.monotonic_time,
                    "log": failure.log,
                    "reacting_to": failure.reacting_to,
                    "peers": list(failure.peers),
                },
            )
        except OSError:
            pass

    # -- reaper and signals ----------------------------------------------------------------------

    def _start_reaper(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "agent.reaper",
            "--run-dir",
            str(self.run.path),
            "--rank",
            str(self.rank),
            "--incarnation",
            self.writer.incarnation,
            "--fingerprint",
            self.config.fingerprint,
            "--agent-pid",
            str(os.getpid()),
            "--grace",
            str(self.coord.teardown_grace),
        ]
        self.reaper = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,
            stdout=self._agent_log_fd,
            stderr=self._agent_log_fd,
            close_fds=True,
            env=child_env({}),
        )

    def _reap_reaper(self) -> None:
        if self.reaper is not None:
            try:
                self.reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.reaper.kill()
                self.reaper.wait()

    def _install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: object) -> None:
            name = signal_mod.Signals(signum).name
            self.signal.trip(Failure(kind="signal", cause=f"received {name}", phase=self.log.phase_name()))

        signal_mod.signal(signal_mod.SIGTERM, handler)
        signal_mod.signal(signal_mod.SIGINT, handler)
