"""`gym-launch judge-command` and `gym-launch check-data`, through the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GYM_LAUNCH = str(Path(sys.executable).parent / "gym-launch")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GYM_LAUNCH, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_judge_command_prints_the_sglang_argv_and_the_judges_own_devices() -> None:
    out = run("judge-command", "examples/three-node.toml", "general")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    argv = doc["argv"]
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
    assert argv[argv.index("--served-model-name") + 1] == "Qwen/Qwen3-32B"
    assert doc["env"]["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "false"
    plan = json.loads(run("plan", "examples/three-node.toml", "--json").stdout)
    node = plan["nodes"][doc["node"]]
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, node["judge_devices"]["general"]))
    assert set(node["judge_devices"]["general"]).isdisjoint(node["ray_devices"])


def test_judge_command_follows_overrides() -> None:
    out = run("judge-command", "examples/three-node.toml", "general", "--set", "judges.general.cuda_graphs=true")
    argv = json.loads(out.stdout)["argv"]
    assert "--cuda-graph-max-bs-decode" in argv and "disabled" not in argv


def test_judge_command_for_the_reference_backend() -> None:
    out = run("judge-command", "examples/demo.toml", "general")
    argv = json.loads(out.stdout)["argv"]
    assert "agent.judges.reference_server" in argv and "--port-file" in argv


def test_judge_command_unknown_judge_is_one_line() -> None:
    out = run("judge-command", "examples/three-node.toml", "nope")
    assert out.returncode == 2 and "no judge named 'nope'" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_check_data_passes_for_the_demo() -> None:
    out = run("check-data", "examples/demo.toml", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ok"] and set(doc["judged_verifiers"]) == {"general-quality", "general-quality_ref"}


def test_check_data_names_the_missing_binding(tmp_path: Path) -> None:
    spec = (ROOT / "examples/demo.toml").read_text()
    binding = '[judging.bindings."general-quality_ref"]\njudge = "general"\nrubric = "general-quality-ref"\n'
    assert binding in spec
    spec = spec.replace(binding, "")
    spec = spec.replace('"data/', f'"{ROOT}/examples/data/')
    (tmp_path / "s.toml").write_text(spec)
    out = run("check-data", str(tmp_path / "s.toml"))
    assert out.returncode == 2
    assert '[judging.bindings."general-quality_ref"]' in out.stdout + out.stderr
    # Its --help says the code it exits with.
    assert "check-data: a judge-graded verifier lacks a binding" in _exit_code_text(run("check-data", "--help"), 2)
    assert "check-data" not in _exit_code_text(run("check-data", "--help"), 1)


def _exit_code_text(helped: subprocess.CompletedProcess[str], code: int) -> str:
    """What the `exit codes:` list of a --help says of ``code`` (its line and the indented ones after it)."""
    lines = helped.stdout.split("exit codes:\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [str(code)])
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:4].strip()), len(lines))
    return " ".join(" ".join(line.split()) for line in lines[start:end])


def test_render_and_submit_help_name_every_scheduler_backend() -> None:
    from launch.backends.registry import BACKENDS

    for command in ("render", "submit"):
        helped = run(command, "--help").stdout
        for b in BACKENDS:
            if b.schedules:
                assert b.title in helped.split("positional arguments")[0], (command, b.title)


def test_check_data_resolves_paths_from_the_spec_files_folder(tmp_path: Path) -> None:
    # Run from an unrelated directory: [data] paths are relative to the spec file, not the cwd.
    out = subprocess.run(
        [GYM_LAUNCH, "check-data", str(ROOT / "examples/demo.toml"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    files = {f["path"] for f in json.loads(out.stdout)["files"]}
    assert files == {str(ROOT / "examples/data/train.jsonl"), str(ROOT / "examples/data/eval.jsonl")}


def _miles_spec_with_rows(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    """examples/miles/three-node.toml reading ``rows`` as its train data (its eval data unchanged)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "data/eval.jsonl").write_text((ROOT / "examples/data/eval.jsonl").read_text())
    (tmp_path / "miles").mkdir()
    spec = tmp_path / "miles/three-node.toml"
    spec.write_text((ROOT / "examples/miles/three-node.toml").read_text())
    return spec


def test_check_data_refuses_what_the_miles_trainer_refuses(tmp_path: Path) -> None:
    """The trainer reads verifiers from metadata.verifiers: a top-level `verifier` leaves its bindings unused."""
    old_shape = {"verifier": "general-quality", "metadata": {"judge_query": "Why?"}}
    out = run("check-data", str(_miles_spec_with_rows(tmp_path, [old_shape])))
    assert out.returncode == 2
    assert f"{tmp_path}/miles/../data/train.jsonl:1" in out.stderr
    assert "metadata.verifiers" in out.stderr and "Traceback" not in out.stderr


def test_check_data_fails_on_a_binding_no_row_uses(tmp_path: Path) -> None:
    rows = [{"metadata": {"judge_query": "Capital?", "verifiers": [{"name": "general-quality_ref", "target": "P"}]}}]
    out = run("check-data", str(_miles_spec_with_rows(tmp_path, rows)))
    assert out.returncode == 2, out.stdout
    assert 'binding "general-quality" is used by no train/eval row' in out.stdout
    assert '[judging.bindings."general-quality"]' in out.stdout and "Traceback" not in out.stderr


VLLM = ("--set", 'judges.general.backend="vllm"', "--set", 'judges.general.extra_args=["--load-format", "dummy"]')


def test_judge_command_prints_the_vllm_argv_with_the_engines_interpreter() -> None:
    out = subprocess.run(
        [GYM_LAUNCH, "judge-command", "examples/three-node.toml", "general", "--port", "12050", *VLLM],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "GYM_ENGINE_PYTHON": "/opt/engines/bin/python"},
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    argv = doc["argv"]
    assert argv[:3] == ["/opt/engines/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "/weka/prepared/models/Qwen3-32B"
    assert argv[argv.index("--port") + 1] == "12050" and argv[-2:] == ["--load-format", "dummy"]
    assert doc["env"]["VLLM_PORT"] == "12051" and "CUDA_VISIBLE_DEVICES" in doc["env"]


def test_validate_plan_and_every_render_accept_a_vllm_judge(tmp_path: Path) -> None:
    assert run("validate", "examples/three-node.toml", *VLLM).returncode == 0
    plan = run("plan", "examples/three-node.toml", "--json", *VLLM)
    assert plan.returncode == 0, plan.stderr
    # What the example (written for Beaker) needs for SkyPilot: a cluster, and its Weka as one volume.
    sky = [f"--set={kv}" for kv in ('launch.skypilot.infra="k8s/team-ctx"', 'launch.skypilot.accelerators="H100"')]
    sky += [f"--set={kv}" for kv in ('launch.skypilot.mount.path="/weka"', 'launch.skypilot.mount.volume="weka-pvc"')]
    sky.append("--set=launch.weka_mounts=[]")
    for backend, more in (("slurm", []), ("beaker", []), ("skypilot", sky)):
        out = run("render", "examples/three-node.toml", "--backend", backend, "--uuid", "r1", *VLLM, *more)
        assert out.returncode == 0, (backend, out.stderr)
        assert out.stdout.strip()


def test_a_vllm_judge_setting_an_owned_flag_is_refused_by_key() -> None:
    out = run(
        "validate",
        "examples/three-node.toml",
        "--set",
        'judges.general.backend="vllm"',
        "--set",
        'judges.general.extra_args=["--port", "1"]',
    )
    assert out.returncode != 0 and "judges.general.extra_args.0" in out.stderr + out.stdout
    assert "--port is set by the agent" in out.stderr + out.stdout and "Traceback" not in out.stderr
