"""``gym-launch validate|plan``: exit codes, output, and no tracebacks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launch.cli import main
from launch.spec.load import load_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def console_script() -> str:
    # The script installed next to this interpreter (the project venv), else on PATH.
    candidate = Path(sys.executable).parent / "gym-launch"
    found = str(candidate) if candidate.exists() else shutil.which("gym-launch")
    if not found:
        pytest.skip("gym-launch console script is not installed")
    return found


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_validate_prints_fingerprint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "three-node.toml")]) == 0
    out = capsys.readouterr().out.strip()
    assert out == load_spec(EXAMPLES / "three-node.toml").fingerprint


def test_validate_with_set_changes_fingerprint(capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(EXAMPLES / "three-node.toml")
    assert main(["validate", spec, "--set", "judges.general.timeout=300"]) == 0
    with_set = capsys.readouterr().out.strip()
    assert with_set == load_spec(spec, ["judges.general.timeout=300"]).fingerprint
    assert with_set != load_spec(spec).fingerprint


def test_validate_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "three-node.toml").read_text()
    text = text.replace("max_concurrent_calls = 32", "max_concurrent_calls = 32\ntimout = 30\ncuda_graphs = 1")
    text = text.replace('placement = "trainer"', 'placement = "head"')
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines[0] == "gym-launch: 3 problem(s) in the run spec:"
    assert lines[1:] == [
        'driver.placement: must be "trainer" or "inference", not the string \'head\'',
        "judges.general.timout: unknown key; did you mean judges.general.timeout?",
        "judges.general.cuda_graphs: must be true or false, not int 1",
    ]


def test_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLES / "three-node.toml")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("node "))
    assert lines[header].split() == ["node", "trainer", "rollout", "judges", "ray", "unused"]
    rows = [line.split() for line in lines[header + 1 :]]
    assert rows == [
        ["0*", "4", "4", "-", "8", "0"],
        ["1", "0", "8", "-", "8", "0"],
        ["2", "0", "7", "general:1", "7", "0"],
        ["total", "4", "19", "1", "23", "0"],
    ]
    assert "3 replica(s) x 8 GPUs = 24 allocated, 24 used, 0 unused" in out


def test_plan_table_with_ray_off_claims_no_ray_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 46: with `[ray] enabled = false` no node starts Ray; the table printed `ray 8` per node."""
    assert main(["plan", str(EXAMPLES / "three-node.toml"), "--set", "ray.enabled=false"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("node "))
    ray = lines[header].split().index("ray")
    assert [line.split()[ray] for line in lines[header + 1 :]] == ["off", "off", "off", "off"]


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(EXAMPLES / "three-node.toml")
    assert main(["plan", spec, "--json", "--set", "driver.placement='inference'"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["replicas"], doc["gpus_per_replica"], doc["allocated_gpus"], doc["unused_gpus"]) == (
        3,
        8,
        24,
        0,
    )
    assert doc["driver_node"] == 2
    assert doc["fingerprint"] == load_spec(spec, ["driver.placement='inference'"]).fingerprint
    assert [n["judges"] for n in doc["nodes"]] == [{}, {}, {"general": 1}]
    assert [n["ray_gpus"] for n in doc["nodes"]] == [8, 8, 7]


def test_plan_rejection_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLES / "three-node.toml"), "--set", "launch.gpus_per_replica=4"]) == 2
    err = capsys.readouterr().err
    assert "launch.gpus_per_replica: " in err and "whole nodes" in err


def test_bad_set_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "node.toml"), "--set", "trainer.nodes"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected KEY=VALUE" in err


# --- the real console script -------------------------------------------------------------


def test_script_validate_ok() -> None:
    result = run_script("validate", "examples/node.toml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == load_spec(EXAMPLES / "node.toml").fingerprint


def test_script_missing_file(tmp_path: Path) -> None:
    result = run_script("validate", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == f"gym-launch: error: {tmp_path / 'nope.toml'}: no such file"
    assert "Traceback" not in result.stderr


def test_script_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n[trainer\n')
    result = run_script("plan", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "invalid TOML" in result.stderr and "line 2" in result.stderr


def test_script_wrong_type(tmp_path: Path) -> None:
    path = tmp_path / "wrong.toml"
    path.write_text((EXAMPLES / "node.toml").read_text().replace("gpus_per_node = 2", 'gpus_per_node = "two"'))
    result = run_script("plan", str(path), "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "trainer.gpus_per_node: must be a positive integer, not the string 'two'" in result.stderr


def test_script_wrong_type_through_set() -> None:
    result = run_script("validate", "examples/three-node.toml", "--set", "judges.general.timeout=true")
    assert result.returncode == 2
    assert "judges.general.timeout: must be a positive integer, not the boolean true" in result.stderr
    assert "Traceback" not in result.stderr


def test_script_json_spec_is_accepted(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "three-node.toml")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"fingerprint": spec.fingerprint, "spec": spec.data}))
    result = run_script("validate", str(path))
    assert (result.returncode, result.stdout.strip()) == (0, spec.fingerprint)


def test_script_usage_error_without_command() -> None:
    result = run_script()
    assert result.returncode == 2
    assert "usage: gym-launch" in result.stderr


def test_local_with_an_unusable_uuid_exits_2_without_a_traceback(tmp_path: Path) -> None:
    # Through the real console script: gym-launch validates, then its local backend refuses the
    # uuid before any agent starts.
    proc = run_script("local", str(EXAMPLES / "demo.toml"), "--uuid", "../escape", "--output-root", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "uuid '../escape' is not allowed" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "cluster" / "../escape").exists()
