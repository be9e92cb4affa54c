"""Node pools (seed 001): pinning the trainer, the rollout engines and judges; CPU pools beside GPU
pools; GPU work outside the Ray cluster refused; the Ray service's name; head-only ray flags; the
seed-001 layout recognised; pools of different shapes as one Slurm heterogeneous job (its script
run by bash with stand-ins for scontrol/getent/srun; the real cluster's run is test_slurm_pools.py);
what Beaker cannot express refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.ray.node import HEAD_ONLY_FLAGS, worker_extra_args
from audit.api import audit_run
from launch.backends.base import RenderRequest
from launch.backends.local import local_replicas
from launch.backends.slurm._render import components, directive_lines, render
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec
from launch.spec.plan import Plan, placement_problems
from launch.spec.plan import plan as make_plan
from schemas import DriverEnv, JobEnv, order
from tests.harness import assert_artifacts_valid, audit, launch_local, read, uid
from tests.harness.specs import PINNED_POOLS, judge_tables, pool_tables, small_spec

GYM_LAUNCH = str(Path(sys.executable).parent / "gym-launch")
RAY = str(Path(sys.executable).parent / "ray")

BASE = """
name = "pools"
[launch]
gpus_per_replica = 8
node_gpus = 8
[driver]
command = ["python", "_driver.py"]
"""

PINNED = BASE + PINNED_POOLS + judge_tables(pool="judge")


def config_of(tmp: Path, text: str, *overrides: str) -> RunConfig:
    p = tmp / "run.toml"
    p.write_text(text)
    return RunConfig.from_spec(load_spec(p, overrides))


def plan_of(tmp: Path, text: str, *overrides: str) -> Plan:
    return make_plan(config_of(tmp, text, *overrides))


def problems_of(tmp: Path, text: str, *overrides: str) -> dict[str, str]:
    try:
        config = config_of(tmp, text, *overrides)
    except SpecError as err:
        return {p.key: p.message for p in err.problems}
    return {p.key: p.message for p in placement_problems(config)}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GYM_LAUNCH, *args], capture_output=True, text=True, timeout=60)


# --- the plan -------------------------------------------------------------------------------------


def test_pinned_trainer_rollout_and_judge_run_only_on_their_pools(tmp_path: Path) -> None:
    p = plan_of(tmp_path, PINNED)
    rows = [(n.pool, n.gpus, n.trainer_gpus, n.rollout_gpus, dict(n.judges)) for n in p.nodes]
    assert rows == [
        ("policy", 8, 4, 4, {}),
        ("policy", 8, 0, 8, {}),
        ("judge", 8, 0, 0, {"general": 1}),
        ("readers", 0, 0, 0, {}),  # a CPU pool: no GPU work
    ]
    assert (p.driver_node, p.allocated_gpus, p.used_gpus) == (0, 24, 17)
    # Ray spans every node but the CPU pool's (not asked for).
    assert p.ray_nodes == (0, 1, 2)
    assert p.to_json()["nodes"][3]["gpus"] == 0


def test_the_plan_command_shows_each_pool_and_what_runs_on_it(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text(PINNED)
    r = cli("plan", str(tmp_path / "run.toml"))
    assert r.returncode == 0, r.stderr
    assert "4 replica(s) (3 x 8 GPUs, 1 CPU-only) = 24 allocated, 17 used" in r.stdout, r.stdout
    table = r.stdout.split("\nnode ", 1)[1].splitlines()[1:5]
    assert [line.split()[:2] for line in table] == [["0*", "policy"], ["1", "policy"], ["2", "judge"], ["3", "readers"]]


def test_what_is_not_pinned_fills_the_unreserved_pools_in_declaration_order(tmp_path: Path) -> None:
    text = PINNED.replace('node_pool = "policy"\n', "", 1)  # the trainer unpinned, rollout still pinned
    text = text.replace("[pools.readers]", "[pools.spare]\nnodes = 1\ngpus_per_node = 8\n[pools.readers]")
    p = plan_of(tmp_path, text, "inference.gpus=8")
    rows = [(n.pool, n.trainer_gpus, n.rollout_gpus) for n in p.nodes]
    # rollout pinned to policy (one node of 8 fills it; the second policy node is idle); the unpinned
    # trainer takes the first unreserved GPU pool, spare.
    assert rows == [("policy", 0, 8), ("policy", 0, 0), ("judge", 0, 0), ("spare", 4, 0), ("readers", 0, 0)]
    assert p.driver_node == 3


def test_a_pinned_service_is_sized_against_its_own_pool(tmp_path: Path) -> None:
    found = problems_of(tmp_path, PINNED, "inference.gpus=20")
    assert (
        "trainer, rollout pinned to pool policy need 3 nodes of 8 GPUs, the pool has 2" in found["pools.policy.nodes"]
    ), found


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("trainer.node_pool='readers'", "trainer.node_pool", "a CPU pool (gpus_per_node = 0)"),
        ("inference.node_pool='readers'", "inference.node_pool", "the rollout engines needs GPUs"),
        ("judges.general.node_pool='readers'", "judges.general.node_pool", "judge general needs GPUs"),
        ("trainer.node_pool='nowhere'", "trainer.node_pool", "must name a [pools.NAME] table"),
        ("inference.node_pool='nowhere'", "inference.node_pool", "declared: policy, judge, readers"),
    ],
)
def test_bad_pins_are_refused_naming_the_key(tmp_path: Path, override: str, key: str, words: str) -> None:
    found = problems_of(tmp_path, PINNED, override)
    assert words in found.get(key, ""), found


def test_ray_spans_a_cpu_pool_only_when_asked(tmp_path: Path) -> None:
    p = plan_of(tmp_path, PINNED + '[ray]\nnode_pools = ["policy", "readers"]\n')
    assert p.ray_nodes == (0, 1, 3)
    # The judge pool holds no trainer or rollout GPUs: leaving it out is fine.
    assert p.nodes[2].ray_gpus == 0


def test_gpu_work_on_a_pool_outside_the_spanned_ones_is_refused_naming_the_pool_and_the_fix(tmp_path: Path) -> None:
    # The case: a third pool left out of ray.node_pools that the packer fills with rollout.
    text = (
        BASE
        + "[trainer]\nnodes = 1\ngpus_per_node = 8\n[inference]\ngpus = 16\n"
        + pool_tables(("main", 1, 8), ("aux", 1, 8), ("third", 1, 8))
        + '[ray]\nnode_pools = ["main", "aux"]\n'
    )
    found = problems_of(tmp_path, text)
    msg = found["ray.node_pools"]
    assert "leaves out pool third" in msg and "8 trainer/rollout GPU(s) on its node(s) 2" in msg
    assert "add 'third' to ray.node_pools" in msg and "inference.node_pool" in msg
    r = subprocess.run([GYM_LAUNCH, "validate", str(tmp_path / "run.toml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "ray.node_pools: leaves out pool third" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    # Spanning it, or Ray off, plans.
    assert plan_of(tmp_path, text.replace('["main", "aux"]', '["main", "aux", "third"]')).ray_nodes == (0, 1, 2)
    assert plan_of(tmp_path, text, "ray.enabled=false").ray_nodes == ()


def test_a_pinned_pool_may_have_nodes_of_another_size_and_is_its_own_component(tmp_path: Path) -> None:
    # The judge's pool: 4-GPU nodes of another partition, sized against themselves.
    text = PINNED.replace(
        "gpus_per_node = 8\n[pools.readers]",
        'gpus_per_node = 4\npartition = "small"\n[pools.readers]',
    )
    config = config_of(tmp_path, text, "judges.general.gpus=2")
    p = make_plan(config)
    assert [(n.pool, n.gpus, dict(n.judges), n.unused_gpus) for n in p.nodes][2:] == [
        ("judge", 4, {"general": 2}, 2),
        ("readers", 0, {}, 0),
    ]
    assert p.allocated_gpus == 20
    assert [(c.partition, c.gpus, c.nodes) for c in components(config, p)] == [
        ("gpu", 8, 2),
        ("small", 4, 1),
        ("cpu", 0, 1),
    ]
    assert "--gpus-per-node=4" in blocks(render(request(config)).text)[1]
    assert (
        "is 6 but pool judge's nodes have 4 GPUs"
        in problems_of(tmp_path, text, "judges.general.gpus=6")["judges.general.gpus"]
    )
    # A pool of another size that nothing is pinned to is refused: the unpinned are packed at the replica's size.
    found = problems_of(tmp_path, text, "judges.general.node_pool='policy'")
    assert "a pool of another size holds only what is pinned to it" in found["pools.judge.gpus_per_node"], found
    assert (
        "a node has 8 GPUs" in problems_of(tmp_path, text, "pools.judge.gpus_per_node=16")["pools.judge.gpus_per_node"]
    )


def test_colocated_rollout_pinned_apart_from_the_trainer_is_refused(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path, PINNED, "inference.placement_mode='colocated'", "inference.gpus=4", "inference.node_pool='judge'"
    )
    assert "pin both to one pool" in found["inference.node_pool"], found


def test_local_replicas_see_their_own_nodes_gpus(tmp_path: Path) -> None:
    p = plan_of(tmp_path, PINNED)
    reps = local_replicas(tmp_path / "spec.json", "u", tmp_path, p.replicas, [n.gpus for n in p.nodes])
    assert [dict(r.env)["CUDA_VISIBLE_DEVICES"] for r in reps] == ["0,1,2,3,4,5,6,7"] * 3 + [""]


# --- Ray: the service's name and head-only flags -----------------------------------------------------


def test_the_ray_service_name_names_its_variable_and_its_steps(tmp_path: Path) -> None:
    assert DriverEnv.ray_address("cluster") == DriverEnv.RAY_ADDRESS_CLUSTER == "GYM_RAY_ADDRESS_CLUSTER"
    assert DriverEnv.ray_address("rl-ray") == "GYM_RAY_ADDRESS_RL_RAY"
    config = config_of(tmp_path, PINNED + '[ray]\nname = "rl-ray"\n')
    assert config.ray.name == "rl-ray"
    text = render(request(config)).text
    assert "--job-name=rl-ray_policy_workers" in text and "--job-name=rl-ray_judge_workers" in text
    assert "--job-name=readers " in text  # a CPU pool's agents run coordination only: no Ray step name
    assert "ray.name" in problems_of(tmp_path, PINNED + '[ray]\nname = "Bad Name"\n')


def ray_start_options() -> dict[str, bool]:
    """The installed Ray's own `ray start` options (hidden ones too): option -> takes a value."""
    code = (
        "from ray.scripts.scripts import start\n"
        "for p in start.params:\n"
        "    for o in p.opts:\n"
        "        print(o, int(not p.is_flag))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return {o: v == "1" for o, v in (line.split() for line in out.stdout.splitlines())}


def test_head_only_flags_are_real_ray_start_options_stripped_from_workers_in_both_spellings() -> None:
    options = ray_start_options()
    helped = subprocess.run([RAY, "start", "--help"], capture_output=True, text=True, timeout=120).stdout
    assert "--include-dashboard" in helped and "--port" in helped  # the list is the CLI's own
    for flag in HEAD_ONLY_FLAGS:
        assert options.get(flag) is True, f"{flag} is not a ray start option taking a value: {sorted(options)}"
    # Every other option survives on a worker, in both spellings.
    keep = ["--log-style", "pretty", "--labels=a=b", "--disable-usage-stats"]
    assert all(k.split("=")[0] in options for k in keep if k.startswith("--"))
    for flag in HEAD_ONLY_FLAGS:
        assert worker_extra_args([flag, "v", *keep]) == keep
        assert worker_extra_args([f"{flag}=v", *keep]) == keep
        assert worker_extra_args([*keep[:2], flag, "false", *keep[2:]]) == keep
    assert worker_extra_args(["--include-dashboard", "false"]) == []  # the stray `false`


# --- the seed-001 layout ------------------------------------------------------------------------------


def test_the_seed_001_layout_is_recognised_with_our_keys(tmp_path: Path) -> None:
    # One of NeMo Gym's two top-level keys in a TOML spec of ours: a pointer to our tables (with both,
    # the file is read as a NeMo Gym config: tests/test_nemo_gym_config.py).
    seed = tmp_path / "seed.toml"
    seed.write_text(
        '[compute.cluster]\ntype = "slurm"\naccount = "a"\n[compute.cluster.node_pools.policy]\nnodes = 2\n'
        '[driver]\ncommand = "x"\n'
    )
    r = cli("validate", str(seed))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "compute: is seed 001's layout" in r.stderr and "[pools.NAME]" in r.stderr, r.stderr
    assert "did you mean" not in r.stderr
    seed.write_text('[services.policy]\ntype = "vllm"\nnode_pool = "policy"\n[driver]\ncommand = "x"\n')
    r = cli("validate", str(seed))
    assert "services: is seed 001's layout" in r.stderr and "trainer.node_pool" in r.stderr
    doc = (Path(__file__).resolve().parents[1] / "docs" / "spec.md").read_text()
    assert "## Seed 001 layout" in doc and "| `compute.CLUSTER.node_pools.NAME` | `[pools.NAME]` |" in doc


# --- Slurm: one heterogeneous job -----------------------------------------------------------------------


def request(config: RunConfig, uuid: str = "u-1") -> RenderRequest:
    return RenderRequest(
        config=config,
        plan=make_plan(config),
        uuid=uuid,
        output_root="/shared/out",
        spec_path="/shared/out/cluster/u-1/spec.json",
    )


def blocks(text: str) -> list[list[str]]:
    """The #SBATCH directives of each component, split at `#SBATCH hetjob`."""
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if line == "#SBATCH hetjob":
            out.append([])
        elif line.startswith("#SBATCH "):
            out[-1].append(line[len("#SBATCH ") :])
    return out


def test_pools_of_different_shapes_render_one_component_each_in_declaration_order(tmp_path: Path) -> None:
    text = PINNED.replace('partition = "gpu"\n', "", 1)  # policy on the job's partition: launch.slurm's
    config = config_of(
        tmp_path,
        text,
        "launch.slurm.partition='gpu'",
        "launch.slurm.time='00:10:00'",
        "launch.slurm.account='acct'",
        "launch.slurm.directives=['--exclusive']",
        "pools.readers.qos='cpu-q'",
    )
    assert [(c.partition, c.gpus, [p.name for p in c.pools]) for c in components(config, make_plan(config))] == [
        ("gpu", 8, ["policy", "judge"]),
        ("cpu", 0, ["readers"]),
    ]
    rendered = render(request(config)).text
    first, second = blocks(rendered)
    assert first[:4] == ["--job-name=pools", "--nodes=3", "--ntasks-per-node=1", "--gpus-per-node=8"]
    for d in ("--partition=gpu", "--account=acct", "--time=00:10:00", "--exclusive", "--open-mode=append"):
        assert d in first, first
    # Job-wide options only once; the CPU component asks for no GPUs and takes its pool's QOS.
    assert second == ["--nodes=1", "--ntasks-per-node=1", "--partition=cpu", "--qos=cpu-q", "--exclusive"]
    assert rendered.count("#SBATCH hetjob") == 1 and directive_lines(rendered).count("--job-name=pools") == 1
    steps = [line for line in rendered.splitlines() if line.startswith("srun ")]
    assert [s.split("--job-name=")[1].split()[0] for s in steps] == [
        "cluster_policy_workers",
        "cluster_judge_workers",
        "readers",
    ]
    assert "--het-group=0" in steps[0] and "--het-group=0" in steps[1] and "--het-group=1" in steps[2]
    assert "env -u CUDA_VISIBLE_DEVICES" in steps[2] and "env -u" not in steps[0]
    f = tmp_path / "job.sbatch"
    f.write_text(rendered)
    assert subprocess.run(["bash", "-n", str(f)], capture_output=True).returncode == 0


def test_one_shape_is_an_ordinary_job(tmp_path: Path) -> None:
    config = config_of(tmp_path, PINNED.replace('gpus_per_node = 0\npartition = "cpu"', "gpus_per_node = 8"))
    text = render(request(config)).text
    assert "#SBATCH hetjob" not in text and "--het-group" not in text and "#SBATCH --partition=gpu" in text


def fake_het_slurm(tmp: Path, groups: list[dict[str, str]]) -> dict[str, str]:
    """scontrol/getent/srun stand-ins for a heterogeneous job: each group's hosts (name -> address)
    in SLURM_JOB_NODELIST_HET_GROUP_N; srun runs the task once per host of its nodelist."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    hosts = {h: a for g in groups for h, a in g.items()}
    scripts = {
        "scontrol": "#!/bin/bash\nprintf '%s\\n' ${3//,/ }\n",
        "getent": "#!/bin/bash\ncase $2 in\n"
        + "".join(f"  {h}) echo '{a}      STREAM {h}';;\n" for h, a in hosts.items())
        + "esac\n",
        "srun": """#!/bin/bash
rc=0 nodes= name= group=
while [ "${1#--}" != "$1" ]; do case $1 in --nodelist=*) nodes=${1#--nodelist=};; --job-name=*) name=${1#--job-name=};;
  --het-group=*) group=${1#--het-group=};; esac; shift; done
# The rest is the step's command; the batch shell's GPUs are in its environment, as on a real node.
for n in ${nodes//,/ }; do
  SLURMD_NODENAME=$n CUDA_VISIBLE_DEVICES=0,1 "$@" | sed "s|^|step=$name group=$group node=$n |" || rc=$?
done
exit $rc
""",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for i, g in enumerate(groups):
        env[f"SLURM_JOB_NODELIST_HET_GROUP_{i}"] = ",".join(g)
    return env


def het_script(tmp: Path) -> str:
    agent = tmp / "agent"
    agent.write_text(
        "#!/bin/bash\n"
        f'echo "$* pool=${{{JobEnv.POOL}-none}} gpus=${{CUDA_VISIBLE_DEVICES-none}} nodes=${JobEnv.NODES} '
        f'readers=${JobEnv.pool_nodes("readers")}"\n'
    )
    agent.chmod(0o755)
    return render(request(config_of(tmp, PINNED, f'launch.slurm.agent="{agent}"'))).text


def run_het(tmp: Path, cpu_address: str) -> subprocess.CompletedProcess[str]:
    """The pinned spec's script on GPU hosts g1..g3 and CPU host c1 at ``cpu_address``."""
    env = fake_het_slurm(tmp, [{"g1": "10.0.0.9", "g2": "10.0.0.3", "g3": "10.0.0.10"}, {"c1": cpu_address}])
    f = tmp / "job.sbatch"
    f.write_text(het_script(tmp))
    return subprocess.run(["bash", str(f)], capture_output=True, text=True, env=env, timeout=30)


def test_the_heterogeneous_script_puts_every_component_in_the_one_node_order(tmp_path: Path) -> None:
    r = run_het(tmp_path, "10.0.1.1")
    assert r.returncode == 0, r.stdout + r.stderr
    got = sorted(
        (w[0].removeprefix("step="), w[1].removeprefix("group="), w[2].removeprefix("node="), w[-3], w[-4])
        for w in (line.split() for line in r.stdout.splitlines() if line.startswith("step="))
    )
    # Address order: g2 (.3) < g1 (.9) < g3 (.10) < c1: policy = g2, g1; judge = g3; readers = c1.
    assert [(s, g, n) for s, g, n, _, _ in got] == [
        ("cluster_judge_workers", "0", "g3"),
        ("cluster_policy_workers", "0", "g1"),
        ("cluster_policy_workers", "0", "g2"),
        ("readers", "1", "c1"),
    ]
    lines = {w.split()[2]: w for w in r.stdout.splitlines() if w.startswith("step=")}
    assert "--rank 3 " in lines["node=c1"] and "gpus=none" in lines["node=c1"]  # no GPUs for the CPU step
    assert "--rank 0 " in lines["node=g2"] and "gpus=0,1" in lines["node=g2"]
    assert all("nodes=g2,g1,g3,c1 readers=c1" in w for w in lines.values())


def test_a_component_whose_hosts_sort_before_an_earlier_pools_still_gets_its_own_pools_nodes(tmp_path: Path) -> None:
    # The CPU node's address sorts first; each step names its pool and the agents order by pool,
    # then address (schemas/order.owners_in_pools): c1 is still the readers' node, planned node 3.
    r = run_het(tmp_path, "10.0.0.1")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {w.split()[2]: w for w in r.stdout.splitlines() if w.startswith("step=")}
    assert "--rank 3 " in lines["node=c1"] and "pool=readers" in lines["node=c1"]
    assert "pool=policy" in lines["node=g2"] and "pool=judge" in lines["node=g3"]
    assert all("nodes=g2,g1,g3,c1 readers=c1" in w for w in lines.values())
    addresses = {0: "10.0.0.3", 1: "10.0.0.9", 2: "10.0.0.10", 3: "10.0.0.1"}  # ranks as the script gave them
    pools = {0: "policy", 1: "policy", 2: "judge", 3: "readers"}
    ranks = order.pool_ranks(["policy", "policy", "judge", "readers"])
    assert order.owners_in_pools(addresses, pools, ranks) == [0, 1, 2, 3]  # the agents' order agrees
    assert order.node_owners(addresses) == [3, 0, 1, 2]  # by address alone c1 would own node 0
    assert order.owners_in_pools(addresses, {**pools, 3: None}, ranks) == [3, 0, 1, 2]  # one unsaid: address


def test_hostnames_with_a_heterogeneous_job_are_refused(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text(PINNED)
    r = cli("render", str(tmp_path / "run.toml"), "--backend", "slurm", "--set", "launch.hostnames=['a','b','c','d']")
    assert r.returncode == 2 and "launch.hostnames: cannot be combined with pools of different shapes" in r.stderr


# --- Beaker: what it cannot express ---------------------------------------------------------------------


def beaker_render(spec: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    sets = [w for o in ("launch.beaker.image='img'", "launch.beaker.cluster='c'", *overrides) for w in ("--set", o)]
    return cli("render", str(spec), "--backend", "beaker", *sets, "--output-root", "/weka/out")


def test_beaker_refuses_partitions_and_a_cpu_pool_beside_gpu_pools_naming_the_keys(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text(PINNED)
    r = beaker_render(tmp_path / "run.toml")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    for key in ("pools.policy.partition", "pools.readers.partition", "pools.readers.gpus_per_node"):
        assert f"{key}:" in r.stderr, r.stderr
    assert "needs a Slurm heterogeneous job (--backend slurm)" in r.stderr
    r = beaker_render(tmp_path / "run.toml", "pools.judge.gpus_per_node=4")
    assert r.returncode == 2 and "pools.judge.gpus_per_node: is 4 but launch.gpus_per_replica is 8" in r.stderr
    r = beaker_render(tmp_path / "run.toml", "pools.judge.tasks_per_node=2")
    assert r.returncode == 2 and "pools.judge.tasks_per_node: is 2: Slurm task slots" in r.stderr


# --- a real local run: a CPU pool's agent runs coordination only ------------------------------------------


def test_a_local_run_with_a_cpu_pool_passes_and_the_audit_checks_each_nodes_pool(tmp_path: Path) -> None:
    """Four real agents (gym-launch local; fake GPUs): three of a GPU pool, one of a CPU pool that sees
    no GPU; then a placement record claiming another pool is an audit error."""
    pools = "[pools.gpu]\nnodes = 3\ngpus_per_node = 2\n[pools.readers]\nnodes = 1\ngpus_per_node = 0\n"
    run = launch_local(tmp_path, small_spec(replicas=3, node_gpus=2, ray=False, extra=pools), uid("cpupool"))
    assert run.wait(120) == 0, run.text[-4000:]
    assert_artifacts_valid(run.run_dir)
    audit(run.run_dir, verdict="pass")
    placement = [read(run.run_dir, f"placement-{r}.json") for r in range(4)]
    assert [(p["pool"], len(p["visible_devices"])) for p in placement] == [
        ("gpu", 2),
        ("gpu", 2),
        ("gpu", 2),
        ("readers", 0),
    ]
    path = run.run_dir / "placement-3.json"
    path.write_text(path.read_text().replace('"pool": "readers"', '"pool": "gpu"'))
    found = [f for f in audit_run(run.run_dir).findings if f.code == "placement.pool"]
    assert [(f.rank, f.message) for f in found] == [(3, "ran as pool gpu, but planned node 3 is in pool readers")]
