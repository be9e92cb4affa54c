"""Restart caps (issue 23): [launch] max_retries counted from the run's own attempts/, and the stop
after max_no_progress_attempts attempts in a row without progress, on real agents resumed with
`gym-launch local --resume`; the refusal exits 2, leaves attempts/N/refused.json and the audit
names it. The spelling rules are checked by `gym-launch validate`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from schemas import names
from tests.harness import assert_artifacts_valid, assert_nothing_left, launch_local, read, small_spec, uid
from tests.harness.agents import BIN

# Fails at once; CKPT=1: writes a new checkpoint file first (progress).
DRIVER = """
import os, pathlib, sys
attempt = os.environ["GYM_ATTEMPT"]
if os.environ.get("CKPT") == "1":
    (pathlib.Path(os.environ["GYM_CHECKPOINT_DIR"]) / f"step-{attempt}").write_text(attempt)
sys.exit(3)
"""


def _spec(tmp: Path, launch_keys: str) -> str:
    drv = tmp / "fail_driver.py"
    drv.write_text(DRIVER)
    text = small_spec(replicas=2, ray=False, driver=f'command = ["python", "{drv}"]')
    return text.replace("[launch]\n", f"[launch]\n{launch_keys}\n", 1)


def _attempt(tmp: Path, text: str, u: str, *, resume: bool, env: dict[str, str] | None = None) -> tuple[int, str]:
    run = launch_local(tmp, text, u, env=env, args=("--resume",) if resume else ())
    code = run.wait(90)
    return code, run.text


@pytest.mark.slow
def test_max_retries_refuses_the_restart_past_the_cap(tmp_path: Path) -> None:
    text, u = _spec(tmp_path, "max_retries = 1"), uid("cap")
    run_dir = tmp_path / "out" / "cluster" / u
    env = {"CKPT": "1"}  # progress every time: only the cap stops it
    assert _attempt(tmp_path, text, u, resume=False, env=env)[0] == 1
    assert _attempt(tmp_path, text, u, resume=True, env=env)[0] == 1
    code, out = _attempt(tmp_path, text, u, resume=True, env=env)
    assert code == 2 and "attempt 3 refused: max_retries" in out, out[-2000:]
    refused = read(run_dir, names.attempt_refused(3))
    assert refused["state"] == "refused" and "max_retries is 1" in refused["reason"], refused
    assert not (run_dir / names.attempt_claim(3)).exists()
    assert_artifacts_valid(run_dir)
    claim = read(run_dir, names.attempt_claim(2))
    assert claim["checkpoints"]["files"] == 1 and claim["previous_cause"] == "driver_exit on rank 0 (exit code 3)", (
        claim
    )
    audit = subprocess.run([str(BIN / "gym-audit"), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert audit.returncode == 1 and "attempt.refused" in audit.stdout and "max_retries" in audit.stdout, audit.stdout
    assert_nothing_left(run_dir)


@pytest.mark.slow
def test_attempts_that_fail_the_same_way_without_a_checkpoint_stop(tmp_path: Path) -> None:
    text, u = _spec(tmp_path, "max_no_progress_attempts = 2"), uid("loop")
    run_dir = tmp_path / "out" / "cluster" / u
    assert _attempt(tmp_path, text, u, resume=False)[0] == 1
    assert _attempt(tmp_path, text, u, resume=True)[0] == 1  # one attempt alike: not yet a loop
    code, out = _attempt(tmp_path, text, u, resume=True)
    assert code == 2 and "max_no_progress_attempts" in out and "failed the same way" in out, out[-2000:]
    assert "driver_exit on rank 0" in read(run_dir, names.attempt_refused(3))["reason"]
    assert_artifacts_valid(run_dir)


@pytest.mark.slow
def test_attempts_that_checkpoint_keep_going(tmp_path: Path) -> None:
    text, u = _spec(tmp_path, "max_no_progress_attempts = 1"), uid("prog")
    run_dir = tmp_path / "out" / "cluster" / u
    for resume in (False, True, True):
        assert _attempt(tmp_path, text, u, resume=resume, env={"CKPT": "1"})[0] == 1
    assert read(run_dir, names.attempt_claim(3))["checkpoints"]["files"] == 2
    # Now an attempt writes nothing new: the next one is refused.
    assert _attempt(tmp_path, text, u, resume=True)[0] == 1
    code, out = _attempt(tmp_path, text, u, resume=True)
    assert code == 2 and "wrote no new checkpoint" in out, out[-2000:]


@pytest.mark.parametrize(
    ("sets", "code", "says"),
    [
        (["launch.max_retries=2", "launch.beaker.max_retries=2"], 0, ""),
        (["launch.max_retries=2", "launch.beaker.max_retries=3"], 2, "launch.beaker.max_retries: is 3"),
        (["launch.max_no_progress_attempts=0"], 2, "launch.max_no_progress_attempts"),
    ],
)
def test_one_cap_for_every_backend(tmp_path: Path, sets: list[str], code: int, says: str) -> None:
    spec = Path(__file__).resolve().parents[1] / "examples" / "demo.toml"
    argv = [str(BIN / "gym-launch"), "validate", str(spec)] + [a for s in sets for a in ("--set", s)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == code and says in r.stderr and "Traceback" not in r.stderr, r.stderr
