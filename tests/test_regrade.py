"""gym-launch regrade, pure part (launch/_regrade.py): every precedence rule and refusal of the
judge-only profile (seed 003), the walltime bound, the judge job's spec (resolved, planned and
rendered for real), the CPU-pool rules of the spec model, and the command line on a run
directory (the scheduler's `scontrol` is a stand-in on PATH here; tests/test_slurm_regrade.py
runs it against the real local cluster)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch import _regrade as rg
from launch.backends.base import RenderRequest
from launch.backends.slurm._render import directive_lines, render
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec, resolved_from_dict, spec_record
from launch.spec.plan import plan as make_plan
from schemas import RunDir, Writer, WriterKind, names, violations
from schemas.vocab import LauncherEnv

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.toml"
GYM_LAUNCH = str(Path(sys.executable).parent / "gym-launch")
EXTERNAL = (
    'judges.general={mode="external",model="reference-judge",endpoint="http://127.0.0.1:9",max_context_length=8192}'
)

POOLED = """
name = "pooled"
[launch]
gpus_per_replica = 8
node_gpus = 8
[trainer]
nodes = 1
gpus_per_node = 4
[inference]
gpus = 12
[driver]
command = ["python", "_driver.py"]
[judges.general]
mode = "managed"
backend = "reference"
model = "reference-judge"
node_pool = "judge"
[judges.spare]
mode = "managed"
backend = "reference"
model = "reference-judge"
[rubrics.q]
profile = "general-quality"
[judging.bindings.v]
judge = "general"
rubric = "q"
[pools.policy]
nodes = 2
gpus_per_node = 8
[pools.judge]
nodes = 1
gpus_per_node = 8
"""

CPU_RUN = """
name = "cpu-run"
[launch]
gpus_per_replica = 8
node_gpus = 8
[trainer]
nodes = 0
gpus_per_node = 4
[inference]
gpus = 0
[driver]
command = "true"
[judges.general]
mode = "external"
model = "reference-judge"
endpoint = "http://127.0.0.1:9"
[rubrics.q]
profile = "general-quality"
[judging.bindings.v]
judge = "general"
rubric = "q"
[pools.readers]
nodes = 1
gpus_per_node = 0
partition = "cpu-saved"
qos = "pool-qos"
[ray]
enabled = false
"""


# A GPU run with a CPU pool beside its policy's (a heterogeneous job): seed 003's first source of the
# CPU partition.
GPU_WITH_CPU_POOL = (
    CPU_RUN.replace("nodes = 0\ngpus_per_node = 4", "nodes = 1\ngpus_per_node = 4")
    .replace("[inference]\ngpus = 0", "[inference]\ngpus = 4")
    .replace("[pools.readers]", "[pools.policy]\nnodes = 1\ngpus_per_node = 8\n[pools.readers]")
    .replace("[ray]\nenabled = false\n", "")
)


def demo_external(*overrides: str) -> RunConfig:
    return RunConfig.from_spec(load_spec(DEMO, (EXTERNAL, *overrides)))


def from_text(tmp: Path, text: str, *overrides: str) -> RunConfig:
    p = tmp / "run.toml"
    p.write_text(text)
    return RunConfig.from_spec(load_spec(p, overrides))


def profile(config: RunConfig, max_time: str | None = None, **placement: str) -> rg.Profile:
    return rg.derive_profile(config, rg.Placement(**placement), max_time)


# --- kinds and refusals ---------------------------------------------------------------------


def test_a_run_serving_nothing_beside_its_policy_gets_the_cpu_profile() -> None:
    p = profile(demo_external(), judge_partition="cpu")
    assert (p.kind, p.services, p.external) == (rg.CPU, (), ("general",))
    assert [x.to_json() for x in p.pools] == [
        {"name": "judge", "nodes": 1, "gpus_per_node": 0, "partition": "cpu", "qos": None, "tasks_per_node": 1}
    ]


def test_a_judge_pinned_to_its_own_pool_gets_the_served_judge_profile(tmp_path: Path) -> None:
    p = profile(from_text(tmp_path, POOLED), "02:00:00")
    assert p.kind == rg.SERVED_JUDGE and p.services == ("general",)  # spare is bound to nothing: not started
    assert [x.name for x in p.pools] == ["judge"] and p.pools[0].gpus_per_node == 8
    assert any("pools policy" in u for u in p.unused)


def test_a_judge_on_the_policys_nodes_is_refused_naming_it_and_what_would_allow_it() -> None:
    with pytest.raises(rg.RegradeRefused) as err:
        profile(RunConfig.from_spec(load_spec(DEMO)), judge_partition="cpu")
    msg = str(err.value)
    assert "judge general runs on the policy's own nodes" in msg
    assert "judges.general.node_pool" in msg and "pool of its own" in msg


def test_a_pooled_run_with_an_unpinned_judge_is_refused(tmp_path: Path) -> None:
    config = from_text(tmp_path, POOLED, "judging.bindings.w={judge='spare',rubric='q'}")
    with pytest.raises(rg.RegradeRefused, match="judge spare runs on the policy's own nodes"):
        profile(config)


# Seed 003: "A service that runs on the policy's own nodes has no served-judge profile: the judge job
# does not start the policy's allocation." A pool of the judge's that the trainer or rollout share is
# the policy's nodes, however it is named.
SHARED_POOL = (
    "trainer.node_pool='policy'",
    "inference.node_pool='policy'",
    "judges.general.node_pool='policy'",
    "judges.general.gpus=2",
    "pools.policy.nodes=3",
)


@pytest.mark.parametrize(
    ("overrides", "holds"),
    [
        (SHARED_POOL, "the trainer (trainer.node_pool = 'policy') and the rollout engines"),
        (SHARED_POOL[1:] + ("pools.judge.nodes=2",), "the rollout engines (inference.node_pool = 'policy')"),
    ],
)
def test_a_judge_on_a_pool_the_policy_shares_is_refused_naming_the_pool_and_the_fix(
    tmp_path: Path, overrides: tuple[str, ...], holds: str
) -> None:
    config = from_text(tmp_path, POOLED, *overrides)
    make_plan(config)  # the run itself is valid: only its re-grading is refused
    with pytest.raises(rg.RegradeRefused) as err:
        profile(config, "02:00:00")
    msg = str(err.value)
    assert f"its pool policy also holds {holds}" in msg
    assert "3 x 8 GPUs for a 2-GPU judge" in msg and "judges.general.node_pool" in msg
    assert "node pool of its own" in msg


def test_two_judges_on_one_pool_of_their_own_get_one_served_judge_profile(tmp_path: Path) -> None:
    config = from_text(
        tmp_path, POOLED, "judges.spare.node_pool='judge'", "judging.bindings.w={judge='spare',rubric='q'}"
    )
    p = profile(config, "02:00:00")
    assert p.kind == rg.SERVED_JUDGE and p.services == ("general", "spare")
    assert [(x.name, x.nodes, x.gpus_per_node) for x in p.pools] == [("judge", 1, 8)]


def test_a_judge_alone_on_its_pool_beside_pinned_policy_pools_is_served(tmp_path: Path) -> None:
    config = from_text(tmp_path, POOLED, "trainer.node_pool='policy'", "inference.node_pool='policy'")
    p = profile(config, "02:00:00")
    assert p.kind == rg.SERVED_JUDGE and p.services == ("general",)
    assert [x.name for x in p.pools] == ["judge"]
    assert any("pools policy" in u for u in p.unused)


def test_served_judges_on_two_partitions_are_refused(tmp_path: Path) -> None:
    text = POOLED.replace(
        "[pools.judge]", "[pools.judge2]\nnodes = 1\ngpus_per_node = 8\npartition = 'b'\n[pools.judge]"
    )
    config = from_text(
        tmp_path,
        text,
        "judges.spare.node_pool='judge2'",
        "judging.bindings.w={judge='spare',rubric='q'}",
        "pools.judge.partition='a'",
    )
    with pytest.raises(rg.RegradeRefused, match="different partitions"):
        profile(config)


# --- CPU partition precedence -------------------------------------------------------------------


def test_cpu_partition_flag_wins_over_the_saved_cpu_pool(tmp_path: Path) -> None:
    # Seed 003's function reference: an explicit --judge-partition wins, then the saved CPU pool, then the
    # reader placement (its prose orders it otherwise: docs/guides/regrade.md).
    config = from_text(tmp_path, GPU_WITH_CPU_POOL)
    assert make_plan(config).nodes[1].gpus == 0  # the CPU pool beside the policy's GPU pool
    p = profile(config, judge_partition="flag", reader_srun="-p reader")
    assert (p.partition, p.partition_source) == ("flag", "--judge-partition")
    # The saved pool is of another partition: it lends the judge node nothing (not its QOS either).
    assert p.qos is None and any(u.startswith("pools readers: its partition cpu-saved") for u in p.unused)


def test_cpu_partition_saved_cpu_pool_wins_over_the_reader(tmp_path: Path) -> None:
    p = profile(from_text(tmp_path, GPU_WITH_CPU_POOL), reader_srun="-p reader")
    assert p.partition == "cpu-saved" and "saved CPU pool readers" in p.partition_source
    # The saved CPU pool is the job's own placement: not listed as unused; the policy's pool is.
    assert not any("readers" in u for u in p.unused) and any("pools policy" in u for u in p.unused)


def test_a_saved_cpu_pool_lends_the_judge_node_all_its_directives(tmp_path: Path) -> None:
    # Seed 003: "a saved CPU pool of the partition lends its own directives to the judge node".
    config = from_text(tmp_path, GPU_WITH_CPU_POOL, "pools.readers.tasks_per_node=4")
    p = profile(config, judge_partition="cpu-saved")
    (judge,) = p.pools
    assert (judge.name, judge.partition, judge.qos, judge.tasks_per_node) == ("judge", "cpu-saved", "pool-qos", 4)
    job = RunConfig.from_spec(resolved_from_dict(rg.judge_job_spec(config, p, "grade")))
    assert (job.pools["judge"].tasks_per_node, job.pools["judge"].qos) == (4, "pool-qos")
    assert p.to_json()["pools"][0]["tasks_per_node"] == 4  # regrade.json records it


def test_cpu_partition_flag_wins_over_the_reader() -> None:
    p = profile(demo_external(), judge_partition="flag", reader_srun="-p reader")
    assert (p.partition, p.partition_source) == ("flag", "--judge-partition")


def test_a_cpu_only_run_keeps_its_own_compute(tmp_path: Path) -> None:
    config = from_text(tmp_path, CPU_RUN, "pools.readers.nodes=2")
    assert rg.is_cpu_only(config)
    p = profile(config, judge_partition="flag", judge_qos="flag-q", reader_srun="-p reader -q reader-q")
    assert (p.kind, p.partition, p.partition_source) == (rg.CPU, "cpu-saved", rg.OWN_COMPUTE)
    assert (p.qos, p.qos_source) == ("pool-qos", "the saved pool readers")
    assert [x.to_json() for x in p.pools] == [
        {
            "name": "readers",
            "nodes": 2,
            "gpus_per_node": 0,
            "partition": "cpu-saved",
            "qos": "pool-qos",
            "tasks_per_node": 1,
        }
    ]
    assert rg.OWN_COMPUTE_UNUSED in p.unused
    job = RunConfig.from_spec(resolved_from_dict(rg.judge_job_spec(config, p, "grade")))
    plan = make_plan(job)
    assert (plan.replicas, plan.gpus_per_replica, [pl.name for pl in job.pool_list]) == (2, 0, ["readers"])
    assert "--partition=cpu-saved" in directive_lines(_render(job))


@pytest.mark.parametrize(
    "srun", ["-p reader", "-preader", "--partition=reader", "--partition reader", "-N 1 -p other -p reader"]
)
def test_cpu_partition_from_the_reader_placement(srun: str) -> None:
    p = profile(demo_external(), reader_srun=srun)
    assert p.partition == "reader" and LauncherEnv.READER_SRUN in p.partition_source


def test_cpu_partition_unknown_is_refused_naming_only_what_can_still_be_given(tmp_path: Path) -> None:
    for srun in (None, "-q onlyqos --mem=1G"):
        with pytest.raises(rg.RegradeRefused) as err:
            profile(demo_external(), **({"reader_srun": srun} if srun else {}))
        msg = str(err.value)
        assert "--judge-partition" in msg and LauncherEnv.READER_SRUN in msg
        # The run's saved config is what it was: a fact, not something to declare now.
        assert "its saved config declares no CPU pool" in msg and "declare a" not in msg
    with pytest.raises(rg.RegradeRefused, match="its saved CPU pool readers names no partition"):
        profile(from_text(tmp_path, GPU_WITH_CPU_POOL.replace('partition = "cpu-saved"\n', "")))


def test_reader_placement_that_cannot_be_split_is_a_usage_error() -> None:
    with pytest.raises(rg.UsageError, match="cannot split"):
        profile(demo_external(), reader_srun="-p 'unclosed")


# --- CPU QOS precedence ---------------------------------------------------------------------------


def test_cpu_qos_flag_wins(tmp_path: Path) -> None:
    p = profile(from_text(tmp_path, GPU_WITH_CPU_POOL), judge_qos="flag-q", reader_srun="-q reader-q")
    assert (p.qos, p.qos_source) == ("flag-q", "--judge-qos")


def test_cpu_qos_of_the_saved_cpu_pool_wins_over_the_reader(tmp_path: Path) -> None:
    p = profile(from_text(tmp_path, GPU_WITH_CPU_POOL), reader_srun="-q reader-q")
    assert p.qos == "pool-qos" and "saved CPU pool readers" in p.qos_source
    assert p.pools[0].qos == "pool-qos"


def test_cpu_qos_of_a_saved_pool_without_partition_follows_the_flags_partition(tmp_path: Path) -> None:
    text = GPU_WITH_CPU_POOL.replace('partition = "cpu-saved"\n', "")
    p = profile(from_text(tmp_path, text), judge_partition="elsewhere", reader_srun="-q reader-q")
    assert (p.partition, p.qos) == ("elsewhere", "pool-qos")


def test_cpu_qos_of_the_reader_when_it_names_this_partition_or_none() -> None:
    same = profile(demo_external(), reader_srun="-p cpu --qos=reader-q")
    assert (same.partition, same.qos) == ("cpu", "reader-q")
    unnamed = profile(demo_external(), judge_partition="cpu", reader_srun="-q reader-q")
    assert unnamed.qos == "reader-q" and LauncherEnv.READER_SRUN in unnamed.qos_source


def test_cpu_qos_of_a_reader_on_another_partition_does_not_follow() -> None:
    p = profile(demo_external(), judge_partition="cpu", reader_srun="-p other -q reader-q")
    assert (p.qos, p.qos_source) == (None, rg.PARTITION_DEFAULT)


def test_the_runs_gpu_qos_does_not_follow_a_cpu_job() -> None:
    p = profile(demo_external("launch.slurm.qos='gpu-q'"), judge_partition="cpu")
    assert (p.qos, p.qos_source) == (None, rg.PARTITION_DEFAULT)
    assert any(u.startswith("launch.slurm.qos gpu-q") for u in p.unused)


# --- served-judge partition and QOS ---------------------------------------------------------------


def test_served_judge_keeps_the_runs_job_qos_and_records_the_cpu_flags_as_not_used(tmp_path: Path) -> None:
    config = from_text(tmp_path, POOLED, "launch.slurm.qos='gpu-q'", "pools.judge.qos='pool-q'")
    p = profile(config, judge_partition="cpu", judge_qos="cpu-q")
    assert (p.qos, p.partition) == ("gpu-q", None)
    assert p.partition_source == rg.CLUSTER_DEFAULT
    assert rg.CPU_PLACEMENT_UNUSED in p.unused


def test_served_judge_qos_falls_back_to_the_kept_pools_then_the_partition_default(tmp_path: Path) -> None:
    assert profile(from_text(tmp_path, POOLED, "pools.judge.qos='pool-q'")).qos == "pool-q"
    p = profile(from_text(tmp_path, POOLED))
    assert (p.qos, p.qos_source) == (None, rg.PARTITION_DEFAULT)
    assert rg.CPU_PLACEMENT_UNUSED not in p.unused  # no flag given: nothing to report


def test_served_judge_partition_is_the_saved_pools_else_the_runs(tmp_path: Path) -> None:
    both = from_text(tmp_path, POOLED, "pools.judge.partition='gpu-j'", "launch.slurm.partition='gpu-run'")
    assert profile(both).partition == "gpu-j"
    run_only = profile(from_text(tmp_path, POOLED, "launch.slurm.partition='gpu-run'"))
    assert (run_only.partition, run_only.partition_source) == ("gpu-run", "the run's launch.slurm.partition")


# --- walltime ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("30:15", 1815), ("04:00:00", 14400), ("1-00", 86400), ("1-02:03", 93780), ("2-00:00:01", 172801)],
)
def test_slurm_times(text: str, seconds: int) -> None:
    assert rg.slurm_seconds(text) == seconds
    assert rg.slurm_seconds(rg.slurm_time(seconds)) == seconds


@pytest.mark.parametrize(
    ("segment", "max_time", "want", "bound", "source"),
    [
        ("03:00:00", "01:00:00", "01:00:00", "bounded by MaxTime 01:00:00 of partition p", rg.WALLTIME_SEGMENT),
        ("00:30:00", "01:00:00", "00:30:00", "within MaxTime 01:00:00 of partition p", rg.WALLTIME_SEGMENT),
        ("00:30:00", None, "00:30:00", "MaxTime of partition p unknown: not bounded", rg.WALLTIME_SEGMENT),
        ("1-00:00:00", "UNLIMITED", "1-00:00:00", "is UNLIMITED: not bounded", rg.WALLTIME_SEGMENT),
        # Seed 003: a known MaxTime is the bound to use when the run records no segment walltime,
        # longer than the default or shorter.
        (None, "1-00:00:00", "1-00:00:00", "MaxTime 1-00:00:00 of partition p", rg.WALLTIME_MAX_TIME),
        (None, "02:00:00", "02:00:00", "MaxTime 02:00:00 of partition p", rg.WALLTIME_MAX_TIME),
        # The default only when neither is known (an UNLIMITED MaxTime bounds nothing).
        (None, None, "04:00:00", "MaxTime of partition p unknown", rg.WALLTIME_DEFAULT),
        (None, "UNLIMITED", "04:00:00", "MaxTime of partition p is UNLIMITED", rg.WALLTIME_DEFAULT),
    ],
)
def test_walltime_rule(segment: str | None, max_time: str | None, want: str, bound: str, source: str) -> None:
    got, bounds, got_source = rg.bound_walltime(segment, max_time, "p")
    assert (got, got_source) == (want, source)
    assert bound in bounds[-1]
    assert ("default 04:00:00" in bounds[0]) == (source == rg.WALLTIME_DEFAULT)


def test_the_profile_says_where_its_walltime_came_from(tmp_path: Path) -> None:
    no_segment = profile(demo_external(), "1-00:00:00", judge_partition="cpu")
    assert (no_segment.walltime, no_segment.walltime_source) == ("1-00:00:00", rg.WALLTIME_MAX_TIME)
    assert "walltime: 1-00:00:00 (MaxTime 1-00:00:00 of partition cpu" in no_segment.text()
    neither = profile(demo_external(), None, judge_partition="cpu")
    assert (neither.walltime, neither.to_json()["walltime_source"]) == ("04:00:00", rg.WALLTIME_DEFAULT)


def test_the_profile_report_is_valid_json_naming_every_part(tmp_path: Path) -> None:
    p = profile(demo_external("launch.slurm.time='03:00:00'"), "01:00:00", reader_srun="-p cpu -q cq")
    doc = json.loads(json.dumps(p.to_json()))
    assert doc["kind"] == "cpu" and doc["walltime"] == "01:00:00"
    assert set(doc) == {
        "kind",
        "partition",
        "partition_source",
        "qos",
        "qos_source",
        "walltime",
        "walltime_bounds",
        "walltime_source",
        "pools",
        "services",
        "external_judges",
        "unused",
    }
    assert "bounded by MaxTime 01:00:00 of partition cpu" in p.text()


# --- the judge job's spec -----------------------------------------------------------------------


def _render(config: RunConfig) -> str:
    req = RenderRequest(config, make_plan(config), "u-1", "/shared/out", "/shared/out/cluster/u-1/spec.json")
    return render(req).text


def test_cpu_job_spec_is_one_cpu_node_without_ray_gpus_or_policy() -> None:
    source = demo_external(
        "launch.slurm.qos='gpu-q'", "launch.slurm.directives=['--gpus-per-task=1','--mem=0','--constraint=h100']"
    )
    p = profile(source, "01:00:00", judge_partition="cpu")
    job = RunConfig.from_spec(resolved_from_dict(rg.judge_job_spec(source, p, "grade --all")))
    plan = make_plan(job)
    assert (plan.replicas, plan.gpus_per_replica, plan.ray_nodes, plan.used_gpus) == (1, 0, (), 0)
    assert job.driver.command == "grade --all" and job.ray.enabled is False
    assert [j.name for j in job.bound_judges] == ["general"] and not job.gpu_judges
    assert job.trainer.nodes == 0 and job.inference.gpus == 0
    # Data stays the run's own files (absolute: the job's spec lives elsewhere).
    assert all(os.path.isabs(f) and os.path.exists(f) for f in job.data_paths()[0] + job.data_paths()[1])
    directives = directive_lines(_render(job))
    assert "--partition=cpu" in directives and "--time=01:00:00" in directives and "--mem=0" in directives
    assert not any(d.startswith(("--gpus", "--gres", "--qos", "--constraint")) for d in directives), directives
    assert "directives --gpus-per-task=1 --constraint=h100: they ask for GPUs or GPU nodes" in p.unused


def test_a_template_rubric_keeps_its_file_as_the_run_resolved_it(tmp_path: Path) -> None:
    """The judge job's spec lives in another folder: a relative template_file goes as the path the
    run resolved (as [data] does), so the job grades with the same pinned file."""
    (tmp_path / "rubrics").mkdir()
    template = tmp_path / "rubrics" / "mine.txt"
    template.write_text("Grade {output} for {input}.\n", encoding="utf-8")
    digest = hashlib.sha256(template.read_bytes()).hexdigest()
    text = DEMO.read_text().replace('"data/', f'"{DEMO.parent / "data"}/')
    text = text.replace(
        'profile = "general-quality"\n',
        f'template_file = "rubrics/mine.txt"\ntemplate_sha256 = "{digest}"\n',
        1,
    )
    source = from_text(tmp_path, text, EXTERNAL)
    job_data = rg.judge_job_spec(source, profile(source, "01:00:00", judge_partition="cpu"), "true")
    table = job_data["rubrics"]["general-quality"]
    assert table["template_file"] == str(template)
    assert table["template_sha256"] == digest and "profile" not in table
    job = RunConfig.from_spec(resolved_from_dict(job_data, "/somewhere/else"))
    assert job.rubrics["general-quality"].template_path(job.spec.base_dir) == str(template)


def test_served_job_spec_keeps_only_the_judges_pool_in_its_saved_shape(tmp_path: Path) -> None:
    source = from_text(
        tmp_path, POOLED, "launch.slurm.qos='gpu-q'", "pools.judge.partition='gpu'", "pools.judge.tasks_per_node=4"
    )
    p = profile(source, "02:00:00")
    job = RunConfig.from_spec(resolved_from_dict(rg.judge_job_spec(source, p, "grade")))
    plan = make_plan(job)
    assert [pl.name for pl in job.pool_list] == ["judge"] and sorted(job.judges) == ["general"]
    assert job.pools["judge"].tasks_per_node == 4  # the saved shape: nodes, tasks, GPUs, partition
    assert (plan.replicas, plan.gpus_per_replica, plan.driver_node) == (1, 8, 0)
    assert dict(plan.nodes[0].judges) == {"general": 1} and plan.nodes[0].ray_gpus == 0
    directives = directive_lines(_render(job))
    for d in (
        "--gpus-per-node=8",
        "--partition=gpu",
        "--qos=gpu-q",
        "--time=02:00:00",
        "--nodes=1",
        "--ntasks-per-node=4",
    ):
        assert d in directives, directives


def test_driver_env_reading_a_dropped_pool_is_left_out_and_reported(tmp_path: Path) -> None:
    source = from_text(
        tmp_path,
        POOLED + '[driver.env]\nJ = "runtime:GYM_POOL_JUDGE_NODES"\nP = "runtime:GYM_POOL_POLICY_NODES"\nK = "k"\n',
    )
    p = profile(source)
    assert "driver.env P: they read the node list of a pool the job does not have" in p.unused
    job = RunConfig.from_spec(resolved_from_dict(rg.judge_job_spec(source, p, "grade")))
    assert dict(job.driver.env) == {"J": "runtime:GYM_POOL_JUDGE_NODES", "K": "k"}


def test_source_record_validates_against_its_schema(tmp_path: Path) -> None:
    source = demo_external()
    p = profile(source, judge_partition="cpu")
    body = rg.source_record("/out/cluster/u-0", "u-0", source, p, "grade")
    run = RunDir.create(str(tmp_path), "rec", mode=0o750)
    run.write_artifact(names.REGRADE, Writer(source.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER), body)
    doc = json.loads((run.path / names.REGRADE).read_text())
    assert violations("regrade", doc) == []
    assert doc["source_uuid"] == "u-0" and doc["profile"]["kind"] == "cpu"
    bad = {**doc, "profile": {**doc["profile"], "kind": "gpu"}}
    assert violations("regrade", bad)


# --- the spec model's CPU pools -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (("pools.readers.gpus_per_node=3",), "pools.readers.gpus_per_node", "or 0: a CPU pool"),
        (("trainer.nodes=1",), "trainer.nodes", "every pool is a CPU pool"),
        (("inference.gpus=1",), "inference.gpus", "needs GPUs, but every pool is a CPU pool"),
        (
            ("judges.general={mode='managed',backend='reference',model='m'}",),
            "judges.general.mode",
            "managed judge needs GPUs",
        ),
    ],
)
def test_cpu_pool_rules(tmp_path: Path, overrides: tuple[str, ...], key: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        from_text(tmp_path, CPU_RUN, *overrides)
    assert any(pr.key == key and words in pr.message for pr in err.value.problems), err.value.problems


# --- the command line ---------------------------------------------------------------------------


def _run_dir(tmp: Path, config_text: str, *overrides: str, uuid: str = "src-1") -> Path:
    spec = tmp / "src.toml"
    spec.write_text(config_text)
    resolved = load_spec(spec, overrides)
    config = RunConfig.from_spec(resolved)
    run = RunDir.create(str(tmp / "out"), uuid, mode=0o750)
    run.write_artifact(
        names.SPEC,
        Writer(config.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER),
        spec_record(resolved, str(spec)),
    )
    return run.path


def _cli(*args: str, tmp: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    stand_ins = tmp / "bin"
    stand_ins.mkdir(exist_ok=True)
    scontrol = stand_ins / "scontrol"
    # A stand-in for `scontrol show partition --oneliner [P]`: the real cluster's run is in test_slurm_regrade.py.
    scontrol.write_text(
        "#!/bin/bash\n"
        'echo "PartitionName=gpu Default=YES MaxTime=02:00:00 State=UP"\n'
        'echo "PartitionName=cpu Default=NO MaxTime=00:45:00 State=UP"\n'
    )
    scontrol.chmod(0o755)
    full = {**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", **(env or {})}
    if env is None:
        full.pop(LauncherEnv.READER_SRUN, None)
    return subprocess.run([GYM_LAUNCH, "regrade", *args], capture_output=True, text=True, env=full, timeout=60)


def test_cli_dry_run_json_prints_the_profile(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, DEMO.read_text().replace('"data/', f'"{REPO}/examples/data/'), EXTERNAL)
    r = _cli(str(run), "--dry-run", "--json", tmp=tmp_path, env={LauncherEnv.READER_SRUN: "-p cpu -q cq"})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["kind"], doc["partition"], doc["qos"]) == ("cpu", "cpu", "cq")
    # The run sets no launch.slurm.time: the stand-in's MaxTime of cpu is the walltime (seed 003).
    assert (doc["walltime"], doc["walltime_source"]) == ("00:45:00", rg.WALLTIME_MAX_TIME)
    assert not (run.parent / "cluster").exists() and len(list(run.parent.iterdir())) == 1  # nothing created


def test_cli_dry_run_prints_the_profile_and_the_job(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, POOLED, "pools.judge.partition='gpu'")
    r = _cli(str(run), "--dry-run", "--judge-partition", "cpu", "--command", "grade it", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "profile: served-judge" in r.stdout and rg.CPU_PLACEMENT_UNUSED in r.stdout
    assert "#SBATCH --partition=gpu" in r.stdout and "#SBATCH --time=02:00:00" in r.stdout


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda tmp: tmp / "nowhere", "not a run directory"),
        (lambda tmp: _run_dir(tmp, DEMO.read_text()), "judge general runs on the policy's own nodes"),
    ],
)
def test_cli_refusals_exit_2_with_one_message(tmp_path: Path, make, words: str) -> None:
    r = _cli(str(make(tmp_path)), "--dry-run", tmp=tmp_path)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
