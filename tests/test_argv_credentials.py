"""Credentials on a command line (issue 47): a `${runtime:NAME}` reference starts a real run whose
driver sees the value, and the value is in no file of the run directory nor in any rendered job
file; a reference to an unset variable fails the run at its first step, naming it, before any
process starts."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import names, violations
from tests.harness import kill_tree_by_session, launch_local, small_spec

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cr3t-value-47-do-not-write"  # no known token prefix: only the reference keeps it off disk
VAR = "GYM_TEST_ARGV_SECRET"

# The driver writes the hash of what it was given (never the value) next to the run, outside it.
HASHER = (
    "import hashlib, sys; open(sys.argv[1], 'w').write("
    "hashlib.sha256(sys.argv[2].encode()).hexdigest() + ' ' + hashlib.sha256(sys.argv[3].encode()).hexdigest())"
)


def _spec(hash_file: Path, var: str = VAR) -> str:
    command = ["python", "-c", HASHER, str(hash_file), f"${{runtime:{var}}}", f"--api-key=${{runtime:{var}}}"]
    driver = f"command = {json.dumps(command)}\ntrains = false"
    return small_spec(replicas=1, driver=driver, ray=False)


def _files_holding(root: Path, value: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]


@pytest.mark.slow
def test_a_referenced_credential_reaches_the_driver_and_no_file(tmp_path: Path) -> None:
    hash_file = tmp_path / "seen"
    spec = _spec(hash_file)
    run = launch_local(tmp_path, spec, "creds-1", env={VAR: SECRET})
    try:
        code = run.wait(180)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 0, run.text[-3000:]
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert hash_file.read_text() == f"{digest} {hashlib.sha256(f'--api-key={SECRET}'.encode()).hexdigest()}"
    assert SECRET not in run.text
    assert _files_holding(run.run_dir, SECRET) == []
    recorded = json.loads((run.run_dir / names.SPEC).read_text())
    assert f"${{runtime:{VAR}}}" in json.dumps(recorded)  # written as the reference


# Each backend's job file for a reference in the driver's argv and the variable as a scheduler secret.
RENDER = {
    "slurm": (),
    "beaker": ("--set", f'launch.secrets.{VAR}="team-secret"'),
    "skypilot": (
        "--set",
        f'launch.secrets.{VAR}="{VAR}"',
        "--set",
        'launch.skypilot.accelerators="H100"',
        "--set",
        'launch.skypilot.mount={path="/weka", volume="v"}',
    ),
}


def _render(backend: str, value: str) -> subprocess.CompletedProcess[str]:
    command = json.dumps(["python", "train.py", "--api-key", value])
    return subprocess.run(
        [
            *(str(BIN / "gym-launch"), "render", "examples/three-node.toml", "--backend", backend, "--uuid", "r1"),
            *("--output-root", "/weka/runs", "--set", "launch.weka_mounts=[]", "--set", f"driver.command={command}"),
            *RENDER[backend],
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, VAR: SECRET},  # the launcher's own environment holds the value
    )


@pytest.mark.parametrize("backend", sorted(RENDER))
def test_rendered_job_files_keep_the_reference_and_refuse_the_value(backend: str) -> None:
    by_reference = _render(backend, f"${{runtime:{VAR}}}")
    assert by_reference.returncode == 0, by_reference.stderr
    assert SECRET not in by_reference.stdout + by_reference.stderr
    assert f"runtime:{VAR}" in by_reference.stdout
    literal = _render(backend, SECRET)
    assert literal.returncode == 2, literal.stdout[-2000:]
    assert "driver.command.3: is the value of a credential flag" in literal.stderr, literal.stderr
    assert SECRET not in literal.stdout + literal.stderr


@pytest.mark.slow
def test_an_unset_referenced_variable_fails_before_any_process_starts(tmp_path: Path) -> None:
    hash_file = tmp_path / "seen"
    run = launch_local(tmp_path, _spec(hash_file, var="GYM_TEST_NEVER_SET_47"), "creds-2")
    try:
        code = run.wait(180)
    finally:
        kill_tree_by_session(run.proc)
    assert code != 0
    failure = json.loads((run.run_dir / names.failure(0)).read_text())
    assert not violations("failure", failure), violations("failure", failure)
    assert failure["kind"] == "environment", failure
    assert "GYM_TEST_NEVER_SET_47 (referenced by driver.command.4)" in failure["cause"]
    assert not hash_file.exists() and not (run.run_dir / names.driver_log(0)).exists()
    assert "Traceback" not in run.text


def test_every_artifact_and_the_agents_log_redact_what_the_checks_missed(tmp_path: Path) -> None:
    """The second line: a credential that reached a writer anyway (here in a failure's cause and a
    log line) is redacted by the one rule before it reaches disk; references stay."""
    from agent.lifecycle._printer import Printer
    from schemas import RunDir, Writer

    leaked = "the driver ran python t.py --api-key hunter2xyz47 HF_TOKEN=abc47 ghp_abcd47 ${runtime:KEEP}"
    run = RunDir.create(tmp_path, "u", mode=0o750)
    run.ensure_dir(names.FAILURES_DIR)
    fields = {"kind": "driver_exit", "cause": leaked, "phase": "driver", "wall_time": 1.0, "monotonic_time": 1.0}
    fields["reacting_to"] = None
    doc = run.write_artifact(names.failure(0), Writer("e" * 64, 0, "me"), fields)
    assert not violations("failure", doc), violations("failure", doc)
    log = tmp_path / "agent.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        Printer("[rank 0]", fd)(leaked)
    finally:
        os.close(fd)
    for text in ((run.path / names.failure(0)).read_text(), log.read_text()):
        assert not any(s in text for s in ("hunter2xyz47", "abc47", "ghp_abcd47")), text
        assert "--api-key <redacted>" in text and "${runtime:KEEP}" in text


def test_a_rendered_job_file_is_redacted_by_the_same_rule() -> None:
    """Every renderer's text becomes a Rendered; what a check missed is redacted there, while a
    secret named by its variable (SkyPilot's --secret NAME) and a reference stay."""
    from launch.backends.base import Rendered

    text = "srun bash -c 'train --hub_token hunter2xyz47 ${runtime:KEEP}'\nsky jobs launch --secret HF_TOKEN\n"
    rendered = Rendered("slurm", text, "job.sbatch").text
    assert "hunter2xyz47" not in rendered and "--hub_token <redacted>" in rendered
    assert "${runtime:KEEP}" in rendered and "--secret HF_TOKEN" in rendered


def test_a_substituted_value_is_redacted_by_value() -> None:
    """Once substituted, a value in a child's command line looks like anything (a bare positional
    argument): the agent holds it, and every writer of its process redacts it by value."""
    from schemas import credentials

    cmdline = ["python", "train.py", "plainvalue47xyz", "--out=/x/plainvalue47xyz"]
    credentials.hold(["plainvalue47xyz"])
    assert credentials.redact_argv(cmdline) == ("python", "train.py", "<redacted>", "--out=/x/<redacted>")
    assert "plainvalue47xyz" not in json.dumps(credentials.redact({"cmdline": cmdline, "cause": " ".join(cmdline)}))
