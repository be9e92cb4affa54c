"""A run that stops making progress is ended and named (issue 34), with real agents (three on
127.0.0.x, no Ray: seconds per run): a silent hang ends as `hang` within progress_timeout plus two
poll intervals and its stacks name the blocking function; a quiet driver that calls progress()
passes; declared evidence that stops while the driver keeps printing is a hang; without py-spy
the driver API's fallback dumps the driver's stacks and the record says so; `gym-launch stacks`
answers on a healthy run and changes nothing. Nothing is left running after any of them. Ray's
case (an actor stuck on one of three nodes): tests/test_hang_ray.py; longer scenarios: `make faults`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from audit.api import audit_run
from schemas import names
from tests.harness import (
    BIN,
    assert_artifacts_valid,
    assert_nothing_left,
    failures,
    launch_local,
    read,
    small_spec,
    uid,
    wait_phase,
)
from tests.harness.agents import LocalRun, agent_tmp_root

pytestmark = pytest.mark.slow
POLL = 0.25
TIMEOUT = 3.0
# A driver that prints three steps, then blocks forever in a function the stacks must name.
SILENT = (
    'command = ["python", "-c", "import time\\nfor i in range(3): print(\'step\', i, flush=True); time.sleep(0.2)'
    '\\ndef wait_for_peer():\\n    time.sleep(3600)\\nwait_for_peer()"]'
)


def _spec(driver: str, **kw: object) -> str:
    table = f"{driver}\nprogress_timeout = {TIMEOUT}\nfirst_progress_timeout = {TIMEOUT}\n" + "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in kw.items()
    )
    return small_spec(driver=table, ray=False, heartbeat_timeout=6, poll_interval=POLL)


def _hang_record(run: LocalRun) -> dict:
    recs = failures(run.run_dir)
    assert recs[0]["kind"] == "hang", recs
    assert all(recs[r]["kind"] == "peer_failure" and recs[r]["reacting_to"]["kind"] == "hang" for r in (1, 2)), recs
    return recs[0]


def _main_frames(run_dir: Path, rank: int, role: str = "driver") -> list[str]:
    doc = read(run_dir, names.stacks(rank))
    proc = next(p for p in doc["processes"] if p["role"] == role and p["threads"])
    return [f["function"] for f in proc["threads"][0]["frames"]]


def test_a_silent_hang_is_ended_as_hang_with_the_blocking_function_in_its_stacks(tmp_path: Path) -> None:
    run = launch_local(tmp_path, _spec(SILENT), uid("hang-silent"))
    assert run.wait(120) == 1, run.text[-3000:]
    rec = _hang_record(run)
    facts = rec["hang"]
    assert facts["source"] == "output" and facts["timeout"] == TIMEOUT and facts["timeout_key"] == "progress_timeout"
    # Never before the bound; within two poll intervals of it (the margin: a loaded host's thread wake-ups).
    assert TIMEOUT <= facts["idle_seconds"] <= TIMEOUT + 2 * POLL + 1.0, facts
    assert "wait_for_peer" in _main_frames(run.run_dir, 0)
    for r in (1, 2):
        assert read(run.run_dir, names.stacks(r))["reason"] == "hang"  # every node kept its own
    assert_artifacts_valid(run.run_dir)
    result = audit_run(run.run_dir)
    assert result.first_cause is not None and result.first_cause.kind == "hang" and result.first_cause.rank == 0
    assert result.stacks is not None and any("wait_for_peer" in g.line() for g in result.stacks.groups)
    assert_nothing_left(run.run_dir)


def test_a_quiet_driver_calling_progress_passes(tmp_path: Path) -> None:
    """Five progress timeouts without a line of output: progress() is what counts."""
    quiet = (
        'command = ["python", "-c", "import time\\nfrom agent import driver_api\\n'
        "for i in range(40): driver_api.progress(i); time.sleep(0.2)\\n"
        "driver_api.write_result(optimizer_steps=40, final_loss=0.5, policy_version=1, policy_refreshes=1, "
        'judge_replies=0)"]'
    )
    run = launch_local(tmp_path, _spec(quiet), uid("hang-quiet"))
    assert run.wait(120) == 0, run.text[-3000:]
    assert not failures(run.run_dir)
    assert not (run.run_dir / names.driver_log(0)).read_bytes().strip()  # it said nothing
    assert audit_run(run.run_dir).verdict == "pass"
    assert_nothing_left(run.run_dir)


def test_evidence_that_stops_while_the_driver_keeps_printing_is_a_hang(tmp_path: Path) -> None:
    chatty = (
        'command = ["python", "-c", "import time\\nfor i in range(1, 4): '
        "print('step', i, 'loss', 0.5, flush=True); print('published policy', i, flush=True); time.sleep(0.3)\\n"
        "while True: print('waiting for the rollout queue', flush=True); time.sleep(0.2)\"]"
    )
    # Evidence that proves finite losses and a refresh (seed 000's rule).
    evidence = (
        'log_step_pattern = "^step (?P<step>\\\\d+) loss (?P<loss>\\\\S+)"\nlog_refresh_pattern = "^published policy"'
    )
    spec = _spec(chatty).replace("[ray]", f"[driver.evidence]\n{evidence}\n[ray]", 1)
    run = launch_local(tmp_path, spec, uid("hang-chatter"))
    assert run.wait(120) == 1, run.text[-3000:]
    facts = _hang_record(run)["hang"]
    assert facts["source"] == "evidence" and facts["last_step"] == 3, facts
    assert audit_run(run.run_dir).first_cause.kind == "hang"  # type: ignore[union-attr]
    assert_nothing_left(run.run_dir)


def _venv_without_py_spy(tmp_path: Path) -> Path:
    """A Python environment with this project but without py-spy: a bare venv whose site-packages
    adds ours (what a user's image without the py-spy package is)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    site = Path(
        subprocess.run(
            [str(bare / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = sysconfig.get_path("purelib")
    (site / "gym_agent_here.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    assert not (bare / "bin" / "py-spy").exists()
    return bare


def test_without_py_spy_the_fallback_dumps_the_drivers_stacks_and_says_so(tmp_path: Path) -> None:
    bare = _venv_without_py_spy(tmp_path)
    armed = (
        'command = ["python", "-c", "import time\\nfrom agent import driver_api\\ndriver_api.progress(1)\\n'
        'def wait_for_peer():\\n    time.sleep(3600)\\nwait_for_peer()"]'
    )
    spec_text = _spec(armed)
    uuid = uid("hang-nopyspy")
    spec = tmp_path / "nopyspy.toml"
    spec.write_text(spec_text)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != str(BIN))
    cmd = [str(bare / "bin" / "python"), "-m", "launch.cli", "local", str(spec), "--uuid", uuid]
    cmd += ["--output-root", str(tmp_path / "out")]
    env = {**os.environ, "PATH": path, "GYM_AGENT_TMP": str(agent_tmp_root(tmp_path))}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, start_new_session=True)
    run_dir = tmp_path / "out" / "cluster" / uuid
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    doc = read(run_dir, names.stacks(0))
    assert doc["py_spy"]["path"] is None and "py-spy was not found" in doc["py_spy"]["problem"]
    driver = next(p for p in doc["processes"] if p["role"] == "driver" and p["threads"])
    assert driver["method"] == "faulthandler" and "faulthandler" in driver["problem"]
    assert "wait_for_peer" in [f["function"] for f in driver["threads"][0]["frames"]]
    assert doc["fallback_dumps"] >= 1
    result = audit_run(run_dir)
    assert result.stacks is not None and any("py-spy was not found" in n for n in result.stacks.notes)
    assert any("dumped their own stacks" in n for n in result.stacks.notes)
    assert_nothing_left(run_dir)


def test_gym_launch_stacks_on_a_healthy_run_answers_and_changes_nothing(tmp_path: Path) -> None:
    # The driver serves until the test has asked twice (a stop file; bounded), so the run cannot
    # end between the two questions on a loaded machine.
    stop = tmp_path / "stop"
    serving = (
        'command = ["python", "-c", "import os, time\\nfrom agent import driver_api\\ndef serve_rollouts():\\n'
        f"    for i in range(480):\\n        driver_api.progress(i)\\n        if os.path.exists('{stop}'): break\\n"
        "        time.sleep(0.25)\\nserve_rollouts()\\n"
        "driver_api.write_result(optimizer_steps=48, final_loss=0.5, policy_version=1, policy_refreshes=1, "
        'judge_replies=0)"]'
    )
    run = launch_local(tmp_path, _spec(serving), uid("live-stacks"))
    wait_phase(run.run_dir, 0, "driver", 60)
    before = sorted(os.listdir(run.run_dir))
    t0 = time.monotonic()
    asked = subprocess.run(
        [str(BIN / "gym-launch"), "stacks", str(run.run_dir), "--json"], capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - t0
    assert asked.returncode == 0, asked.stdout[-2000:] + asked.stderr[-2000:]
    doc = json.loads(asked.stdout)
    assert doc["asked"] == [0, 1, 2] and doc["answered"] == [0, 1, 2] and not doc["missing"], doc["doorbell"]
    assert doc["doorbell"].startswith("doorbell: rang 3"), doc["doorbell"]
    driver = next(g for g in doc["summary"]["groups"] if g["role"] == "driver")
    assert "serve_rollouts" in driver["shown"]
    assert doc["stacks"]["0"]["reason"] == "request"
    assert took < 15, took  # the doorbell woke them: not the slow listing
    one = subprocess.run(
        [str(BIN / "gym-launch"), "stacks", str(run.run_dir), "--rank", "1"], capture_output=True, text=True, timeout=60
    )
    assert one.returncode == 0 and "1 of 1 rank(s) answered" in one.stdout, one.stdout + one.stderr
    # Request and answers removed (the run may have finished meanwhile on a loaded machine: its own
    # end files may be new, nothing of the stacks requests). A write in flight when `before` was
    # listed (the atomic writer's ".LEAF.<hex>.tmp", seen under load) lasts only as long as it.
    after = os.listdir(run.run_dir)
    before = [name for name in before if not names.is_temp(name)]
    assert set(before) <= set(after), sorted(set(before) - set(after))
    assert not [n for n in after if n.startswith("stacks-")], after
    requests = run.run_dir / names.STACK_REQUESTS_DIR
    assert not requests.exists() or not os.listdir(requests)
    stop.touch()
    assert run.wait(120) == 0, run.text[-3000:]  # the run went on and succeeded
    assert not failures(run.run_dir) and audit_run(run.run_dir).verdict == "pass"
    finished = subprocess.run([str(BIN / "gym-launch"), "stacks", str(run.run_dir)], capture_output=True, text=True)
    assert finished.returncode == 1 and "has finished" in finished.stdout, finished.stdout
    usage = subprocess.run([str(BIN / "gym-launch"), "stacks", str(tmp_path / "nope")], capture_output=True, text=True)
    assert usage.returncode == 2 and "no such run directory" in usage.stderr, usage.stderr
    assert_nothing_left(run.run_dir)


def test_a_walltime_warning_on_a_stuck_run_is_a_hang_with_every_nodes_stacks(tmp_path: Path) -> None:
    """The scheduler's warning (what the rendered Slurm job's trap writes) comes while the driver
    has made no progress for progress_timeout, before its first_progress_timeout: the driver's node
    calls it a hang, the other nodes stop for the warning and keep their stacks; the audit names
    the hang, not the time limit."""
    stuck = (
        'command = ["python", "-c", "import time\\ndef load_checkpoint():\\n    time.sleep(3600)\\nload_checkpoint()"]'
    )
    spec = _spec(stuck).replace(f"first_progress_timeout = {TIMEOUT}", "first_progress_timeout = 3600", 1)
    run = launch_local(tmp_path, spec, uid("hang-walltime"))
    wait_phase(run.run_dir, 0, "driver", 60)
    time.sleep(TIMEOUT + 1.5)
    (run.run_dir / names.WALLTIME_WARNING).write_text("SIGUSR1 at (test)\n")
    assert run.wait(120) == 1, run.text[-3000:]
    recs = failures(run.run_dir)
    assert recs[0]["kind"] == "hang" and recs[0]["hang"]["walltime_warning"] is True, recs[0]
    assert all(recs[r]["kind"] in ("time_limit", "peer_failure") for r in (1, 2)), recs
    assert read(run.run_dir, names.stacks(0))["reason"] == "hang"
    assert "load_checkpoint" in _main_frames(run.run_dir, 0)
    for r in (1, 2):  # every node kept its stacks before its teardown
        assert read(run.run_dir, names.stacks(r))["reason"] in ("walltime", "hang")
    fc = audit_run(run.run_dir).first_cause
    assert fc is not None and fc.kind == "hang" and fc.rank == 0 and "walltime warning" in fc.cause
    assert_nothing_left(run.run_dir)
