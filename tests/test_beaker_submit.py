"""gym-launch submit --backend beaker, up to beaker-py's client call.

Beaker's API cannot be reached from here, so ONE thing is replaced: beaker-py's
``ExperimentClient.create`` (the HTTP request that creates the experiment). Everything before it
is real: our CLI, the run directory, spec.json, the job file, beaker-py reading the user's Beaker
configuration from $BEAKER_CONFIG, building its client, and loading the job file with its model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from beaker import BeakerExperimentSpec
from beaker import beaker_pb2 as pb2
from beaker._experiment import ExperimentClient

from launch.cli import main as launch_main
from launch.spec.load import SPEC_JSON_ENV, load_spec, load_spec_record
from schemas import names, violations
from tests.harness.beaker_api import write_beaker_config

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SPEC = REPO / "examples" / "three-node.toml"
TOKEN = "tok-NEVER-WRITTEN-7f3a9c"  # a fake user token: it must appear nowhere we write


def submit_main(argv: list[str]) -> int:
    """`gym-launch submit ARGV` in this process (the one mock below must be in effect)."""
    return launch_main(["submit", *argv])


def clean_env(tmp_path: Path) -> dict[str, str]:
    """No Beaker configuration: another HOME, no BEAKER_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEAKER_")}
    env["HOME"] = str(tmp_path / "home")
    return env


def mount(tmp_path: Path) -> list[str]:
    """The test's stand-in for the shared filesystem: the output root lies inside a declared mount."""
    return ["--set", f'launch.weka_mounts=[{{weka = "training", mount_path = "{tmp_path / "weka"}"}}]']


def submit_cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "weka" / "runs"
    cmd = [str(BIN / "gym-launch"), "submit", str(SPEC), "--backend", "beaker", "--output-root", str(root)]
    cmd += [*mount(tmp_path), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_dry_run_prints_the_spec_and_creates_nothing(tmp_path: Path) -> None:
    result = submit_cli(tmp_path, clean_env(tmp_path), "--uuid", "dry", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "nothing was created" in result.stdout
    job = tmp_path / "printed.yaml"
    job.write_text(result.stdout)  # the header lines are YAML comments: the whole output loads
    [task] = BeakerExperimentSpec.from_file(job).tasks
    assert task.replicas == 3 and task.command[:3] == ["gym-agent", "--uuid", "dry"]
    assert not (tmp_path / "weka").exists()


def test_without_a_beaker_configuration_it_says_so_and_creates_nothing(tmp_path: Path) -> None:
    result = submit_cli(tmp_path, clean_env(tmp_path), "--uuid", "noconf")
    assert result.returncode == 2
    assert "no Beaker configuration found" in result.stderr and "--dry-run" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "weka").exists()
    # What would have been submitted is printed, and loads as a Beaker spec.
    job = tmp_path / "printed.yaml"
    job.write_text(result.stdout)
    [task] = BeakerExperimentSpec.from_file(job).tasks
    assert task.command[:3] == ["gym-agent", "--uuid", "noconf"]


@pytest.fixture
def beaker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's own Beaker configuration file, as Beaker's CLI writes it."""
    return write_beaker_config(tmp_path, monkeypatch, TOKEN)


def assert_token_nowhere(root: Path, *texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
    for f in root.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f


def test_submit_creates_the_experiment_and_records_its_id(
    tmp_path: Path, beaker_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict] = []

    def create(self: ExperimentClient, *, spec, name=None, workspace=None) -> pb2.Workload:  # the one mock
        calls.append({"spec": spec, "name": name, "workspace": workspace, "token": self.config.user_token})
        return pb2.Workload(experiment=pb2.Experiment(id="01EXPERIMENTREPLAYID"))

    monkeypatch.setattr(ExperimentClient, "create", create)
    root = tmp_path / "weka" / "runs"
    argv = [str(SPEC), "--backend", "beaker", "--uuid", "sub-1", "--output-root", str(root), *mount(tmp_path)]
    code = submit_main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "as job 01EXPERIMENTREPLAYID" in out.out

    run_dir = root / "cluster" / "sub-1"
    submission = orjson.loads((run_dir / names.SUBMISSION).read_bytes())
    assert not violations("submission", submission)
    assert submission["backend"] == "beaker" and submission["job_id"] == "01EXPERIMENTREPLAYID"
    job = run_dir / submission["job_file"]
    assert submission["job_file"] == names.job_file(".beaker.yaml")

    [call] = calls
    assert call["token"] == TOKEN  # beaker-py read the user's configuration itself
    assert call["name"] == "three-node-sub-1"
    assert call["workspace"] is None  # the example names none: the user's default workspace
    # What went to Beaker is exactly the job file in the run directory.
    assert call["spec"].to_json() == BeakerExperimentSpec.from_file(job).to_json()
    [task] = call["spec"].tasks
    spec_json = orjson.loads((run_dir / names.SPEC).read_bytes())
    assert not violations("spec", spec_json)
    carried = next(e.value for e in task.env_vars if e.name == SPEC_JSON_ENV)
    fingerprint = load_spec(SPEC, mount(tmp_path)[1:]).fingerprint
    assert load_spec_record(carried, "inline").fingerprint == fingerprint == spec_json["fingerprint"]
    assert_token_nowhere(root, out.out, out.err)


def test_workspace_goes_to_the_client_and_a_refusal_is_reported(
    tmp_path: Path, beaker_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from beaker.exceptions import BeakerPermissionsError

    seen: list[str | None] = []

    def create(self: ExperimentClient, *, spec, name=None, workspace=None) -> pb2.Workload:
        seen.append(workspace)
        raise BeakerPermissionsError("no write access to workspace team/rl")

    monkeypatch.setattr(ExperimentClient, "create", create)
    root = tmp_path / "weka" / "runs"
    argv = [str(SPEC), "--backend", "beaker", "--uuid", "sub-2", "--output-root", str(root), *mount(tmp_path)]
    code = submit_main([*argv, "--set", 'launch.beaker.workspace="team/rl"'])
    out = capsys.readouterr()
    assert code == 2 and seen == ["team/rl"]
    assert "Beaker refused the experiment three-node-sub-2" in out.err and "no write access" in out.err
    assert not (root / "cluster" / "sub-2" / names.SUBMISSION).exists()
    assert_token_nowhere(root, out.out, out.err)


def test_without_beaker_py_it_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "beaker", None)  # as if beaker-py were not installed
    root = tmp_path / "weka" / "runs"
    code = submit_main([str(SPEC), "--backend", "beaker", "--uuid", "s3", "--output-root", str(root), *mount(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "beaker-py is not installed: pip install 'gym-agent[beaker]'" in err
    assert not root.exists()
