"""Fast checks of the rendered Slurm script: exact directives, `bash -n`, refused directives and
specs, and the script's own logic (node order by address, each task's rank, pool steps and the
exported variables) run for real by bash with stand-ins for scontrol, getent and srun on PATH
(the real-cluster runs are in test_slurm_rendered.py)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.backends.base import RenderRequest
from launch.backends.slurm._render import WARNING_MARGIN_S, directive_lines, render
from launch.spec.config import RunConfig
from launch.spec.load import load_spec
from launch.spec.plan import plan as make_plan
from schemas import DriverEnv, JobEnv, names, port_grid

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.toml"
GYM_LAUNCH = str(Path(sys.executable).parent / "gym-launch")

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
placement = "inference"
[driver.env]
JUDGE_HOST = "runtime:GYM_POOL_JUDGE_NODES"
[judges.general]
mode = "managed"
backend = "reference"
model = "reference-judge"
node_pool = "judge"
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


def request(spec: Path, *overrides: str, uuid: str = "u-1") -> RenderRequest:
    config = RunConfig.from_spec(load_spec(spec, overrides))
    return RenderRequest(
        config=config,
        plan=make_plan(config),
        uuid=uuid,
        output_root="/shared/out",
        spec_path="/shared/out/cluster/u-1/spec.json",
        workdir="/home/me/project",
    )


def pooled(tmp: Path, extra: str = "") -> Path:
    p = tmp / "pooled.toml"
    p.write_text(POOLED + extra)
    return p


def bash_n(text: str, tmp: Path) -> None:
    f = tmp / "job.sbatch"
    f.write_text(text)
    r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_demo_directives_are_exact_and_the_script_parses(tmp_path: Path) -> None:
    rendered = render(request(DEMO))
    assert (rendered.backend, rendered.file_name) == ("slurm", ".sbatch")
    assert directive_lines(rendered.text) == [
        "--job-name=demo",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--output=/shared/out/cluster/u-1/job-slurm-%j.out",
        "--open-mode=append",
        "--chdir=/home/me/project",
    ]
    bash_n(rendered.text, tmp_path)
    assert f"export {JobEnv.DRIVER_RANK}=0\n" in rendered.text
    assert rendered.text.count("srun ") == 1 and "--address" not in rendered.text


def test_slurm_keys_directives_and_hostnames(tmp_path: Path) -> None:
    text = render(
        request(
            DEMO,
            'launch.slurm.partition="gpu"',
            'launch.slurm.account="acct"',
            'launch.slurm.qos="high"',
            'launch.slurm.time="01:30:00"',
            'launch.slurm.directives=["--exclusive", "--mem=0", "--constraint=a100&ib"]',
            'launch.hostnames=["h1", "h2", "h3"]',
            "launch.slurm.explicit_address=true",
        )
    ).text
    assert directive_lines(text)[7:] == [
        "--partition=gpu",
        "--account=acct",
        "--qos=high",
        "--time=01:30:00",
        "--nodelist=h1,h2,h3",
        "--exclusive",
        "--mem=0",
        "'--constraint=a100&ib'",
    ]
    assert '--address "$(hostname --ip-address)"' in text
    bash_n(text, tmp_path)


@pytest.mark.parametrize(
    ("setting", "key", "says"),
    [
        ('launch.slurm.directives=["--nodes=4"]', "launch.slurm.directives.0", "set by gym-launch"),
        ('launch.slurm.directives=["--output=x"]', "launch.slurm.directives.0", "run directory"),
        ('launch.slurm.directives=["--partition=a"]', "launch.slurm.directives.0", "launch.slurm.partition"),
        ('launch.slurm.directives=["--mem=0", "--mem=1"]', "launch.slurm.directives.1", "given twice"),
        ('launch.slurm.directives=["--exclusiv"]', "launch.slurm.directives.0", "not an sbatch option"),
        ('launch.slurm.directives=["-N 3"]', "launch.slurm.directives.0", "long form"),
        ('launch.hostnames=["h1", "h2"]', "launch.hostnames", "list exactly 3"),
        ('ray.node_pool="x"', "ray.node_pool", "node_pools = [...]"),
        ('ray.node_pools=["nope"]', "ray.node_pools", "names no [pools.nope]"),
    ],
)
def test_bad_slurm_settings_exit_2_naming_the_key(setting: str, key: str, says: str) -> None:
    r = subprocess.run(
        [GYM_LAUNCH, "render", str(DEMO), "--backend", "slurm", "--set", setting], capture_output=True, text=True
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{key}:" in r.stderr and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_ray_resources_of_a_pool_outside_node_pools_are_refused(tmp_path: Path) -> None:
    spec = pooled(tmp_path, '[ray]\nnode_pools = ["policy"]\n[ray.resources.judge]\nx = 1\n')
    r = subprocess.run([GYM_LAUNCH, "render", str(spec), "--backend", "slurm"], capture_output=True, text=True)
    assert r.returncode == 2 and "ray.resources.judge: pool judge is not in ray.node_pools" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("extra", "nodes"),
    [("", (0, 1, 2)), ('[ray]\nnode_pools = ["policy"]\n', (0, 1))],
)
def test_ray_nodes_are_the_driver_node_and_the_spanned_pools(tmp_path: Path, extra: str, nodes: tuple) -> None:
    config = RunConfig.from_spec(load_spec(pooled(tmp_path, extra)))
    p = make_plan(config)
    assert (p.driver_node, p.ray_head, p.ray_nodes) == (1, 1, nodes)


def fake_slurm(tmp: Path, addresses: dict[str, str]) -> dict[str, str]:
    """scontrol/getent/srun stand-ins: srun runs the task once per node of its nodelist, with
    SLURMD_NODENAME set, as Slurm would; the nodes' addresses sort differently from their names."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    scripts = {
        "scontrol": f"#!/bin/bash\nprintf '%s\\n' {' '.join(addresses)}\n",
        "getent": "#!/bin/bash\ncase $2 in\n"
        + "".join(f"  {h}) echo '{a}      STREAM {h}';;\n" for h, a in addresses.items())
        + "esac\n",
        "srun": """#!/bin/bash
set -o pipefail
rc=0 nodes=$GYM_NODES name=
for a in "$@"; do case $a in --nodelist=*) nodes=${a#--nodelist=};; --job-name=*) name=${a#--job-name=};; esac; done
for n in ${nodes//,/ }; do SLURMD_NODENAME=$n bash -c "${@: -1}" | sed "s|^|step=$name node=$n |" || rc=$?; done
exit $rc
""",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n[1-3]"}


def run_script(text: str, tmp: Path, env: dict[str, str]) -> list[str]:
    f = tmp / "job.sbatch"
    f.write_text(text)
    r = subprocess.run(["bash", str(f)], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    # The job script's first line marks this start of the job (the audit splits requeues by it).
    assert lines and lines[0] == f"{names.SLURM_START_MARKER} ? start 0 on {os.uname().nodename}", lines[:2]
    return lines[1:]


def test_each_task_runs_its_node_in_address_order_with_pool_steps(tmp_path: Path) -> None:
    # Names sort n1 < n2 < n3, addresses n2 < n3 < n1: the agents' node order is n2, n3, n1.
    env = fake_slurm(tmp_path, {"n1": "10.0.0.30", "n2": "10.0.0.4", "n3": "10.0.0.10"})
    # The "agent" prints its rank and what the job exported.
    agent = tmp_path / "agent"
    agent.write_text(
        "#!/bin/bash\n"
        f'echo "$* nodes=${JobEnv.NODES} policy=${JobEnv.pool_nodes("policy")} '
        f"judge=${JobEnv.pool_nodes('judge')} driver=${JobEnv.DRIVER_RANK}@${JobEnv.DRIVER_HOST} "
        f'ray=${DriverEnv.RAY_ADDRESS_CLUSTER}"\n'
    )
    agent.chmod(0o755)
    text = render(request(pooled(tmp_path), f'launch.slurm.agent="{agent}"')).text
    lines = run_script(text, tmp_path, env)
    assert len(lines) == 3, lines
    # Seed 001: the Ray head's host:port in every step: the driver's node (n3, rank 1) by its address, and
    # the port fixed for the job: the block the head's own choice tries first (the run's uuid, rank 1).
    ray = f"10.0.0.10:{port_grid.head_block('u-1', 1)}"
    common = f"nodes=n2,n3,n1 policy=n2,n3 judge=n1 driver=1@n3 ray={ray}"
    want = {
        ("cluster_policy_workers", "n2", "0"),
        ("cluster_policy_workers", "n3", "1"),
        ("cluster_judge_workers", "n1", "2"),
    }
    got = set()
    for line in lines:
        step, node, rest = line.split(" ", 2)
        assert rest.endswith(common), line
        assert "--uuid u-1 --config /shared/out/cluster/u-1/spec.json --output-root /shared/out" in rest
        rank = rest.split("--rank ", 1)[1].split()[0]
        assert "--replicas 3" in rest
        got.add((step.removeprefix("step="), node.removeprefix("node="), rank))
    assert got == want


def test_a_node_missing_from_the_order_exits_2(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path, {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"})
    text = render(request(DEMO, 'launch.slurm.agent="true"')).text.replace('"$SLURMD_NODENAME"', '"x$SLURMD_NODENAME"')
    f = tmp_path / "job.sbatch"
    f.write_text(text)
    r = subprocess.run(["bash", str(f)], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode != 0 and "is not in GYM_NODES" in r.stderr, r.stderr


def test_submit_dry_run_prints_the_script_and_creates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run(
        [
            GYM_LAUNCH,
            "submit",
            str(DEMO),
            "--backend",
            "slurm",
            "--dry-run",
            "--uuid",
            "dry",
            "--output-root",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --nodes=3" in r.stdout and f"--output={out}/cluster/dry/job-slurm-%j.out" in r.stdout
    assert not out.exists()


def test_pool_partitions_become_the_job_partition_or_a_heterogeneous_job(tmp_path: Path) -> None:
    spec = pooled(tmp_path).read_text().replace("[pools.judge]", '[pools.judge]\npartition = "batch"')
    (tmp_path / "p.toml").write_text(spec)
    text = render(request(tmp_path / "p.toml")).text
    assert "--partition=batch" in directive_lines(text) and "#SBATCH hetjob" not in text
    # Pools on different partitions: one component each, in declaration order (tests/test_pools.py has more).
    spec = spec.replace("[pools.policy]", '[pools.policy]\npartition = "other"')
    (tmp_path / "p.toml").write_text(spec)
    lines = render(request(tmp_path / "p.toml")).text.splitlines()
    cut = lines.index("#SBATCH hetjob")
    assert "#SBATCH --partition=other" in lines[:cut] and "#SBATCH --partition=batch" in lines[cut:]


def test_the_ray_address_is_exported_only_when_the_run_has_ray(tmp_path: Path) -> None:
    text = render(request(DEMO)).text
    assert f'export {DriverEnv.RAY_ADDRESS_CLUSTER}="${{gym_ray_host:?' in text
    renamed = render(request(DEMO, 'ray.name="trainer-ray"')).text
    assert f"export {DriverEnv.ray_address('trainer-ray')}=" in renamed
    assert "GYM_RAY_ADDRESS_" not in render(request(DEMO, "ray.enabled=false")).text


def test_tasks_per_node_is_rendered_per_component(tmp_path: Path) -> None:
    # One shape: the job's --ntasks-per-node is the pools'.
    spec = pooled(tmp_path).read_text().replace("gpus_per_node = 8\n", "gpus_per_node = 8\ntasks_per_node = 4\n")
    (tmp_path / "p.toml").write_text(spec)
    text = render(request(tmp_path / "p.toml")).text
    assert "#SBATCH hetjob" not in text and "--ntasks-per-node=4" in directive_lines(text)
    # Pools that differ in it alone are two components of one heterogeneous job, in declaration order;
    # each pool's agent step still runs one task per node.
    (tmp_path / "p.toml").write_text(
        pooled(tmp_path).read_text().replace("[pools.judge]", "[pools.judge]\ntasks_per_node = 2")
    )
    lines = render(request(tmp_path / "p.toml")).text.splitlines()
    cut = lines.index("#SBATCH hetjob")
    assert "#SBATCH --ntasks-per-node=1" in lines[:cut] and "#SBATCH --ntasks-per-node=2" in lines[cut:]
    steps = [line for line in lines if line.startswith("srun ")]
    assert len(steps) == 2 and all("--ntasks-per-node=1 " in line for line in steps), steps
    assert "--het-group=1" in steps[1] and "cluster_judge_workers" in steps[1]


def test_resume_is_exported_to_every_node() -> None:
    from dataclasses import replace

    config = RunConfig.from_spec(load_spec(Path(__file__).resolve().parent.parent / "examples" / "demo.toml"))
    request = RenderRequest(config, make_plan(config), "u", "/out", "/out/cluster/u/spec.json")
    first = render(request).text.splitlines()
    assert "export GYM_RESUME=1" not in first
    # Only a requeue of that job (Slurm counts restarts) resumes it.
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then export GYM_RESUME=1; fi' in first
    assert "export GYM_RESUME=1" in render(replace(request, resume=True)).text.splitlines()


@pytest.mark.parametrize("spec", ["demo", "pooled"])
def test_a_checkpoint_grace_asks_for_the_walltime_warning(tmp_path: Path, spec: str) -> None:
    path = DEMO if spec == "demo" else pooled(tmp_path)
    req = request(path, "driver.checkpoint_grace=20")
    text = render(req).text
    c = req.config.coordination
    warn = math.ceil(20 + c.teardown_grace + c.poll_interval) + WARNING_MARGIN_S
    assert f"--signal=B:USR1@{warn}" in directive_lines(text)
    assert "scontrol requeue" in text and "trap gym_warned USR1" in text
    assert "/shared/out/cluster/u-1/failures/walltime-warning" in text
    bash_n(text, tmp_path)
    assert "--signal" not in "".join(directive_lines(render(request(path)).text))  # no grace: no warning


def test_a_signal_directive_beside_a_grace_is_refused() -> None:
    r = subprocess.run(
        [GYM_LAUNCH, "render", str(DEMO), "--backend", "slurm", "--set", "driver.checkpoint_grace=10"]
        + ["--set", 'launch.slurm.directives=["--signal=USR1@60"]'],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "launch.slurm.directives:" in r.stderr and "remove it" in r.stderr, r.stderr


@pytest.mark.parametrize("spec", ["demo", "pooled"])
def test_the_warning_trap_tells_the_agents_and_keeps_waiting_for_the_steps(tmp_path: Path, spec: str) -> None:
    # The batch shell gets SIGUSR1 while its steps run: it writes the warning where the agents look,
    # then still waits for the steps and exits with their code (bash's wait returns early for a trap).
    env = {**fake_slurm(tmp_path, {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}), "SLURM_JOB_ID": "77"}
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/bash\nsleep 1.5\nexit 3\n")
    agent.chmod(0o755)
    path = DEMO if spec == "demo" else pooled(tmp_path)
    config = RunConfig.from_spec(load_spec(path, [f'launch.slurm.agent="{agent}"', "driver.checkpoint_grace=5"]))
    out = tmp_path / "out"
    (out / "cluster" / "u-1" / "failures").mkdir(parents=True)
    req = RenderRequest(config=config, plan=make_plan(config), uuid="u-1", output_root=str(out), spec_path="s.json")
    f = tmp_path / "job.sbatch"
    f.write_text(render(req).text)
    proc = subprocess.Popen(["bash", str(f)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.7)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    warning = (out / "cluster" / "u-1" / names.WALLTIME_WARNING).read_text()
    assert warning.startswith("SIGUSR1 at "), warning
    # Warned in this run of the script: it requeues the job to resume from its checkpoint.
    assert "requeueing job 77" in err, err
