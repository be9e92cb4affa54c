"""launch/backends/: one list of backends, the agent's command line built in one place, the one
run-directory rule of local and submit, and `gym-launch local` running the replicas itself."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launch.backends.local import FIRST_LOCAL_ADDRESS, local_replicas
from launch.backends.registry import BACKENDS, backend, scheduler_names
from launch.cli import build_parser, main
from launch.spec.errors import UsageError
from launch.spec.names import LAUNCH_BACKENDS
from schemas import names
from tests.harness import kill_tree_by_session, launch_local, small_spec

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEMO = REPO / "examples" / "demo.toml"


def test_every_list_of_backends_is_the_one_list() -> None:
    assert {b.name for b in BACKENDS} == set(LAUNCH_BACKENDS)  # what [launch] backend accepts
    assert scheduler_names() == ("slurm", "beaker", "skypilot")
    schema = json.loads((REPO / "schemas" / "submission.schema.json").read_text())
    assert set(schema["properties"]["backend"]["enum"]) == set(scheduler_names())
    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in ("render", "submit"):
        [choice] = [a for a in subs[command]._actions if a.dest == "backend"]
        assert choice.choices is not None
        assert tuple(choice.choices) == scheduler_names()
    with pytest.raises(UsageError, match="unknown backend 'pbs'; choose local or slurm or beaker or skypilot"):
        backend("pbs")


def test_render_for_the_local_backend_is_refused_naming_the_schedulers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(DEMO)]) == 2  # the demo's [launch] backend is local
    err = capsys.readouterr().err
    assert "pass --backend slurm|beaker" in err and "use gym-launch local" in err
    with pytest.raises(UsageError, match="gym-launch local runs every replica here"):
        backend("local").preflight()


# os's calls that replace this process with another program.
EXEC_CALLS = {f"exec{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}


def _imports_and_calls(path: Path) -> tuple[set[str], set[str]]:
    tree = ast.parse(path.read_text(), str(path))
    imported: set[str] = set()
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in EXEC_CALLS:
            called.add(node.attr)
    return imported, called


def test_launch_never_imports_agent_and_never_execs() -> None:
    for path in sorted((REPO / "launch").rglob("*.py")):
        imported, called = _imports_and_calls(path)
        agent = {m for m in imported if m == "agent" or m.startswith("agent.")}
        assert {m for m in agent if not m.startswith("agent.judges")} == set(), path
        assert called == set(), f"{path} hands the process over ({called}): launch runs its backends itself"
    for gone in ("local_run", "submit", "beaker_submit", "regrade"):
        assert not (REPO / "agent" / f"{gone}.py").exists()


def test_local_replicas_run_this_interpreters_agent_with_one_argv_per_rank(tmp_path: Path) -> None:
    reps = local_replicas(tmp_path / "spec.json", "u1", tmp_path / "out", 2, 3, launcher_fd=9)
    assert [r.address for r in reps] == [str(FIRST_LOCAL_ADDRESS), str(FIRST_LOCAL_ADDRESS + 1)]
    assert reps[1].argv == (
        sys.executable,
        "-m",
        "agent.cli",
        "--uuid",
        "u1",
        "--config",
        str(tmp_path / "spec.json"),
        "--output-root",
        str(tmp_path / "out"),
        "--rank",
        "1",
        "--replicas",
        "2",
        "--address",
        "127.0.0.3",
        "--launcher-fd",
        "9",
    )
    assert dict(reps[0].env) == {"CUDA_VISIBLE_DEVICES": "0,1,2"}


def test_submit_claims_the_run_directory_by_the_same_rule_as_local(tmp_path: Path) -> None:
    """No sbatch on PATH: the first submit claims the directory and fails at the scheduler; the
    second is refused as a used uuid; --resume with another spec is refused naming the key."""
    env = {**os.environ, "PATH": str(BIN)}
    root = tmp_path / "out"

    def submit(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(BIN / "gym-launch"), "submit", str(DEMO), "--backend", "slurm", "--uuid", "u1"]
        cmd += ["--output-root", str(root), *extra]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)

    first = submit()
    assert first.returncode == 2 and "sbatch is not on PATH" in first.stderr, first.stderr
    run_dir = root / "cluster" / "u1"
    assert (run_dir / names.SPEC).is_file() and (run_dir / names.job_file(".sbatch")).is_file()
    assert not (run_dir / names.SUBMISSION).exists()
    again = submit()
    assert again.returncode == 2, again.stderr
    assert f"gym-launch: error: run directory {run_dir} already holds a run; pick a new --uuid (or --resume it)" in (
        again.stderr
    )
    changed = submit("--resume", "--set", 'name="other"')
    assert changed.returncode == 2 and "--resume: the spec differs" in changed.stderr, changed.stderr
    assert "(keys: name)" in changed.stderr and "Traceback" not in changed.stderr + again.stderr + first.stderr


@pytest.mark.slow
def test_gym_launch_local_is_the_parent_of_every_agent(tmp_path: Path) -> None:
    """No exec: the process the user started (the gym-launch console script, with its own command
    line) is the one that starts every agent, and it outlives them."""
    driver = 'command = ["python", "-c", "import time; time.sleep(4)"]\ntrains = false'
    spec = small_spec(replicas=2, driver=driver).replace("[ray]\n", "[ray]\nenabled = false\n")
    run = launch_local(tmp_path, spec, "parent-1")
    try:
        launcher = psutil.Process(run.proc.pid)
        agents: list[psutil.Process] = []
        end = time.monotonic() + 60
        while len(agents) < 2 and time.monotonic() < end and run.proc.poll() is None:
            agents = [c for c in launcher.children() if "agent.cli" in c.cmdline()]
            time.sleep(0.1)
        assert len(agents) == 2, run.text
        # Read once it started its agents: a process caught mid-exec shows an empty command line.
        cmdline = launcher.cmdline()
        assert {a.ppid() for a in agents} == {run.proc.pid}
        assert str(BIN / "gym-launch") in cmdline and "local" in cmdline, cmdline
        assert not any("local_run" in word for word in cmdline), cmdline
        assert run.wait(120) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert "gym-launch: run succeeded: agents exited 0 and the audit passes (agent exit codes [0, 0])" in run.text


def test_submission_json_records_when_for_every_writer(tmp_path: Path) -> None:
    """submit and regrade both write submission.json through write_submission: it carries
    submitted_at, which the schema requires (regrade's used to lack it)."""
    from launch.backends.base import Submission
    from launch.backends.rundir import claim_run_dir, write_submission
    from launch.spec.config import RunConfig
    from launch.spec.load import load_spec
    from schemas import violations

    config = RunConfig.from_spec(load_spec(DEMO))
    before = time.time()
    with claim_run_dir(tmp_path, "s1", config, str(DEMO), resume=False) as run:
        job = run.path / names.job_file(".sbatch")
        write_submission(run, config, "slurm", job, Submission("42", ("sbatch", "--parsable", str(job))))
    doc = json.loads((tmp_path / "cluster" / "s1" / names.SUBMISSION).read_text())
    assert not violations("submission", doc), violations("submission", doc)
    assert doc["job_file"] == names.job_file(".sbatch") and doc["job_id"] == "42"
    assert before <= doc["submitted_at"] <= time.time()
    assert violations("submission", {k: v for k, v in doc.items() if k != "submitted_at"})
