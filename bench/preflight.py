"""The preflight's cost per node, and the large-cluster Ray settings against the installed Ray.

    python -m bench --only preflight

Cost: the agent's own preflight step (agent/preflight/_run.py) on this GPU-less machine, every
check on, the network check probing PEERS real doorbells on 127.0.0.x (each answers on its own
thread, as a peer agent's does); and `gym-launch preflight`'s child as a whole process (interpreter
start and imports included). Goal: at most 1 s per node without GPUs.

Ray: every RAY_<name> the large-cluster settings render (agent/ray/_large_cluster.py, head and
worker) must be a name the installed Ray reads: a `RAY_<name>` string compiled into its GCS
server, raylet or core worker (each ray_config_def.h entry is read from the environment under
that name), or one its Python side reads from os.environ.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.coord.doorbell import Doorbell, PeerBell
from agent.coord.doorbell_probe import Prober, probe_peers
from agent.preflight._run import PreflightInputs, run_preflight
from agent.ray import _large_cluster as large_cluster
from launch.spec.config import RunConfig
from launch.spec.load import load_spec
from tests.harness.specs import small_spec

PEERS = 16
SAMPLES = 20
GOAL_S = 1.0
NAME_RE = re.compile(rb"RAY_([A-Za-z][A-Za-z0-9_]*)")


def ray_config_names() -> tuple[set[str], list[str]]:
    """The RAY_* names the installed Ray reads, and the files they were read from."""
    import ray

    root = Path(ray.__file__).parent
    binaries = [root / "_raylet.so", root / "core/src/ray/gcs/gcs_server", root / "core/src/ray/raylet/raylet"]
    found: set[str] = set()
    read = []
    for path in binaries:
        if path.is_file():
            found.update(m.decode() for m in NAME_RE.findall(path.read_bytes()))
            read.append(str(path.relative_to(root.parent)))
    for path in (root / "_private").glob("*.py"):
        found.update(m.decode() for m in NAME_RE.findall(path.read_bytes()))
    return found, read


def check_ray_settings() -> dict[str, Any]:
    known, files = ray_config_names()
    rows = []
    for s in large_cluster.SETTINGS:
        rows.append({"variable": s.variable, "value": s.value, "head_only": s.head_only, "known": s.name in known})
    rendered = {**large_cluster.settings(True), **large_cluster.settings(False)}
    return {
        "ray_files": files,
        "names_known": len(known),
        "settings": rows,
        "rendered": rendered,
        "unknown": [r["variable"] for r in rows if not r["known"]],
    }


def _bells(n: int, secret: bytes) -> list[Doorbell]:
    out = []
    for i in range(n):
        bell, why = Doorbell.bind(f"127.0.0.{10 + i}")
        assert bell is not None, why
        bell.arm(
            secret,
            run="bench",
            attempt=1,
            rank=i + 1,
            incarnation=f"i{i + 1}",
            on_ring=lambda _r: None,
            stopping=lambda: False,
        )
        bell.start()
        out.append(bell)
    return out


def preflight_cost(samples: int = SAMPLES, peers: int = PEERS) -> dict[str, Any]:
    secret = os.urandom(32)
    bells = _bells(peers, secret)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.toml"
        spec.write_text(small_spec(ray=False))
        config = RunConfig.from_spec(load_spec(str(spec), []))
        targets = [PeerBell(i + 1, f"127.0.0.{10 + i}", b.port, f"i{i + 1}") for i, b in enumerate(bells)]
        inputs = PreflightInputs(
            config=config.launch.preflight,
            address="127.0.0.2",
            hostname="bench",
            node_index=0,
            devices=((0, "0"), (1, "1")),
            env={"NCCL_SOCKET_IFNAME": ("lo", "bench"), "GLOO_SOCKET_IFNAME": ("lo", "bench")},
            paths=(("output root", Path(tmp)), ("checkpoint directory", Path(tmp) / "checkpoints")),
            job_started=time.time(),
            probe=lambda: probe_peers(Prober(secret, "bench", 1, 0, "i0"), targets, "127.0.0.2", 10.0),
        )
        totals, per_check = [], {}
        try:
            for _ in range(samples):
                report = run_preflight(inputs)
                totals.append(report.seconds)
                for r in report.results:
                    per_check.setdefault(str(r.check), []).append(r.seconds)
        finally:
            for b in bells:
                b.stop()
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "agent.preflight", str(spec), "--address", "127.0.0.2", "--output-root", tmp],
            capture_output=True,
            text=True,
        )
        process = time.monotonic() - t0
    return {
        "samples": samples,
        "peers": peers,
        "median_s": statistics.median(totals),
        "max_s": max(totals),
        "per_check_median_s": {k: statistics.median(v) for k, v in per_check.items()},
        "statuses": {str(r.check): str(r.status) for r in report.results},
        "process_s": process,
        "process_exit": done.returncode,
        "goal_s": GOAL_S,
    }


def part(res: dict) -> None:
    print(f"\n## Preflight: one node's checks on this GPU-less machine, {PEERS} peers probed on their doorbells")
    cost = res["preflight"] = preflight_cost()
    checks = ", ".join(f"{k} {v * 1000:.1f} ms ({cost['statuses'][k]})" for k, v in cost["per_check_median_s"].items())
    print(
        f"in the agent: median {cost['median_s'] * 1000:.1f} ms, max {cost['max_s'] * 1000:.1f} ms over "
        f"{cost['samples']} runs; per check: {checks}"
    )
    print(
        f"as a process (python -m agent.preflight, imports included): {cost['process_s']:.2f} s, "
        f"exit {cost['process_exit']}"
    )
    ok = cost["max_s"] <= GOAL_S and cost["process_s"] <= GOAL_S * 3
    print(f"goal: at most {GOAL_S:g} s per node without GPUs: {'met' if cost['max_s'] <= GOAL_S else 'MISSED'}")
    res["preflight_goal_met"] = ok
    print("\n## Large-cluster Ray settings against the installed Ray's own config names")
    ray = res["ray_settings"] = check_ray_settings()
    print(f"{ray['names_known']} RAY_* names read from {', '.join(ray['ray_files'])} and ray/_private")
    width = max(len(f"{r['variable']}={r['value']}") for r in ray["settings"])
    for row in ray["settings"]:
        where = "head" if row["head_only"] else "all"
        setting = f"{row['variable']}={row['value']}"
        print(f"  {setting:<{width}}  {where:<5} {'known' if row['known'] else 'NOT KNOWN'}")
    print("every setting is a name Ray reads" if not ray["unknown"] else f"UNKNOWN to this Ray: {ray['unknown']}")
