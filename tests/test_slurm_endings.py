"""Endings the scheduler causes, on the real local Slurm cluster (issue 23): a job that hits its
time limit, a job cancelled with scancel, a job whose node is set DOWN. Each time every agent
gets SIGTERM from slurmstepd and no rank failed; the audit names the scheduler's ending (kind and
its own words), not a rank's SIGTERM, and nothing is left running.

The specs are tests/test_slurm_rendered.py's (one trainer node, judges, the demo driver made to
run for long), submitted with `gym-launch submit --backend slurm`.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from slurm import cluster as slurm
from test_slurm_cluster import wait_nodes_clean
from test_slurm_rendered import BIN, NODES, finished, spec, submit

from schemas import FailureKind
from tests.harness import assert_artifacts_valid, assert_nothing_left, failures, uid, wait_phase

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

BODY = """
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 19
[ray]
num_cpus = 1
object_store_memory = 100000000
"""
LONG = {"DEMO_STEPS": "100000"}


def _ended(c: slurm.Cluster, job: int, run_dir: Path, kind: str) -> dict:
    info, out = finished(c, job, run_dir)
    assert info["JobState"] != "COMPLETED", info
    assert_artifacts_valid(run_dir)
    recs = failures(run_dir)
    # No rank failed: every record is the scheduler's signal or a reaction to a peer's.
    assert recs and all(
        v["kind"] in (FailureKind.SIGNAL, FailureKind.PEER_FAILURE, FailureKind.PEER_SILENT) for v in recs.values()
    ), recs
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1, cli.stdout[-3000:] + cli.stderr
    doc = json.loads(cli.stdout)
    fc = doc["first_cause"]
    assert fc["kind"] == kind and fc["scheduler"] == "slurm", (fc, out[-3000:])
    assert f"slurm ended job {job}" in fc["cause"] and "*** JOB" in fc["cause"], fc
    text = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, timeout=120)
    lines = text.stdout.splitlines()
    assert lines[lines.index("First cause:") + 1].strip().startswith(f"slurm (the scheduler), {kind}"), text.stdout[
        :2000
    ]
    assert_nothing_left(run_dir)
    return fc


def test_a_time_limit_is_named(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("tlimit"), tmp_path / "out"
    t0 = time.monotonic()
    job = submit(
        c, spec(tmp_path, "tlimit", body=BODY, driver_env=LONG), root, uuid, "--set", 'launch.slurm.time="00:01:00"'
    )
    fc = _ended(c, job, root / "cluster" / uuid, FailureKind.TIME_LIMIT)
    assert "DUE TO TIME LIMIT" in fc["cause"]
    wait_nodes_clean(c, list(NODES))
    print(f"time limit: job {job} ended and audited {time.monotonic() - t0:.1f}s after submit")


def test_a_cancel_is_named(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("cancel"), tmp_path / "out"
    job = submit(c, spec(tmp_path, "cancel", body=BODY, driver_env=LONG), root, uuid)
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    c.run(["scancel", str(job)])
    _ended(c, job, run_dir, FailureKind.CANCELLED)
    wait_nodes_clean(c, list(NODES))


def test_a_node_set_down_is_named(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    c, uuid, root = slurm_cluster, uid("ndown"), tmp_path / "out"
    # Without a requeue the job ends NODE_FAIL: this test is about naming the ending.
    path = spec(tmp_path, "ndown", body=BODY, driver_env=LONG)
    job = submit(c, path, root, uuid, "--set", 'launch.slurm.directives=["--no-requeue"]')
    run_dir = root / "cluster" / uuid
    wait_phase(run_dir, 0, "driver", 180)
    try:
        c.run(["scontrol", "update", "nodename=n2", "state=down", "reason=gym-test"])
        fc = _ended(c, job, run_dir, FailureKind.NODE_FAILURE)
    finally:
        c.run(["scontrol", "update", "nodename=n2", "state=resume"], check=False)
    assert "node n2" in fc["cause"] and "DUE TO NODE FAILURE" in fc["cause"], fc
    wait_nodes_clean(c, list(NODES))
