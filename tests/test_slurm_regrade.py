"""gym-launch regrade on the real local Slurm cluster (gpu: n1..n3, MaxTime 02:00:00; cpu: c1,
no GPUs, MaxTime 01:00:00): one finished run of each kind is graded again for real.

- CPU kind: a one-node demo whose judge is external (a reference judge server this test starts
  on 127.0.0.1, reached over HTTP from every node). Its judge job queues on the CPU partition the
  reader placement names, with its walltime bounded by that partition's real MaxTime, starts no
  judge and no Ray, and grades the demo's saved answers through the external judge.
- Served-judge kind: a pooled run (policy: 2 nodes, judge: 1 node with the judge pinned to it).
  Its judge job keeps only the judge pool (one GPU node), starts the judge there, checks health,
  registry and canaries, and grades the saved answers through it; --judge-partition/--judge-qos
  are reported as not used.

Each judge job's run directory passes gym-audit, its regrade.json names the source run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _judge_server import start_server
from slurm import cluster as slurm
from test_slurm_cluster import wait_nodes_clean
from test_slurm_rendered import JOB_TIMEOUT_S, assert_passed, spec, submit

from launch import _regrade as rg
from schemas import names
from schemas.vocab import LauncherEnv
from tests.harness import assert_artifacts_valid, assert_nothing_left, audit, failures, read, uid

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = ("n1", "n2", "n3", "c1")
GRADER = REPO / "examples" / "regrade_answers.py"


def regrade(
    c: slurm.Cluster, run_dir: Path, uuid: str, grades: Path, *extra: str, env: dict[str, str] | None = None
) -> dict:
    r = subprocess.run(
        [str(BIN / "gym-launch"), "regrade", str(run_dir), "--uuid", uuid, "--json"]
        + ["--command", f"python {GRADER} {run_dir} {grades}", *extra],
        cwd=REPO,
        env=c.env(env or {}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def assert_regraded(c: slurm.Cluster, source: Path, profile: dict, grades: Path) -> Path:
    run_dir = Path(profile["run_dir"])
    assert run_dir.parent == source.parent  # beside the run, in the same output root
    info = c.wait_job(int(profile["job_id"]), JOB_TIMEOUT_S)
    out = (run_dir / names.slurm_output(profile["job_id"])).read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, out[-4000:])
    assert_artifacts_valid(run_dir)  # regrade.json and submission.json included: validated against their schemas
    submission = read(run_dir, names.SUBMISSION)
    assert (submission["backend"], submission["job_id"]) == ("slurm", str(profile["job_id"]))
    assert isinstance(submission["submitted_at"], float), submission  # as gym-launch submit records it
    assert not failures(run_dir)
    record = read(run_dir, names.REGRADE)
    assert record["source_run_dir"] == str(source) and record["source_uuid"] == source.name
    assert record["source_fingerprint"] == read(source, names.SPEC)["fingerprint"]
    assert record["profile"]["kind"] == profile["kind"]
    cli = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout.startswith("gym-audit: PASS"), cli.stdout[-3000:] + cli.stderr
    result = audit(run_dir, verdict="pass")
    assert any(f.code == "regrade.source" for f in result.findings), result.findings
    # The saved answers were graded again, every one, through this job's judges.
    saved = read(source, names.DRIVER_RESULT)["judge_samples"]
    regraded = json.loads(grades.read_text())["grades"]
    assert len(saved) == len(regraded) > 0
    assert [g["answer"] for g in regraded] == [s["answer"] for s in saved]
    # The reference judge is deterministic: the same answer gets the same score again.
    assert [g["regraded_score"] for g in regraded] == [s["score"] for s in saved]
    assert_nothing_left(run_dir)
    wait_nodes_clean(c, list(NODES))
    assert c.queue() == []
    return run_dir


@pytest.mark.ray
def test_cpu_profile_regrades_a_run_with_an_external_judge_on_the_cpu_partition(
    slurm_cluster: slurm.Cluster, tmp_path: Path
) -> None:
    c, root = slurm_cluster, tmp_path / "out"
    server = start_server(tmp_path, model="reference-judge", name="external")
    try:
        uuid = uid("rgsrc")
        external = (
            f'judges.general={{mode="external",model="reference-judge",endpoint="{server.base_url}",'
            "max_context_length=8192,timeout=60}"
        )
        job = submit(
            c,
            REPO / "examples" / "demo.toml",
            root,
            uuid,
            "--set",
            f'launch.slurm.agent="{BIN / "gym-agent"}"',
            "--set",
            "launch.slurm.explicit_address=true",
            "--set",
            'launch.slurm.time="01:30:00"',  # within gpu's MaxTime, beyond cpu's
            "--set",
            external,
            "--set",
            "inference.gpus=4",  # trainer 4 + rollout 4: one node
        )
        source = root / "cluster" / uuid
        assert_passed(c, job, source)
        assert read(source, names.DRIVER_RESULT)["judge_replies"] > 0

        grades = tmp_path / "grades-cpu.json"
        profile = regrade(c, source, uid("rgcpu"), grades, env={LauncherEnv.READER_SRUN: "-p cpu"})
        assert (profile["kind"], profile["partition"]) == ("cpu", "cpu")
        assert LauncherEnv.READER_SRUN in profile["partition_source"]
        assert (profile["qos"], profile["qos_source"]) == (None, rg.PARTITION_DEFAULT)
        # The run's 01:30:00 bounded by the real MaxTime of partition cpu.
        assert profile["walltime"] == "01:00:00"
        assert profile["walltime_bounds"][1] == "bounded by MaxTime 01:00:00 of partition cpu"
        assert (profile["services"], profile["external_judges"]) == ([], ["general"])
        run_dir = assert_regraded(c, source, profile, grades)
        info = c.job(int(profile["job_id"]))
        assert (info["NodeList"], info["Partition"]) == ("c1", "cpu"), info
        assert info["TimeLimit"] == "01:00:00", info
        addr = read(run_dir, names.address(0))
        assert addr["hostname"] == "c1" and addr["visible_devices"] == []
        assert not list(run_dir.glob("judge-general-*.json"))  # no judge started
        judge = read(run_dir, names.REGISTRY)["judges"]["general"]
        # The regrade's clients reach the external judge through its gateway, on the job's node.
        assert judge["upstream"] == server.base_url
        assert judge["endpoint"] == read(run_dir, names.gateway_record("general"))["endpoint"]
    finally:
        server.stop()


@pytest.mark.ray
@pytest.mark.long  # a second rendered re-grade job; `make test` keeps the CPU profile's above
def test_served_judge_profile_regrades_a_pooled_run_on_the_judge_pool_alone(
    slurm_cluster: slurm.Cluster, tmp_path: Path
) -> None:
    c, uuid, root = slurm_cluster, uid("rgpool"), tmp_path / "out"
    body = """
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 12
[pools.policy]
nodes = 2
gpus_per_node = 8
[pools.judge]
nodes = 1
gpus_per_node = 8
[ray]
num_cpus = 1
object_store_memory = 100000000
"""
    sp = spec(tmp_path, "rgpool", body=body, driver_env={}, judge_pool="judge")
    job = submit(c, sp, root, uuid)
    source = root / "cluster" / uuid
    assert_passed(c, job, source)

    grades = tmp_path / "grades-served.json"
    profile = regrade(c, source, uid("rgserved"), grades, "--judge-partition", "cpu", "--judge-qos", "cpu-qos")
    assert profile["kind"] == "served-judge" and profile["services"] == ["general"]
    assert [p["name"] for p in profile["pools"]] == ["judge"] and profile["pools"][0]["gpus_per_node"] == 8
    assert rg.CPU_PLACEMENT_UNUSED in profile["unused"]
    assert profile["partition"] is None and profile["partition_source"] == rg.CLUSTER_DEFAULT
    # The run's 00:10:00, within the real MaxTime of the default partition (gpu).
    assert profile["walltime"] == "00:10:00"
    assert profile["walltime_bounds"][1] == f"within MaxTime 02:00:00 of {rg.CLUSTER_DEFAULT}"
    run_dir = assert_regraded(c, source, profile, grades)
    info = c.job(int(profile["job_id"]))
    assert info["Partition"] == "gpu" and info["NumNodes"] == "1", info
    # The judge started on the job's one node, was checked, and served the grading.
    assert read(run_dir, names.judge_endpoint("general", 0))["ready"] is True
    assert read(run_dir, names.CANARIES)["passed"] is True
    placement = read(run_dir, names.placement(0))
    assert list(placement["judges"]) == ["general"] and placement["trainer_gpus"] == 0
    assert os.path.exists(run_dir / names.judge_log("general", 0))
