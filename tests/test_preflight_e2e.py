"""The preflight in real runs of real agents on this machine: a 3-replica local run whose node 1
fails its network check ends before Ray starts anywhere, names that node and check at the top of
the audit with the exclude line; and a run whose GPU (fake NVML: GPUs cannot exist here) is still
held after teardown records the residue for the audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from audit.api import audit_run
from schemas import Phase, names
from tests.harness import audit_head
from tests.harness.agents import agent_tmp_root, assert_artifacts_valid, audit, read, start_agent, wait_all
from tests.harness.fake_nvml import pynvml as fake
from tests.harness.orphans import assert_nothing_left, kill_tree_by_session, started_session
from tests.harness.specs import result_driver, small_spec, uid

REPO = Path(__file__).resolve().parents[1]
FAKE_NVML = REPO / "tests" / "harness" / "fake_nvml"

# gym-launch local's own code with one replica's environment changed (run_local's per_rank_env):
# rank 1's job sets NCCL_SOCKET_IFNAME to an interface this machine does not have.
LOCAL_WITH_BAD_RANK = """
import sys
from launch.backends.local import run_local
from launch.spec.config import RunConfig
from launch.spec.load import load_spec
from launch.spec.plan import plan
spec, uuid, root = sys.argv[1:4]
config = RunConfig.from_spec(load_spec(spec, []))
env = {1: {"NCCL_SOCKET_IFNAME": "ib-does-not-exist"}}
sys.exit(run_local(config, plan(config), open(spec).read(), uuid=uuid, output_root=root, per_rank_env=env))
"""


def test_one_unfit_node_ends_the_run_before_ray_starts_and_is_named_for_exclusion(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(small_spec(replicas=3))  # with Ray: no node may start it
    uuid = uid("preflight")
    run_dir = tmp_path / "out" / "cluster" / uuid
    env = {**os.environ, "GYM_AGENT_TMP": str(agent_tmp_root(tmp_path))}
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCAL_WITH_BAD_RANK, str(spec), uuid, str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    started_session(run_dir, proc.pid)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        kill_tree_by_session(proc)
    assert proc.returncode == 1, out[-3000:]
    assert "gym-launch: unfit node(s): rank 1 on " in out and "resubmit with sbatch --exclude=" in out, out[-2000:]
    assert_artifacts_valid(run_dir)
    # Every node stopped in (or before) its preflight: no Ray, no judge, no driver started. A slow
    # node may still be in its rendezvous when rank 1 fails: how far each got is not the promise.
    order = list(Phase)
    for rank in range(3):
        phases = [p["phase"] for p in read(run_dir, names.phases(rank))["phases"]]
        assert order.index(Phase(phases[-1])) <= order.index(Phase.PREFLIGHT), (rank, phases)
        assert not {"ray_start", "judges_start", "driver"} & set(phases), (rank, phases)
        assert not (run_dir / names.ray_log(rank)).exists()
    assert not (run_dir / names.RAY_HEAD).exists()
    failure = read(run_dir, names.failure(1))
    assert failure["kind"] == "preflight" and failure["checks"] == ["network"]
    assert (
        failure["cause"].startswith("node 1 (")
        and "127.0.0.3) failed preflight: network: NCCL_SOCKET_IFNAME=" in failure["cause"]
    )
    assert "set it to 'lo'" in failure["cause"]
    result = audit(run_dir, verdict="fail", rank=1, kind="preflight")
    assert result.unfit is not None and [n["rank"] for n in result.unfit["nodes"]] == [1]
    text = subprocess.run([sys.executable, "-m", "audit.cli", str(run_dir)], capture_output=True, text=True).stdout
    problem = audit_head.first_cause_problem(
        text, rank=1, kinds=("preflight",), words=("network", "NCCL_SOCKET_IFNAME", "resubmit with sbatch --exclude=")
    )
    assert problem is None, problem + "\n" + text
    html = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "audit.cli", str(run_dir), "--html", str(html)], capture_output=True)
    assert '<p id="unfit">Unfit node(s): <code>resubmit with sbatch --exclude=' in html.read_text()
    status = subprocess.run(
        [sys.executable, "-m", "launch.cli", "status", str(run_dir)], capture_output=True, text=True
    )
    assert "preflight failed on rank 1 (" in status.stdout and "resubmit with sbatch --exclude=" in status.stdout
    assert_nothing_left(run_dir)


def test_gpu_memory_still_held_after_teardown_is_recorded_and_audited(tmp_path: Path) -> None:
    """One node, no Ray; its two GPUs are the fake NVML's. The driver hands GPU 0 to a process of
    its own making that outlives the job (the test starts it outside the run: the agent's own
    sweep would otherwise end it), as SGLang's data-parallel workers escaping a job's cgroup do."""
    state = tmp_path / "nvml.json"
    fake.write_state(str(state), [fake.gpu(0), fake.gpu(1)])
    escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "escaped-engine"])
    try:
        hand_over = (
            "import json, os; p = os.environ['GYM_FAKE_NVML']; s = json.load(open(p)); "
            f"s['devices'][0]['holders'] = [{{'pid': {escaped.pid}, 'used': 30 << 30}}]; "
            "open(p + '.new', 'w').write(json.dumps(s)); os.replace(p + '.new', p)"
        )
        driver = result_driver(0.2).replace(
            'command = ["python", "-c", "', f'command = ["python", "-c", "{hand_over}; ', 1
        )
        spec = tmp_path / "spec.toml"
        spec.write_text(
            small_spec(replicas=1, ray=False, driver=driver, extra="")
            + "\n[launch.preflight]\ngpu_release_timeout = 1\n"
        )
        uuid = uid("residue")
        env = {"GYM_FAKE_NVML": str(state), "PYTHONPATH": f"{FAKE_NVML}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        agent = start_agent(tmp_path, spec, uuid, 0, 1, "127.0.0.2", gpus=2, env=env)
        codes = wait_all([agent], 120)
        run_dir = tmp_path / "out" / "cluster" / uuid
        assert codes == [0], agent.stdout.read() if agent.stdout else ""
        assert_artifacts_valid(run_dir)
        placement = read(run_dir, names.placement(0))
        assert [(g["device"], g["uuid"]) for g in placement["gpus"]] == [
            (0, "GPU-fake-0000-0000-0000-0000-000000000000"),
            (1, "GPU-fake-0001-0000-0000-0000-000000000000"),
        ]
        pre = read(run_dir, names.preflight(0))
        assert next(c for c in pre["checks"] if c["check"] == "gpus")["status"] == "ok"
        (left,) = read(run_dir, names.cleanup(0))["gpu_residue"]
        assert left["device"] == 0 and [p["pid"] for p in left["pids"]] == [escaped.pid]
        assert left["waited_s"] >= 1.0
        result = audit_run(run_dir)
        (finding,) = [f for f in result.findings if f.code == "gpu.residue"]
        assert finding.severity == "error" and result.verdict == "fail"
        assert "GPU 0 (GPU-fake-0000-0000-0000-0000-000000000000)" in finding.message
        assert f"pids: {escaped.pid} `" in finding.message and "time.sleep(120)" in finding.message
        json.dumps(result.to_json())
    finally:
        escaped.kill()
        escaped.wait()
