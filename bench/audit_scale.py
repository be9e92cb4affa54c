"""Audit at scale: a 1024-replica run directory written by the project's own writers, then
`gym-audit` on it, timed.

    python -m bench.audit_scale [--replicas 1024] [--scenario success|killed] [--root DIR]

Nothing is hand-made JSON: every artifact goes through schemas.RunDir.write_artifact (stamped,
schema-checked, atomic), built by the agent's own code where it has a builder: address records
by rendezvous.publish, phase timelines by the lifecycle's PhaseLog, placements and failure
records by lifecycle.Agent (one Agent object per replica, never started), heartbeats by
liveness.Liveness (never started), the Ray layout by ray_node.compare_layout, the registry and
canaries by the judge runtime (no judges in this spec). Records without a builder of their own
(ray-head, complete, ack, cleanup, driver-result: a few fields each in lifecycle.py) are written
with the same write_artifact call and fields as there. Rank order differs from address order.

Generated on tmpfs when available (each write fsyncs twice; on a disk 60,000 writes take
minutes); the audit is then timed on that directory, warm, as `gym-audit` CLI processes.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
PHASES = (
    "rendezvous",
    "plan_agreement",
    "devices",
    "placement",
    "judges_start",
    "ray_start",
    "judge_health",
)


def _address(i: int) -> str:
    return f"10.{i // 250}.{(i * 7) % 250}.{1 + i % 250}"


def generate(root: Path, replicas: int, scenario: str, uuid: str = "scale-run") -> Path:
    from agent.phases import AgentState, Phase

    from agent import clock, rendezvous
    from agent.failure import Failure, FailureSignal
    from agent.identity import Identity
    from agent.lifecycle import Agent
    from agent.liveness import Liveness
    from agent.procgroup import StopRecord
    from agent.ray_node import compare_layout
    from launch.config import RunConfig
    from launch.plan import plan as make_plan
    from launch.spec import load_spec
    from schemas import RunDir, Writer, names, new_incarnation

    trainer_nodes = max(1, replicas // 8)
    spec_file = root / "scale.toml"
    spec_file.write_text(SPEC.format(trainer_nodes=trainer_nodes, rollout=(replicas - trainer_nodes) * 8))
    resolved = load_spec(spec_file)
    config = RunConfig.from_spec(resolved)
    plan = make_plan(config)
    assert plan.replicas == replicas, plan.replicas
    run = RunDir.create(root / "out", uuid)
    rng = random.Random(7)
    addresses = [_address(i) for i in range(replicas)]
    rng.shuffle(addresses)  # rank order is not address order
    agents: list[Agent] = []
    for rank in range(replicas):
        inc = new_incarnation()
        if rank == 0:
            run.write_artifact(
                names.SPEC,
                "spec",
                Writer(config.fingerprint, rank, inc),
                {"spec": resolved.data, "source": str(spec_file)},
            )
        ident = Identity(rank, replicas, addresses[rank], True, f"gpu-{rank:04d}", tuple(str(i) for i in range(8)))
        lines: list[str] = []
        agent = Agent(config, plan, ident, run, incarnation=inc, started_mono=clock.mono(), out=lines.append)
        os.close(agent._agent_log_fd)  # one fd per replica is not needed to write records
        rendezvous.publish(run, agent.writer, ident)
        agents.append(agent)
    peers = rendezvous.node_order(
        [
            rendezvous.Peer(a.rank, a.ident.address, a.writer.incarnation, config.fingerprint, a.ident.hostname, ())
            for a in agents
        ],
        "plan_agreement",
    )
    head = agents[peers[0].rank]
    driver = agents[peers[plan.driver_node].rank]
    for index, peer in enumerate(peers):
        a = agents[peer.rank]
        a.peers, a.node, a.head_address = peers, plan.nodes[index], peers[0].address
        a.log.node_index, a.log.address = index, a.ident.address
        a.log.set_state(AgentState.STARTING)
        for p in PHASES:
            a.log.begin(Phase(p))
            if p == "placement":
                a._write_placement()
            a.log.end()
        live = Liveness(
            run,
            a.writer,
            a.rank,
            replicas,
            heartbeat_interval=2.0,
            heartbeat_timeout=120.0,
            poll_interval=1.0,
            signal=FailureSignal(),
            phase=a.log.phase_name,
        )
        for _ in range(3):
            live._beat()
    expected = {p.address: float(plan.nodes[i].ray_gpus) for i, p in enumerate(peers)}
    live_nodes = [{"address": addr, "gpus": g, "node_id": f"{i:056x}"} for i, (addr, g) in enumerate(expected.items())]
    check = compare_layout(expected, live_nodes)
    gcs = f"{head.ident.address}:6379"
    run.write_artifact(names.RAY_HEAD, "ray-head", head.writer, {"gcs_address": gcs})
    head.log.begin(Phase.READINESS)
    run.write_artifact(
        names.RAY_LAYOUT,
        "ray-layout",
        head.writer,
        {
            "head_address": head.ident.address,
            "ray_address": gcs,
            "expected": check.expected,
            "actual": check.actual,
            "live_nodes": check.live_nodes,
            "passed": check.passed,
            "problems": check.problems,
            "waited_s": 4.2,
        },
    )
    head.log.end()
    driver.log.begin(Phase.REGISTRY)
    driver.log.end(detail=driver.judges.write_registry())
    driver.log.begin(Phase.CANARIES)
    driver.log.end(detail=driver.judges.run_canaries())
    for a in agents:
        a.log.set_state(AgentState.RUNNING)
        a.log.begin(Phase.DRIVER)
        _log(run, names.agent_log(a.rank), f"[rank {a.rank}] RUNNING driver ...\n")
        _log(run, names.ray_log(a.rank), "Ray runtime started.\n")
    _log(run, names.driver_log(driver.rank), "".join(f"step {i} loss {2.0 / (i + 1):.3f}\n" for i in range(200)))
    driver_group = StopRecord("driver", 40000, 40000, "exited", 0, 0, 0.0).to_json()
    ray_group = StopRecord("ray-worker", 30000, 30000, "sigterm", 0, 0, 1.2).to_json()
    if scenario == "success":
        run.write_artifact(
            names.DRIVER_RESULT,
            "driver-result",
            Writer(config.fingerprint, driver.rank, driver.writer.incarnation, "driver"),
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
            "complete",
            driver.writer,
            {"driver_rank": driver.rank, "driver_exit_code": 0, "driver_seconds": 3600.0},
        )
        for a in agents:
            a.log.end(detail="exit 0" if a is driver else "")
            a.log.begin(Phase.COMPLETE)
            a.log.end()
            a.log.begin(Phase.ACKNOWLEDGE)
            run.write_artifact(names.ack(a.rank), "ack", a.writer, {"outcome": "success"})
            a.log.end()
            a.log.set_state(AgentState.STOPPING)
            a.log.begin(Phase.TEARDOWN)
            groups = [ray_group] + ([driver_group] if a is driver else [])
            run.write_artifact(
                names.cleanup(a.rank),
                "cleanup",
                a.writer,
                {"outcome": "success", "groups": groups, "leftover_pids": []},
            )
            a.log.end(detail=f"{len(groups)} process group(s) stopped")
            a.log.set_state(AgentState.SUCCEEDED)
    else:  # one replica SIGKILLed in the driver phase; its reaper and every peer react
        victim = agents[peers[replicas // 2].rank]
        t = clock.wall()
        reaper = Writer(config.fingerprint, victim.rank, victim.writer.incarnation, kind="reaper")
        run.write_artifact(
            names.failure(victim.rank),
            "failure",
            reaper,
            {
                "kind": "agent_died",
                "cause": f"agent process 4242 of rank {victim.rank} died without cleaning up (killed or crashed) "
                "during phase driver",
                "phase": "driver",
                "wall_time": t,
                "monotonic_time": clock.mono(),
                "log": names.agent_log(victim.rank),
                "reacting_to": None,
            },
        )
        run.write_artifact(
            names.cleanup(victim.rank),
            "cleanup",
            reaper,
            {"outcome": "failure", "groups": [ray_group], "leftover_pids": []},
        )
        for a in agents:
            if a is victim:
                continue
            f = Failure(
                kind="peer_failure",
                cause=f"rank {victim.rank} failed (agent_died): agent process 4242 died",
                phase="driver",
                reacting_to={"rank": victim.rank, "incarnation": victim.writer.incarnation, "kind": "agent_died"},
                peers=(victim.rank,),
            )
            a.signal.trip(f)
            a.log.end("failed", f.cause)
            a.log.set_state(AgentState.STOPPING)
            a._write_failure(f)
            groups = [ray_group] + ([driver_group] if a is driver else [])
            run.write_artifact(
                names.cleanup(a.rank),
                "cleanup",
                a.writer,
                {"outcome": "failure", "groups": groups, "leftover_pids": []},
            )
            a.log.set_state(AgentState.FAILED)
    run.close()
    return run.path


def _log(run, relpath: str, text: str) -> None:
    fd = run.open_log(relpath)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def time_audit(run_dir: Path, repeats: int = 3) -> dict:
    """Wall time of `gym-audit DIR --json` as a fresh CLI process (import time included)."""
    exe = Path(sys.executable).with_name("gym-audit")
    argv = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "audit.cli"])]
    times, code, out = [], None, b""
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run([*argv, str(run_dir), "--json"], capture_output=True)
        times.append(time.perf_counter() - t0)
        code, out = proc.returncode, proc.stdout
    import orjson

    report = orjson.loads(out) if out else {}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import audit.cli"], check=True)
    import_s = time.perf_counter() - t0
    return {
        "files": sum(len(f) for _, _, f in os.walk(run_dir)),
        "seconds_min": min(times),
        "seconds_all": times,
        "interpreter_and_import_s": import_s,
        "exit_code": code,
        "verdict": report.get("verdict"),
        "first_cause": (report.get("first_cause") or {}).get("kind"),
        "errors": sum(1 for f in report.get("findings", []) if f.get("severity") == "error"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=1024)
    ap.add_argument("--scenario", choices=["success", "killed"], nargs="+", default=["success", "killed"])
    ap.add_argument("--root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    for scenario in args.scenario:
        with tempfile.TemporaryDirectory(prefix="gym-audit-scale-", dir=args.root) as tmp:
            t0 = time.perf_counter()
            path = generate(Path(tmp), args.replicas, scenario)
            gen = time.perf_counter() - t0
            r = time_audit(path)
            print({"replicas": args.replicas, "scenario": scenario, "generate_s": round(gen, 1), **r}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
