"""Realistic run directories for the audit's tests, written through schemas.RunDir exactly as the
agent writes them (atomic writes, stamped headers, schema-checked), in the shape of
examples/demo.toml: 3 replicas x 8 GPUs, 4 trainer + 19 rollout GPUs, one reference judge bound
twice. Addresses are chosen so that numeric and string order differ (10.0.0.9 < 10.0.0.10 <
10.0.0.100): rank 1 owns node 0 (trainer, Ray head, driver), rank 0 node 1, rank 2 node 2 (judge).

Scenarios: success, killed_replica, driver_failure, judge_failure, peer_silent, hang; `ending(root,
rank, kind)` for any kind the fault matrix ends with, with every summary the audit's text prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent.coord.rendezvous import Peer
from agent.coord.topology import Topology
from launch.spec.config import RunConfig
from launch.spec.load import load_spec
from launch.spec.plan import plan as make_plan
from launch.spec.run_record import run_spec_record
from schemas import RunDir, Writer, WriterKind, names, records, timefmt
from schemas.ledger_order import ORDER_FIELD
from schemas.order import node_owners
from schemas.vocab import PreflightCheck
from tests.harness.steps import lifecycle_phases

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo.toml"
T0 = 1_700_000_000.0

VISIBLE = tuple(str(i) for i in range(8))
DURATIONS = {"judge_health": 6.0, "ray_start": 4.0, "readiness": 2.0, "canaries": 3.0, "driver": 30.0}


class RunBuilder:
    def __init__(self, output_root: Path, uuid: str = "run-1", overrides: tuple[str, ...] = ()) -> None:
        resolved = load_spec(DEMO, overrides)  # overrides: `--set` items on the demo's spec
        self.spec = resolved.to_dict()
        self.fingerprint = resolved.fingerprint
        self.config = RunConfig.from_spec(resolved)
        self.plan = make_plan(self.config)
        self.run = RunDir.create(output_root, uuid, mode=0o750)
        self.path = self.run.path
        self.ranks = list(range(self.plan.replicas))
        # Set by with_summaries(): what a real run's records add (filesystem facts, doorbell counts).
        self.filesystem: dict[int, dict[str, Any]] = {}
        self.doorbell: dict[str, Any] | None = None
        addresses = {0: "10.0.0.10", 1: "10.0.0.9", 2: "10.0.0.100"}
        self.address = {r: addresses[r] for r in self.ranks}  # fewer for a single-node plan
        order = node_owners(self.address)  # the agent's own node order
        self.node_of = {r: i for i, r in enumerate(order)}
        self.rank_of_node = {i: r for r, i in self.node_of.items()}
        self.incarnation = {r: f"inc{r}0a1b2c" for r in self.ranks}
        peers = tuple(
            Peer(r, self.address[r], self.incarnation[r], self.fingerprint, f"gpu-node-{r}", VISIBLE) for r in order
        )
        self.topo = {
            r: Topology(self.plan.nodes[i], peers, self.plan.driver_node, self.plan.ray_nodes)
            for r, i in self.node_of.items()
        }
        # Each rank's phases: the agent's step table, on the nodes each step names.
        self.lifecycle = {
            r: tuple(map(str, lifecycle_phases(t, self.config.ray.enabled))) for r, t in self.topo.items()
        }
        self.driver_rank = self.rank_of_node[self.plan.driver_node]
        self.head_rank = next(r for r, t in self.topo.items() if t.is_head)
        judge_node = self.plan.judge_node("general")
        assert judge_node is not None, "the demo's judge takes a GPU"
        self.judge_rank = self.rank_of_node[judge_node]
        self.judge_devices = list(self.plan.nodes[judge_node].judge_devices["general"])  # [7] in the demo's plan
        self.run.write_artifact(
            names.SPEC,
            Writer(self.fingerprint, None, "launcher0", WriterKind.LAUNCHER),
            {"spec": self.spec, "source": "examples/demo.toml"} | self._order_identity(),
        )

    # -- helpers ---------------------------------------------------------------------------------

    def _order_identity(self) -> dict[str, Any]:
        """spec.json's ledger_order as a run writes it when it starts (only that: the demo's
        spec.json otherwise stays as the other tests know it)."""
        body = run_spec_record(self.config, "examples/demo.toml")
        return {k: v for k, v in body.items() if k == ORDER_FIELD}

    def writer(self, rank: int | None, kind: str = "agent") -> Writer:
        inc = self.incarnation[rank] if rank is not None else "head0"
        return Writer(self.fingerprint, rank, inc, WriterKind(kind))

    def write(self, relpath: str, rank: int | None, fields: dict[str, Any], kind: str = "agent") -> None:
        self.run.write_artifact(relpath, self.writer(rank, kind), fields)

    def log(self, relpath: str, text: str) -> None:
        self.run.write_bytes(relpath, text.encode())

    def phase_start(self, rank: int, phase: str) -> float:
        t = T0 + 0.2 * rank  # hosts start a little apart
        for p in self.lifecycle[rank]:
            if p == phase:
                return t
            t += DURATIONS.get(p, 0.5)
        raise KeyError(phase)

    def phases(
        self,
        rank: int,
        upto: str | None = None,
        *,
        state: str = "SUCCEEDED",
        last: str = "ok",
        detail: str = "",
    ) -> None:
        spans = []
        for p in self.lifecycle[rank]:
            start = self.phase_start(rank, p)
            if p == upto:
                ended = None if last == "running" else start + DURATIONS.get(p, 0.5) / 2
                spans.append({"phase": p, "started_at": start, "ended_at": ended, "outcome": last, "detail": detail})
                break
            spans.append({"phase": p, "started_at": start, "ended_at": start + DURATIONS.get(p, 0.5), "outcome": "ok"})
        self.write(
            names.phases(rank),
            rank,
            {
                "state": state,
                "node_index": self.node_of[rank],
                "address": self.address[rank],
                "phases": spans,
            },
        )

    # -- startup artifacts -------------------------------------------------------------------------

    def startup(self) -> None:
        """Everything up to (and including) canaries, on every rank."""
        for r in self.ranks:
            self.write(
                names.address(r),
                r,
                {
                    "address": self.address[r],
                    "hostname": f"gpu-node-{r}",
                    "visible_devices": list(VISIBLE),
                    "pid": 1000 + r,
                    "started_at": T0 + 0.2 * r,
                },
            )
            self.write(names.heartbeat(r), r, {"seq": 40 + r, "phase": "driver"})
            fields = self.topo[r].placement_fields(self.address[r], VISIBLE)
            if r in self.filesystem:
                fields = {**fields, "filesystem": self.filesystem[r]}
            self.write(names.placement(r), r, fields)
            self.log(names.agent_log(r), f"rank {r} agent started\nrendezvous ok\n")
            self.log(names.ray_log(r), "ray started\n")
        j = self.judge_rank
        endpoint = f"http://{self.address[j]}:30000"
        self.write(
            names.judge_endpoint("general", j),
            j,
            {
                "name": "general",
                "backend": "reference",
                "model": "reference-judge",
                "endpoint": endpoint,
                "host": self.address[j],
                "port": 30000,
                "pid": 2000,
                "devices": self.judge_devices,
                "argv": ["python", "-m", "agent.judges.reference_server"],
                "ready": True,
                "ready_after_s": 2.5,
                "log": names.judge_log("general", j),
            },
        )
        self.log(names.judge_log("general", j), "reference judge listening on :30000\nGET /health 200\n")
        h = self.head_rank
        layout = {self.address[r]: float(self.plan.nodes[self.node_of[r]].ray_gpus) for r in self.ranks}
        self.write(
            names.RAY_LAYOUT,
            h,
            {
                "head_address": self.address[h],
                "ray_address": f"{self.address[h]}:6379",
                "expected": layout,
                "actual": layout,
                "live_nodes": [
                    {"address": a, "gpus": g, "node_id": f"n{i}"} for i, (a, g) in enumerate(layout.items())
                ],
                "passed": True,
                "problems": [],
                "waited_s": 1.2,
            },
        )
        self.write(
            names.REGISTRY,
            h,
            {
                "judges": {
                    "general": {
                        "mode": "managed",
                        "backend": "reference",
                        "model": "reference-judge",
                        "endpoint": endpoint,
                        "timeout": 60,
                        "max_context_length": 8192,
                        "max_concurrent_calls": 8,
                        "rank": j,
                        "devices": self.judge_devices,
                    }
                },
                "rubrics": {
                    n: {
                        "profile": r.profile,
                        "digest": hashlib.sha256(n.encode()).hexdigest(),
                        "max_output_tokens": r.max_output_tokens,
                        "temperature": r.temperature,
                    }
                    for n, r in self.config.rubrics.items()
                },
                "bindings": {b.verifier: {"judge": b.judge, "rubric": b.rubric} for b in self.config.bindings},
            },
        )
        self.write(
            names.CANARIES,
            h,
            {
                "passed": True,
                "repetitions": 2,
                "bindings": [
                    {
                        "verifier": b.verifier,
                        "judge": b.judge,
                        "rubric": b.rubric,
                        "model_listed": True,
                        "passed": True,
                        "reason": "good 0.9 > bad 0.1",
                        "samples": [{"good": 0.9, "bad": 0.1}],
                    }
                    for b in self.config.bindings
                ],
            },
        )
        self.log(names.driver_log(self.driver_rank), "step 1 loss 2.31\nstep 2 loss 2.05\n")

    def finish(self) -> None:
        d = self.driver_rank
        self.write(
            names.DRIVER_RESULT,
            d,
            {
                "optimizer_steps": 3,
                "losses": [2.31, 2.05, 1.87],
                "final_loss": 1.87,
                "policy_version": 3,
                "policy_refreshes": 3,
                "judge_replies": 24,
            },
            kind="driver",
        )
        self.write(names.COMPLETE, d, {"driver_rank": d, "driver_exit_code": 0, "driver_seconds": 30.0})
        for r in self.ranks:
            self.write(names.ack(r), r, {"outcome": "success"})

    def cleanup(self, rank: int, outcome: str, kind: str = "agent", leftover: list[int] | None = None) -> None:
        groups = [{"name": "ray", "pid": 3000 + rank, "how": "sigterm", "exit_code": 0, "swept": 0}]
        if rank == self.judge_rank:
            groups.append({"name": "judge-general", "pid": 2000, "how": "sigterm", "exit_code": 0, "swept": 0})
        fields: dict[str, Any] = {"outcome": outcome, "groups": groups, "leftover_pids": leftover or []}
        if self.doorbell is not None and kind == "agent":
            fields["doorbell"] = {**self.doorbell, "port": 40000 + rank}
        self.write(names.cleanup(rank), rank, fields, kind=kind)

    def with_summaries(self) -> RunBuilder:
        """Records as a real run on two mounts with the doorbell on leaves them, so the audit's text
        prints every summary line it has (call before startup())."""
        for r in self.ranks:
            shared = r != 2  # rank 2 sees the output root through another mount
            self.filesystem[r] = {
                "type": "nfs4" if shared else "lustre",
                "source": "filer:/export/runs" if shared else "mds@tcp:/scratch",
                "mount_point": "/mnt/runs" if shared else "/scratch",
                "options": ["rw", "actimeo=1"] if shared else ["rw", "flock"],
                "warnings": [],
            }
        self.doorbell = {
            "rings": 1,
            "sent": 6,
            "send_errors": 0,
            "received": 4,
            "accepted": 2,
            "ignored_stopping": 0,
            "beacons_sent": 80,
            "beacons_received": 80,
            "dropped": {"malformed": 1},
        }
        return self

    def failure(
        self,
        rank: int,
        kind: str,
        cause: str,
        phase: str,
        at: float,
        *,
        log: str | None = None,
        reacting_to: dict[str, Any] | None = None,
        writer: str = "agent",
        peers: list[int] | None = None,
        **facts: Any,
    ) -> None:
        """A failure record built as the agent builds it; `facts`: exit_code, child, judge, signal,
        sender, fs_condition (schemas.records.failure_fields)."""
        fields = records.failure_fields(
            kind=kind,
            cause=cause,
            phase=phase,
            wall_time=at,
            monotonic_time=5000.0 + at - T0,
            log=log,
            reacting_to=reacting_to,
            peers=peers or [],
            **facts,
        )
        self.write(names.failure(rank), rank, fields, kind=writer)

    def react(self, rank: int, to: int, at: float, kind: str = "peer_failure", to_kind: str = "agent_died") -> None:
        ref = {"rank": to, "kind": to_kind}
        if kind == "peer_failure":
            ref["incarnation"] = self.incarnation[to]
        self.failure(
            rank,
            kind,
            f"rank {to} failed ({to_kind})"
            if kind == "peer_failure"
            else f"rank {to}'s heartbeat did not change for 120 s",
            "driver",
            at,
            reacting_to=ref,
        )
        self.phases(rank, "driver", state="FAILED", last="failed", detail=f"{kind} of rank {to}")
        self.cleanup(rank, "failure")


# -- scenarios ------------------------------------------------------------------------------------


def success(root: Path) -> RunBuilder:
    b = RunBuilder(root)
    b.startup()
    b.finish()
    for r in b.ranks:
        b.phases(r)
        b.cleanup(r, "success")
    return b


def killed_replica(root: Path) -> RunBuilder:
    """Rank 1 (the driver's node) is SIGKILLed during the driver; its reaper writes agent_died."""
    b = RunBuilder(root)
    b.startup()
    t = b.phase_start(1, "driver") + 12.0
    b.log(names.agent_log(1), "rank 1 agent started\nRUNNING driver started pid 4242\n")
    b.failure(
        1,
        "agent_died",
        "agent process 999 of rank 1 died without cleaning up (killed or crashed) during phase driver",
        "driver",
        t,
        log=names.agent_log(1),
        writer="reaper",
    )
    b.phases(1, "driver", state="RUNNING", last="running")
    b.cleanup(1, "failure", kind="reaper")
    b.react(0, 1, t + 0.6)
    b.react(2, 1, t + 0.8)
    return b


def _fails_in_driver(
    b: RunBuilder,
    rank: int,
    kind: str,
    cause: str,
    at: float,
    *,
    log: str,
    detail: str,
    react_after: float,
    **facts: Any,
) -> None:
    """`rank` fails during the driver (its record, phases, cleanup); every other rank reacts."""
    b.failure(rank, kind, cause, "driver", at, log=log, **facts)
    b.phases(rank, "driver", state="FAILED", last="failed", detail=detail)
    b.cleanup(rank, "failure")
    for r in b.ranks:
        if r != rank:
            b.react(r, rank, at + react_after + 0.1 * r, to_kind=kind)


DRIVER_TRACEBACK = """step 1 loss 2.31
step 2 loss 2.05
Traceback (most recent call last):
  File "examples/demo_driver.py", line 88, in <module>
    main()
  File "examples/demo_driver.py", line 80, in main
    loss = train_step(batch)
ValueError: loss became nan at step 3
"""


def driver_failure(root: Path) -> RunBuilder:
    b = RunBuilder(root)
    b.startup()
    d = b.driver_rank
    t = b.phase_start(d, "driver") + 9.0
    b.log(names.driver_log(d), DRIVER_TRACEBACK)
    cause = "driver exited with code 1"
    _fails_in_driver(b, d, "driver_exit", cause, t, log=names.driver_log(d), detail=cause, react_after=0.5, exit_code=1)
    return b


def judge_degraded(root: Path) -> RunBuilder:
    """The driver's grades through binding general-quality went bad: the agent failed the run."""
    b = RunBuilder(root)
    b.startup()
    d = b.driver_rank
    t = b.phase_start(d, "driver") + 12.0
    b.log(names.driver_log(d), "gym judge client: judge degraded: binding 'general-quality' ...\n")
    cause = (
        "judge degraded: binding 'general-quality' (judge general, rubric general-quality): 6 of its last 40 "
        "replies were invalid or truncated; seq 39 invalid: 'Reasoning: ...'; seq 40 invalid: 'Reasoning: ...'"
    )
    _fails_in_driver(
        b, d, "judge_degraded", cause, t, log=names.driver_log(d), detail=cause, react_after=0.5,
        judge="general", binding="general-quality",
    )  # fmt: skip
    return b


JUDGE_LOG = """reference judge listening on :30000
GET /health 200
POST /v1/chat/completions 200
RuntimeError: CUDA error: out of memory
GET /health 500
GET /health 500
GET /health 500
"""


def judge_failure(root: Path) -> RunBuilder:
    b = RunBuilder(root)
    b.startup()
    j = b.judge_rank
    t = b.phase_start(j, "driver") + 15.0
    log = names.judge_log("general", j)
    b.log(log, JUDGE_LOG)
    cause = "judge general failed 3 consecutive /health probes"
    _fails_in_driver(
        b, j, "judge_health", cause, t, log=log, detail="judge general unhealthy", react_after=0.4, judge="general"
    )
    return b


def peer_silent(root: Path) -> RunBuilder:
    """Rank 0's host vanishes during the driver: no failure record, no cleanup; peers time it out."""
    b = RunBuilder(root)
    b.startup()
    b.phases(0, "driver", state="RUNNING", last="running")
    t = b.phase_start(1, "driver") + 140.0
    for r, dt in ((1, 0.0), (2, 0.7)):
        b.react(r, 0, t + dt, kind="peer_silent", to_kind="peer_silent")
    return b


def ending(root: Path, rank: int, kind: str, words: Sequence[str] = ()) -> RunBuilder:
    """`rank` ends the run with a failure of `kind` during the driver (kind "silent": it vanishes
    and its watchers time it out), its peers react, and every summary line has its records. The
    cause carries `words` (what the real cause says); a `preflight` failure also leaves the node's
    failed preflight record (the check: the first word that names one)."""
    b = RunBuilder(root).with_summaries()
    b.startup()
    t = b.phase_start(rank, "driver") + 10.0
    if kind == "silent":
        b.phases(rank, "driver", state="RUNNING", last="running")
        for r in b.ranks:
            if r != rank:
                b.react(r, rank, t + 0.1 * r, kind="peer_silent", to_kind="peer_silent")
        return b
    log = names.agent_log(rank)
    b.log(log, f"rank {rank} agent started\nRUNNING driver started pid 4242\n{kind}: the fault matrix's ending\n")
    writer = "reaper" if kind == "agent_died" else "agent"
    # The row's words are what the real cause says of it (a hang's "no progress for", its step).
    cause = f"{kind} of rank {rank}, as the fault matrix ends it" + "".join(f"; {w}" for w in words)
    if kind == "preflight":
        check = next((w for w in words if w in {str(c) for c in PreflightCheck}), "network")
        cause = f"node {rank} failed preflight: {check}: " + "; ".join(w for w in words if w != check)
        b.write(names.preflight(rank), rank, _failed_preflight(rank, check, cause))
    b.failure(rank, kind, cause, "driver", t, log=log, writer=writer)
    b.phases(rank, "driver", state="FAILED", last="failed", detail=kind)
    b.cleanup(rank, "failure", kind=writer)
    for r in b.ranks:
        if r != rank:
            b.react(r, rank, t + 0.5 + 0.1 * r, to_kind=kind)
    return b


def _failed_preflight(rank: int, check: str, problem: str) -> dict[str, Any]:
    """preflight-RANK.json of a node whose `check` failed (agent/preflight/_run.py's shape)."""
    checks = [
        {
            "check": str(c),
            "mode": "fail",
            "status": "failed" if str(c) == check else "ok",
            "seconds": 0.01,
            "summary": str(c),
            "problems": [problem] if str(c) == check else [],
            "facts": {},
        }
        for c in PreflightCheck
    ]
    return {
        "node_index": rank,
        "address": f"10.0.0.{rank + 1}",
        "hostname": f"gpu-node-{rank}",
        "scheduler_node": f"gpu-node-{rank}",
        "passed": False,
        "seconds": 0.05,
        "checks": checks,
    }


SCENARIOS: dict[str, Callable[[Path], RunBuilder]] = {
    "success": success,
    "killed_replica": killed_replica,
    "driver_failure": driver_failure,
    "judge_failure": judge_failure,
    "peer_silent": peer_silent,
}


def _frames(*frames: tuple[str, str, int]) -> list[dict[str, Any]]:
    return [{"function": fn, "file": f, "line": line} for fn, f, line in frames]


RAY_WORKER = "/opt/venv/lib/python3.11/site-packages/ray/_private/worker.py"
THREADING = "/usr/lib/python3.11/threading.py"
TRAIN = "/work/train.py"


def stacks_fields(processes: list[dict[str, Any]], *, reason: str = "hang", **over: Any) -> dict[str, Any]:
    """stacks-RANK.json's fields as agent/stacks/capture.py builds them, around `processes`."""
    return {
        "reason": reason,
        "request": None,
        "trigger": {"kind": "hang", "cause": "the driver made no progress"},
        "started_at": T0 + 100.0,
        "seconds": 0.4,
        "timeout": 30.0,
        "py_spy": {"path": "/opt/venv/bin/py-spy", "version": "py-spy 0.4.3", "problem": None},
        "ptrace": {"permitted": True, "problem": None, "grant": None},
        "fallback_dumps": 0,
        "processes": processes,
        "processes_not_shown": 0,
        "truncated": False,
        **over,
    }


def stack_process(pid: int, role: str, frames: list[dict[str, Any]], *, title: str = "python") -> dict[str, Any]:
    return {
        "pid": pid,
        "role": role,
        "group": {"driver": "driver", "judge": "judge-general"}.get(role, "ray-worker"),
        "name": "python",
        "cmdline": [title],
        "method": "py-spy",
        "threads": [
            {"id": pid, "main": True, "name": "MainThread", "active": False, "frames": frames, "frames_cut": 0}
        ],
        "threads_cut": 0,
    }


def hang(root: Path, stuck_rank: int | None = None) -> RunBuilder:
    """The driver hangs in ray.get: its Ray actor on `stuck_rank` (default: the judge's node) is
    stuck loading weights while the others wait in a barrier. The driver's node calls the hang;
    every node kept its processes' stacks."""
    b = RunBuilder(root)
    b.startup()
    d = b.driver_rank
    stuck = b.judge_rank if stuck_rank is None else stuck_rank
    t = b.phase_start(d, "driver") + 25.0
    b.log(names.driver_log(d), "step 1 loss 2.31\nstep 2 loss 2.05\nstep 3 loss 1.98\n")
    hang_facts = {
        "source": "progress",
        "timeout_key": "progress_timeout",
        "timeout": 600.0,
        "idle_seconds": 600.4,
        "last_progress_at": t - 600.4,
        "last_step": 3,
        "progress_count": 3,
    }
    cause = (
        "the driver made no progress for 600.4s (progress_timeout 600s; watched: progress() calls); last progress "
        f"at {timefmt.iso_ms(t - 600.4)}, step 3"
    )
    _fails_in_driver(b, d, "hang", cause, t, log=names.driver_log(d), detail=cause, react_after=0.2, hang=hang_facts)
    for r in b.ranks:
        procs = []
        if r == d:
            procs.append(
                stack_process(
                    4000, "driver", _frames(("get", RAY_WORKER, 2858), ("train", TRAIN, 51), ("<module>", TRAIN, 70))
                )
            )
        actor = (
            _frames(("load_weights", TRAIN, 12), ("run", TRAIN, 20), ("main_loop", RAY_WORKER, 900))
            if r == stuck
            else _frames(("wait", THREADING, 629), ("barrier", TRAIN, 16), ("run", TRAIN, 22))
        )
        procs.append(stack_process(4711 + r, "ray_worker", actor, title="ray::Shard.run"))
        procs.append(stack_process(5000 + r, "ray_worker", _frames(("main_loop", RAY_WORKER, 900)), title="ray::IDLE"))
        b.write(names.stacks(r), r, stacks_fields(procs))
    return b
