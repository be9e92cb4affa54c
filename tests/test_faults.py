"""A representative subset of the fault matrix (`make faults` runs all of it, three times):
each fault once, against real agents, checked the way the matrix checks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import faults

pytestmark = pytest.mark.slow
# crash-loop: three launches of a driver that fails at once, the third refused (coordination only, seconds).
SUBSET = (
    "sigkill-agent-driver",
    "sigstop-sigcont-agent",
    "launcher-sigkill",
    "setsid-grandchild",
    "crash-loop",
    "hang-silent",
)


@pytest.mark.parametrize("name", SUBSET)
def test_fault_row(name: str, tmp_path: Path) -> None:
    fault = next(f for f in faults.FAULTS if f.name == name)
    trial = faults.run_trial(fault, tmp_path)
    assert trial.ok, trial
    assert trial.orphans == [] and trial.audit_names_cause
    assert trial.seconds_to_last_exit is not None and trial.seconds_to_last_exit < 30


def test_every_fault_has_a_unique_name_and_an_expectation() -> None:
    names = [f.name for f in faults.FAULTS]
    assert len(names) == len(set(names))
    for f in faults.FAULTS:
        assert f.expect in ("pass", "fail")
        assert f.expect == "pass" or f.kinds, f.name
    assert set(faults.SETUP) <= set(names)
    assert {f.name for f in faults.FAULTS if f.slurm} == set(faults.faults_slurm.ENDINGS)


def test_unknown_fault_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert faults.main(["--only", "no-such-fault"]) == 2
    assert "unknown fault" in capsys.readouterr().err


def test_slurm_rows_are_skipped_with_the_reason_where_slurm_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults.faults_slurm._cluster_module(), "unavailable_reason", lambda: "no Slurm (simulated)")
    lines: list[str] = []
    chosen = [f for f in faults.FAULTS if f.slurm]
    results = faults.run_matrix(chosen, 3, Path("/nonexistent"), lines.append)
    assert [t.skipped for t in results] == ["no local Slurm cluster here: no Slurm (simulated)"] * len(chosen)
    assert all("skipped: no local Slurm cluster here" in line for line in lines) and len(lines) == len(chosen)
    assert "| slurm-scancel | skipped: no local Slurm cluster here" in faults.table(results)


def test_a_slurm_exit_code_reads_as_a_process_exit() -> None:
    assert [faults.faults_slurm._exit_code(c) for c in ("0:15", "1:0", "0:0", "?")] == [-15, 1, 0, None]


def test_a_terminated_matrix_leaves_no_agent_of_its_trial_behind() -> None:
    """SIGTERM to `python -m bench.faults` mid-trial unwinds it: the trial's agents are ended and its
    temporary tree removed (a default SIGTERM left both: the agents until their own timeouts)."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    runner = subprocess.Popen(
        [sys.executable, "-m", "bench.faults", "--only", "hang-silent", "--trials", "1"],
        cwd=Path(faults.__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        me = psutil.Process(runner.pid)
        deadline = time.monotonic() + 60
        agents: list[psutil.Process] = []
        while time.monotonic() < deadline and len(agents) < 3:
            time.sleep(0.5)
            agents = [c for c in me.children() if any("gym-agent" in a for a in c.cmdline()[:2])]
        assert len(agents) == 3, "the trial's three agents never started"
        argv = agents[0].cmdline()
        root = Path(argv[argv.index("--output-root") + 1])
        base = next(p for p in root.parents if p.name.startswith("gym-faults-"))
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(60) != 0
        gone, alive = psutil.wait_procs(agents, timeout=30)
        assert alive == [], [p.pid for p in alive]
        # The matrix unwound (each trial's `finally`, then its own): nothing of it is left in /tmp either.
        assert not base.exists(), base
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_engine_rows_say_they_were_skipped_without_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without vLLM the engine rows are skipped, and each trial's line says so and why (it printed
    # "FAIL: " with no reason, read as a failure of the product).
    monkeypatch.setattr(faults, "engine_python", lambda: None)
    lines: list[str] = []
    chosen = [f for f in faults.FAULTS if f.engine]
    results = faults.run_matrix(chosen, 1, tmp_path, lines.append)
    assert [t.skipped for t in results] == ["no vLLM: `make engines`"] * len(chosen)
    assert all("skipped: no vLLM" in line and "FAIL" not in line for line in lines), lines
