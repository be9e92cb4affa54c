"""Running real agents for a test: launching, waiting, reading and validating what they wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from agent.proc import tempdirs
from audit._model import AuditResult
from audit.api import audit_run
from schemas import RunDir, names, violations
from tests.harness import slots
from tests.harness.orphans import kill_tree_by_session, started_session

BIN = Path(sys.executable).parent


@dataclass
class LocalRun:
    proc: subprocess.Popen
    run_dir: Path
    uuid: str
    output: list[str]

    def wait(self, timeout: float) -> int:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            self.output.append(out or "")
            raise AssertionError("gym-launch local did not finish in time:\n" + (out or "")[-4000:]) from None
        self.output.append(out or "")
        return self.proc.returncode

    @property
    def text(self) -> str:
        return "".join(self.output)


_AGENT_TMP: dict[Path, Path] = {}


def agent_tmp_root(tmp: Path) -> Path:
    """This test's own root for the agents' local temp dirs (GYM_AGENT_TMP). Short, because Ray's
    AF_UNIX socket paths below it are limited to 107 bytes; conftest removes it after the test."""
    if tmp not in _AGENT_TMP:
        _AGENT_TMP[tmp] = Path(tempfile.mkdtemp(prefix="gt", dir="/tmp"))
    return _AGENT_TMP[tmp]


def forget_agent_tmp_root(tmp: Path) -> Path | None:
    return _AGENT_TMP.pop(tmp, None)


def launch_local(
    tmp: Path,
    spec_text: str,
    uuid: str,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    suffix: str = ".toml",
) -> LocalRun:
    """`gym-launch local` of ``spec_text`` (written as ``uuid`` + ``suffix``: ".yaml" for a NeMo Gym config)."""
    spec = tmp / f"{uuid}{suffix}"
    spec.write_text(spec_text)
    slots.require_ray("gym-launch local", spec_text)
    root = tmp / "out"
    cmd = [str(BIN / "gym-launch"), "local", str(spec), "--uuid", uuid, "--output-root", str(root), *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, tempdirs.ROOT_ENV: str(agent_tmp_root(tmp)), **(env or {})},
        start_new_session=True,
    )
    run_dir = root / "cluster" / uuid
    started_session(run_dir, proc.pid)
    return LocalRun(proc, run_dir, uuid, [])


def start_agent(
    tmp: Path,
    spec_path: Path,
    uuid: str,
    rank: int,
    replicas: int,
    address: str,
    gpus: int = 2,
    env: dict[str, str] | None = None,
    *,
    args: tuple[str, ...] = (),
    stdout: int | IO[bytes] = subprocess.PIPE,
    temp_root: Path | None = None,
) -> subprocess.Popen:
    """`gym-agent` for one rank of a run under `tmp`/out, in a session of its own, as a user starts
    it; its local temp dirs go under `temp_root` (default: this test's own root)."""
    slots.require_ray("gym-agent", spec_path.read_text(errors="replace") if spec_path.is_file() else "")
    cmd = [str(BIN / "gym-agent"), "--uuid", uuid, "--config", str(spec_path), "--output-root", str(tmp / "out")]
    cmd += ["--rank", str(rank), "--replicas", str(replicas), "--address", address, *args]
    full_env = {
        **os.environ,
        tempdirs.ROOT_ENV: str(temp_root or agent_tmp_root(tmp)),
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus))),
        **(env or {}),
    }
    proc = subprocess.Popen(
        cmd, stdout=stdout, stderr=subprocess.STDOUT, text=True, env=full_env, start_new_session=True
    )
    started_session(tmp / "out" / "cluster" / uuid, proc.pid)
    return proc


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    """Exit codes of agents started with start_agent; whatever still runs is killed by session."""
    try:
        return [p.wait(timeout) for p in procs]
    finally:
        for p in procs:
            kill_tree_by_session(p)


def wait_for_file(path: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear within {timeout}s")


def read(run_dir: Path, rel: str) -> dict:
    return orjson.loads((run_dir / rel).read_bytes())


def agent_pid(run_dir: Path, rank: int) -> int:
    return int(read(run_dir, names.address(rank))["pid"])


def wait_phase(run_dir: Path, rank: int, phase: str, timeout: float) -> None:
    """Until rank's phases file shows `phase` running or done; fails at once if the run failed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        failed = sorted(p.name for p in (run_dir / names.FAILURES_DIR).glob("*.json"))
        if failed:
            raise AssertionError(f"the run failed ({', '.join(failed)}) before rank {rank} reached phase {phase}")
        try:
            doc = read(run_dir, names.phases(rank))
            if any(p["phase"] == phase for p in doc["phases"]):
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"rank {rank} never reached phase {phase} within {timeout}s")


def assert_artifacts_valid(run_dir: Path) -> list[str]:
    """Every JSON artifact validates against its schema; returns the artifact names seen."""
    seen = []
    with RunDir.open(run_dir) as run:
        for rel in run.walk():
            lines_schema = names.jsonl_schema_for(rel)
            if lines_schema is not None:  # JSON Lines (grades-RANK.jsonl): every line against the schema
                for number, line in enumerate(run.read_bytes(rel, 1 << 30).splitlines(), 1):
                    problems = violations(lines_schema, orjson.loads(line))
                    assert not problems, f"{rel} line {number} violates schema {lines_schema}: {problems}"
                seen.append(rel)
                continue
            schema = names.schema_for(rel)
            if schema is None:
                continue
            doc = orjson.loads(run.read_bytes(rel))
            problems = violations(schema, doc)
            assert not problems, f"{rel} violates schema {schema}: {problems}"
            seen.append(rel)
    return seen


def failures(run_dir: Path) -> dict[int, dict]:
    d = run_dir / names.FAILURES_DIR
    out = {}
    for f in d.glob("failure-*.json") if d.exists() else ():
        doc = orjson.loads(f.read_bytes())
        out[int(doc["rank"])] = doc
    return out


def agent_temp_dirs(tmp: Path) -> set[Path]:
    """The local temp dirs (Ray's, judges') that this test's agents have right now: only this
    test's own root is looked at, never another run's dirs in /tmp."""
    root = agent_tmp_root(tmp)
    return {p for prefix in tempdirs.PREFIXES for p in root.glob(f"{prefix}*")}


def audit(
    run_dir: Path, *, verdict: str, rank: int | Collection[int] | None = None, kind: str | None = None
) -> AuditResult:
    """Audit a real run directory and check its verdict and first cause: its kind, and its rank
    (or, where racing records decide which of several ranks the audit names, one of `rank`)."""
    result = audit_run(run_dir)
    errors = [f"{f.code}: {f.message}" for f in result.findings if f.severity == "error"]
    assert result.verdict == verdict, (result.verdict, errors)
    if verdict == "pass":
        assert result.first_cause is None and not errors, errors
    else:
        fc = result.first_cause
        assert fc is not None, errors
        ranks = {rank} if rank is None or isinstance(rank, int) else set(rank)
        assert fc.kind == kind and fc.rank in ranks, (fc, result.cascade)
    return result
