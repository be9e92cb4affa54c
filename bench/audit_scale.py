"""Audit at scale: a 1024-replica run directory written by the project's own writers, then
`gym-audit` on it, timed.

    python -m bench.audit_scale [--replicas 1024 8192] [--scenario success|killed] [--root DIR]

Nothing is hand-made JSON: every artifact goes through schemas.RunDir.write_artifact (stamped,
schema-checked, atomic), built by the project's own code where it has a builder: address records
by rendezvous.claim, phase timelines by the lifecycle's PhaseLog walking the agent's own step
table (STARTUP_STEPS, on the nodes Agent.applies' own rule picks; both through tests.harness.steps),
placements by Topology.placement_fields, heartbeats and
every peer's failure (found by listing failures/) by each replica's own liveness.Liveness, never
started but ticked on a clock the generator advances, failure records by
failure.write_failure_record (the reaper's too), the Ray layout by ray_node.compare_layout, the
data check, registry and canaries by the judge runtime (no judges in this spec). Records without
a builder of their own (ray-head, complete, ack, cleanup, driver-result: a few fields each in
lifecycle.py) are written with the same write_artifact call and fields as there. Rank order
differs from address order.

Generated on tmpfs when available (each write fsyncs twice; on a disk 60,000 writes take
minutes); the audit is then timed on that directory, warm, as `gym-audit` CLI processes with
byte-compiled modules (bench.audit_scale.compiled_env).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

SPEC = """
name = "scale"
[launch]
gpus_per_replica = 8
node_gpus = 8
backend = "local"
[launch.coordination]
startup_timeout = 600
[trainer]
nodes = {trainer_nodes}
gpus_per_node = 8
[inference]
gpus = {rollout}
tensor_parallel_size = 1
placement_mode = "disaggregated"
[driver]
command = ["python", "train.py"]
placement = "trainer"
[ray]
num_cpus = 32
"""
HEARTBEAT_INTERVAL = 2.0  # the spec's default heartbeat and poll intervals, on the generator's clock
POLL_INTERVAL = 1.0
BEATS = 3


def _address(i: int) -> str:
    return f"10.{i // 250}.{(i * 7) % 250}.{1 + i % 250}"


class _Clock:
    """The monotonic clock every replica's Liveness runs on here: advanced by the generator, so
    heartbeats and failure discovery come from the real Liveness.tick() without waiting."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class _Replica:
    """One replica as the generator keeps it: what an agent writes its records with."""

    ident: Any  # agent.coord.identity.Identity
    writer: Any  # schemas.Writer
    log: Any  # agent.lifecycle._phase_log.PhaseLog
    signal: Any  # agent.ground.failure.FailureSignal
    topo: Any = None  # agent.coord.topology.Topology, after plan agreement
    live: Any = None  # agent.coord.liveness.Liveness, never started: ticked on a _Clock

    @property
    def rank(self) -> int:
        return self.ident.rank


def generate(root: Path, replicas: int, scenario: str, uuid: str = "scale-run") -> Path:
    from agent.coord import rendezvous
    from agent.coord.context import RunContext
    from agent.coord.failure_record import write_failure_record
    from agent.coord.identity import Identity
    from agent.coord.liveness import Liveness
    from agent.coord.topology import Topology
    from agent.ground import clock
    from agent.ground.failure import Failure, FailureSignal
    from agent.ground.reaper_channel import ReaperChannel
    from agent.judges.runtime import JudgeRuntime
    from agent.lifecycle._phase_log import PhaseLog
    from agent.lifecycle._state import StateMachine
    from agent.proc.procgroup import StopRecord
    from agent.proc.supervisor import Supervisor
    from agent.ray.node import compare_layout
    from launch.spec import plan as plan_module
    from launch.spec.config import RunConfig
    from launch.spec.load import load_spec, spec_record
    from launch.spec.plan import plan as make_plan
    from schemas import (
        AgentState,
        FailureKind,
        Phase,
        PhaseOutcome,
        RunDir,
        RunOutcome,
        Writer,
        WriterKind,
        names,
        new_incarnation,
    )
    from tests.harness.steps import STARTUP_STEPS, applies

    trainer_nodes = max(1, replicas // 8)
    spec_file = root / "scale.toml"
    spec_file.write_text(SPEC.format(trainer_nodes=trainer_nodes, rollout=(replicas - trainer_nodes) * 8))
    resolved = load_spec(spec_file)
    config = RunConfig.from_spec(resolved)
    # The planner refuses more than MAX_NODES (4096) replicas. Beyond it the directory is still
    # written by the same code, planned with the limit lifted; its audit then says the recorded
    # spec does not plan (spec.unplannable) and checks the run against its own records.
    with mock.patch.object(plan_module, "MAX_NODES", max(plan_module.MAX_NODES, replicas)):
        plan = make_plan(config)
    assert plan.replicas == replicas, plan.replicas
    assert not any(node.judges for node in plan.nodes)  # one JudgeRuntime below serves every node
    fp = config.fingerprint
    run = RunDir.create(root / "out", uuid, mode=0o750)
    rng = random.Random(7)
    addresses = [_address(i) for i in range(replicas)]
    rng.shuffle(addresses)  # rank order is not address order
    now = _Clock()

    def quiet(_line: str) -> None:
        """The agent prints its phase lines; the logs are written below instead."""

    reps: list[_Replica] = []
    for rank in range(replicas):
        writer = Writer(fp, rank, new_incarnation(), clock_offset=clock.skew())
        if rank == 0:
            run.write_artifact(names.SPEC, writer, spec_record(resolved, str(spec_file)))
        ident = Identity(rank, replicas, addresses[rank], True, f"gpu-{rank:04d}", tuple(str(i) for i in range(8)))
        rep = _Replica(ident, writer, PhaseLog(run, writer, rank, quiet, StateMachine()), FailureSignal())
        rep.live = Liveness(
            run,
            writer,
            rank,
            replicas,
            heartbeat_interval=HEARTBEAT_INTERVAL,
            heartbeat_timeout=120.0,
            poll_interval=POLL_INTERVAL,
            signal=rep.signal,
            phase=rep.log.phase_name,
            now=now,
        )
        rep.log.states.advance(AgentState.STARTING)
        rep.log.begin(Phase.RENDEZVOUS, f"rank {rank}/{replicas} at {ident.address}")
        rendezvous.claim(run, writer, ident)
        reps.append(rep)
    peers = [
        rendezvous.Peer(r.rank, r.ident.address, r.writer.incarnation, fp, r.ident.hostname, r.ident.visible_devices)
        for r in reps
    ]
    rendezvous.agree(peers, fp, str(Phase.PLAN_AGREEMENT))
    peers = rendezvous.node_order(peers, str(Phase.PLAN_AGREEMENT))
    for index, peer in enumerate(peers):
        rep = reps[peer.rank]
        rep.topo = Topology(plan.nodes[index], tuple(peers), plan.driver_node, plan.ray_nodes)
        rep.log.node_index, rep.log.address = index, rep.ident.address
    head = reps[peers[0].rank]
    driver = reps[peers[plan.driver_node].rank]

    # The judge steps run through the agent's own JudgeRuntime (no judges in this spec) on the
    # driver node's run context; nothing is ever started under its supervisor.
    supervisor = Supervisor(
        driver.signal, config.coordination.teardown_grace, ReaperChannel(None), driver.log.phase_name
    )
    judges = JudgeRuntime(
        RunContext(
            config=config,
            plan=plan,
            rank=driver.rank,
            address=driver.ident.address,
            visible_devices=driver.ident.visible_devices,
            run=run,
            writer=driver.writer,
            signal=driver.signal,
            supervisor=supervisor,
            reaper=ReaperChannel(None),
            phase=driver.log.phase_name,
            deadline=clock.mono() + config.coordination.startup_timeout,
        )
    )
    gcs = f"{head.ident.address}:6379"

    def placement(rep: _Replica) -> str:
        fields = rep.topo.placement_fields(rep.ident.address, rep.ident.visible_devices)
        run.write_artifact(names.placement(rep.rank), rep.writer, fields)
        return ""

    def ray_start(rep: _Replica) -> str:
        if rep.topo.is_head:
            run.write_artifact(names.RAY_HEAD, rep.writer, {"gcs_address": gcs})
        return ""

    def readiness(rep: _Replica) -> str:
        expected = {p.address: float(plan.nodes[i].ray_gpus) for i, p in enumerate(peers)}
        live_nodes = [
            {"address": addr, "gpus": g, "node_id": f"{i:056x}"} for i, (addr, g) in enumerate(expected.items())
        ]
        check = compare_layout(expected, live_nodes)
        run.write_artifact(
            names.RAY_LAYOUT,
            rep.writer,
            {
                "head_address": rep.ident.address,
                "ray_address": gcs,
                "expected": check.expected,
                "actual": check.actual,
                "live_nodes": check.live_nodes,
                "passed": check.passed,
                "problems": check.problems,
                "waited_s": 4.2,
            },
        )
        return ""

    steps: dict[Phase, Callable[[_Replica], str]] = {
        Phase.RENDEZVOUS: lambda _rep: "",  # begun above, before every address was published
        Phase.PLAN_AGREEMENT: lambda r: f"node {r.topo.node.index} of {replicas}; head {r.topo.head_address}",
        Phase.DATA_CHECK: lambda _rep: judges.check_data(),
        Phase.DEVICES: lambda r: f"{len(r.ident.visible_devices)} GPU(s) visible",
        Phase.PLACEMENT: placement,
        Phase.JUDGES_START: lambda r: judges.start_local(r.topo),  # no node hosts a judge: a count
        Phase.RAY_START: ray_start,
        Phase.READINESS: readiness,
        Phase.REGISTRY: lambda r: judges.write_registry(r.topo),
        Phase.CANARIES: lambda r: judges.run_canaries(r.topo),
    }
    for step in STARTUP_STEPS:  # the agent's own step table, step by step across the replicas
        for rep in reps:
            if not applies(step, rep.topo, config.ray.enabled):
                continue
            if step.phase is not Phase.RENDEZVOUS:
                rep.log.begin(step.phase)
            rep.log.end(detail=steps.get(step.phase, lambda _rep: "")(rep))
    supervisor.halt()
    for rep in reps:
        rep.log.states.advance(AgentState.RUNNING)
        rep.log.begin(Phase.DRIVER)
        _log(run, names.agent_log(rep.rank), f"[rank {rep.rank}] RUNNING driver ...\n")
        _log(run, names.ray_log(rep.rank), "Ray runtime started.\n")
    for beat in range(BEATS):  # every replica's own Liveness beats, as its thread would
        now.t = beat * HEARTBEAT_INTERVAL
        for rep in reps:
            rep.live.tick()
    _log(run, names.driver_log(driver.rank), "".join(f"step {i} loss {2.0 / (i + 1):.3f}\n" for i in range(200)))
    driver_group = StopRecord("driver", 40000, 40000, "exited", 0, 0, 0.0).to_json()
    ray_group = StopRecord("ray-worker", 30000, 30000, "sigterm", 0, 0, 1.2).to_json()
    if scenario == "success":
        run.write_artifact(
            names.DRIVER_RESULT,
            Writer(fp, driver.rank, driver.writer.incarnation, WriterKind.DRIVER),
            {
                "optimizer_steps": 200,
                "losses": [2.0, 1.0],
                "final_loss": 1.0,
                "policy_version": 200,
                "policy_refreshes": 200,
                "judge_replies": 0,
            },
        )
        run.write_artifact(
            names.COMPLETE,
            driver.writer,
            {"driver_rank": driver.rank, "driver_exit_code": 0, "driver_seconds": 3600.0},
        )
        for rep in reps:
            rep.log.end(detail="exit 0" if rep is driver else "")
            rep.log.begin(Phase.COMPLETE)
            rep.log.end()
            rep.log.begin(Phase.ACKNOWLEDGE)
            run.write_artifact(names.ack(rep.rank), rep.writer, {"outcome": str(RunOutcome.SUCCESS)})
            rep.log.end()
            rep.log.states.advance(AgentState.STOPPING)
            rep.log.begin(Phase.TEARDOWN)
            groups = [ray_group] + ([driver_group] if rep is driver else [])
            run.write_artifact(
                names.cleanup(rep.rank),
                rep.writer,
                {"outcome": str(RunOutcome.SUCCESS), "groups": groups, "leftover_pids": []},
            )
            rep.log.end(detail=f"{len(groups)} process group(s) stopped")
            rep.log.states.advance(AgentState.SUCCEEDED)
    else:  # one replica SIGKILLed in the driver phase; its reaper and every peer react
        victim = reps[peers[replicas // 2].rank]
        reaper = Writer(fp, victim.rank, victim.writer.incarnation, kind=WriterKind.REAPER)
        died = Failure(
            kind=FailureKind.AGENT_DIED,
            cause=f"agent process 4242 of rank {victim.rank} died without cleaning up (killed or crashed) "
            f"during phase {Phase.DRIVER}",
            phase=str(Phase.DRIVER),
            log=names.agent_log(victim.rank),
        )
        if not write_failure_record(run, reaper, victim.rank, died, str(Phase.DRIVER)):
            raise OSError(f"could not write rank {victim.rank}'s failure record in {run.path}")
        run.write_artifact(
            names.cleanup(victim.rank),
            reaper,
            {"outcome": str(RunOutcome.FAILURE), "groups": [ray_group], "leftover_pids": []},
        )
        # One poll interval later every peer's own Liveness lists failures/ and trips on the
        # victim's record (each ticks before any peer record exists, as within one poll).
        now.t += POLL_INTERVAL  # before the next heartbeat is due: this tick only polls
        others = [rep for rep in reps if rep is not victim]
        for rep in others:
            rep.live.tick()
            assert rep.signal.failure is not None, f"rank {rep.rank} did not see rank {victim.rank}'s record"
        for rep in others:
            failure = rep.signal.failure
            rep.log.end(PhaseOutcome.FAILED, failure.cause[:300])
            rep.log.states.advance(AgentState.STOPPING)
            write_failure_record(run, rep.writer, rep.rank, failure, rep.log.phase_name())
            groups = [ray_group] + ([driver_group] if rep is driver else [])
            run.write_artifact(
                names.cleanup(rep.rank),
                rep.writer,
                {"outcome": str(RunOutcome.FAILURE), "groups": groups, "leftover_pids": []},
            )
            rep.log.states.advance(AgentState.FAILED)
    run.close()
    return run.path


def _log(run, relpath: str, text: str) -> None:
    fd = run.open_log(relpath)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def compiled_env(cache: Path) -> dict[str, str]:
    """The environment of a timed CLI: modules byte-compiled once into `cache` (as an installed
    package runs them), even where the caller's environment says not to write bytecode."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_audit(run_dir: Path, repeats: int = 3) -> dict:
    """Wall and CPU time of `gym-audit DIR --json` as a fresh CLI process (interpreter start and
    imports included), best of `repeats` after one untimed run that byte-compiles the modules."""
    exe = Path(sys.executable).with_name("gym-audit")
    argv = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "audit.cli"])]
    env = compiled_env(run_dir.parent / "pycache")
    subprocess.run([*argv, str(run_dir), "--json"], capture_output=True, env=env)
    times, cpus, code, out = [], [], None, b""
    for _ in range(repeats):
        c0, t0 = _children_cpu(), time.perf_counter()
        proc = subprocess.run([*argv, str(run_dir), "--json"], capture_output=True, env=env)
        times.append(time.perf_counter() - t0)
        cpus.append(_children_cpu() - c0)
        code, out = proc.returncode, proc.stdout
    import orjson

    report = orjson.loads(out) if out else {}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import audit.cli, audit.api"], check=True, env=env)
    import_s = time.perf_counter() - t0
    return {
        "files": sum(len(f) for _, _, f in os.walk(run_dir)),
        "seconds_min": min(times),
        "seconds_all": times,
        "cpu_seconds_min": min(cpus),
        "interpreter_and_import_s": import_s,
        "exit_code": code,
        "verdict": report.get("verdict"),
        "first_cause": (report.get("first_cause") or {}).get("kind"),
        "errors": sum(1 for f in report.get("findings", []) if f.get("severity") == "error"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1024])
    ap.add_argument("--scenario", choices=["success", "killed"], nargs="+", default=["success", "killed"])
    ap.add_argument("--root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args()
    for replicas in args.replicas:
        for scenario in args.scenario:
            print(measure(replicas, scenario, args.root), flush=True)
    return 0


def measure(replicas: int, scenario: str, root: str | None) -> dict:
    """Generate a run directory of `replicas` replicas in a temp dir under `root`, time its audit."""
    with tempfile.TemporaryDirectory(prefix="gym-audit-scale-", dir=root) as tmp:
        t0 = time.perf_counter()
        path = generate(Path(tmp), replicas, scenario)
        gen = time.perf_counter() - t0
        return {"replicas": replicas, "scenario": scenario, "generate_s": gen, **time_audit(path)}


if __name__ == "__main__":
    raise SystemExit(main())
