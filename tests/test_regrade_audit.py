"""A CPU judge job's spec run for real on this machine (`gym-launch local`: one agent, no GPU, no
Ray, an external reference judge server), then audited: with its regrade.json it passes (no
training evidence or Ray layout expected), and a record naming another run or a spec serving
other judges is an error. The Slurm path (gym-launch regrade submitting the job) is in
test_slurm_regrade.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from audit.api import audit_run
from launch import _regrade as rg
from launch.spec.config import RunConfig
from launch.spec.load import load_spec, spec_record
from schemas import RunDir, Writer, WriterKind, names
from tests.harness import assert_artifacts_valid

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _codes(run_dir: Path, severity: str) -> list[str]:
    return [f.code for f in audit_run(run_dir).findings if f.severity == severity]


@pytest.fixture
def regraded(tmp_path: Path, judge_server) -> tuple[Path, Path, RunConfig, rg.Profile]:
    server = judge_server(model="reference-judge")
    external = (
        f'judges.general={{mode="external",model="reference-judge",endpoint="{server.base_url}",'
        "max_context_length=8192,timeout=60}"
    )
    source_spec = load_spec(REPO / "examples" / "demo.toml", (external,))
    source = RunConfig.from_spec(source_spec)
    # A stand-in for a finished run: its directory with its spec (the job reads nothing else of it here).
    src = RunDir.create(tmp_path / "out", "src", mode=0o750)
    writer = Writer(source.fingerprint, None, "launcher", kind=WriterKind.LAUNCHER)
    src.write_artifact(names.SPEC, writer, spec_record(source_spec, "demo.toml"))
    profile = rg.derive_profile(source, rg.Placement(judge_partition="cpu"), "01:00:00")
    job_spec = tmp_path / "job.json"
    job_spec.write_text(json.dumps(rg.judge_job_spec(source, profile, "python -c 'print(42)'")))
    r = subprocess.run(
        [str(BIN / "gym-launch"), "local", str(job_spec), "--output-root", str(tmp_path / "out"), "--uuid", "job"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    job = tmp_path / "out" / "cluster" / "job"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # (assert_nothing_left would count the test's own judge server: its fixture stops it by PID.)
    assert json.loads((job / names.cleanup(0)).read_text())["outcome"] == "success"
    return src.path, job, source, profile


def _write_record(job: Path, body: dict) -> None:
    run = RunDir.open(job)
    fingerprint = json.loads((job / names.SPEC).read_text())["fingerprint"]
    run.write_artifact(names.REGRADE, Writer(fingerprint, None, "launcher", kind=WriterKind.LAUNCHER), body)
    run.close()


def test_a_cpu_judge_job_with_its_record_passes_and_a_wrong_record_does_not(regraded) -> None:
    src, job, source, profile = regraded
    # Without the record it is a run without a trainer that started no Ray: it trains nothing,
    # so no evidence of training is required (a run with [ray] enabled = false expects no Ray layout).
    assert _codes(job, "error") == []
    assert "driver.training_not_required" in _codes(job, "info")
    _write_record(job, rg.source_record(str(src), "src", source, profile, "python -c 'print(42)'"))
    assert_artifacts_valid(job)
    result = audit_run(job)
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert "regrade.source" in [f.code for f in result.findings]

    other = rg.source_record(str(src), "src", source, profile, "x")
    _write_record(job, {**other, "source_fingerprint": "0" * 64})
    assert _codes(job, "error") == ["regrade.source_mismatch"]
    _write_record(job, {**other, "source_run_dir": str(src.parent / "gone")})
    assert _codes(job, "error") == ["regrade.source_missing"]
    served = {**other, "profile": {**other["profile"], "services": ["general"]}}
    _write_record(job, served)
    assert _codes(job, "error") == ["regrade.services_mismatch"]
