"""A template rubric under real agents: the run's registry.json carries the template's file, text and
digest, the canaries and the driver grade through it, the audit passes; a template changed after
validation is refused when the agent writes registry.json, naming both digests and the file."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import names
from tests.harness import (
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    read,
    uid,
)
from tests.harness.agents import start_agent, wait_all

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rubrics" / "graded-against-reference.txt"
GYM_LAUNCH = ROOT / ".venv" / "bin" / "gym-launch"
DEMO = f'command = ["python", "{ROOT / "examples" / "demo_driver.py"}"]'
# Grades through every binding of the registry without Ray (the rubric is the subject, not Ray).
GRADING = f'command = ["{sys.executable}", "{ROOT / "tests" / "data" / "grading_driver.py"}"]'


def template_spec(tmp_path: Path, pinned: str | None = None, driver: str = DEMO, **kw: object) -> tuple[str, Path]:
    """The judged three-node spec whose general-quality-ref rubric is the example template (copied
    beside the spec, named relative to it), in JSON on 1..10 as the template asks."""
    (tmp_path / "rubrics").mkdir(exist_ok=True)
    template = tmp_path / "rubrics" / "mine.txt"
    shutil.copy(EXAMPLE, template)
    digest = pinned or hashlib.sha256(template.read_bytes()).hexdigest()
    spec = judge_spec(driver=driver, **kw).replace(
        'profile = "general-quality-ref"\n',
        f'template_file = "rubrics/mine.txt"\ntemplate_sha256 = "{digest}"\nreply_format = "json"\n'
        "score_scale = [1, 10]\n",
    )
    assert "template_file" in spec
    return spec, template


def test_a_template_rubric_grades_through_a_real_run(tmp_path: Path) -> None:
    spec, template = template_spec(tmp_path, driver=GRADING, ray=False)
    run = launch_local(tmp_path, spec, uid("tmpl"), env={"GRADES": "2"})
    try:
        assert run.wait(240) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    assert_artifacts_valid(d)  # registry.json against its schema, with the template entry
    rubric = read(d, names.REGISTRY)["rubrics"]["general-quality-ref"]
    assert rubric["template_file"] == str(template) and "profile" not in rubric
    assert rubric["template"] == template.read_text(encoding="utf-8")
    assert rubric["digest"] == hashlib.sha256(template.read_bytes()).hexdigest()
    canaries = read(d, names.CANARIES)
    assert canaries["passed"], canaries
    assert read(d, names.DRIVER_RESULT)["judge_replies"] > 0
    assert_nothing_left(d)
    audit(d, verdict="pass")


def test_a_template_changed_after_validation_fails_the_run_naming_both_digests(tmp_path: Path) -> None:
    """The agents are started directly (as a scheduler starts them): nothing validated the file,
    and the agent that writes registry.json refuses it."""
    spec_text, template = template_spec(tmp_path, ray=False)
    pinned = hashlib.sha256(template.read_bytes()).hexdigest()
    spec = tmp_path / "run.toml"
    spec.write_text(spec_text, encoding="utf-8")
    validated = subprocess.run([str(GYM_LAUNCH), "validate", str(spec)], capture_output=True, text=True, timeout=60)
    assert validated.returncode == 0, validated.stderr
    template.write_bytes(template.read_bytes().replace(b"is wrong", b"is fine"))
    u = uid("tmpl-pin")
    procs = [start_agent(tmp_path, spec, u, r, 3, f"127.0.0.{2 + r}") for r in range(3)]
    codes = wait_all(procs, 180)
    assert all(c != 0 for c in codes), codes
    d = tmp_path / "out" / "cluster" / u
    assert_artifacts_valid(d)
    fails = failures(d)
    cause = next(f for f in fails.values() if f["kind"] == "data")
    assert cause["phase"] == "registry", cause
    actual = hashlib.sha256(template.read_bytes()).hexdigest()
    assert pinned in cause["cause"] and actual in cause["cause"] and str(template) in cause["cause"], cause
    assert not (d / names.REGISTRY).exists()
    assert_nothing_left(d)
