"""The sample ledger's writer (agent.driver_api.ledger / checkpoint, agent/proc/ledger.py), in real
driver processes: every line valid against schemas/ledger.schema.json; a checkpoint written through
before checkpoint() returns (a SIGKILL right after it loses no step up to it); the queue appended at
a bounded rate and at exit; bad arguments named; nothing written outside a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from schemas import DriverEnv, RunDir, names
from schemas.validation import check

REPO = Path(__file__).resolve().parents[1]


def _driver(run_dir: Path, body: str, *, rank: int = 3, attempt: int = 2) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        DriverEnv.RUN_DIR: str(run_dir),
        DriverEnv.RANK: str(rank),
        DriverEnv.ATTEMPT: str(attempt),
        "PYTHONPATH": str(REPO),
    }
    env.pop(DriverEnv.PROGRESS_FILE, None)
    code = "from agent.driver_api import ledger, checkpoint\nimport sys, time\n" + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)


def _lines(run_dir: Path, rank: int = 3) -> list[dict]:
    path = run_dir / names.ledger(rank)
    docs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for doc in docs:
        check("ledger", doc)
    return docs


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    with RunDir.create(tmp_path, "run", mode=0o750) as run:
        return run.path


def test_every_step_reaches_the_run_directory_at_exit_and_each_line_is_valid(run_dir: Path) -> None:
    proc = _driver(
        run_dir,
        """
        for step in range(1, 6):
            ledger(step, [f"s{step}-{i}" for i in range(3)] + [step * 100], epoch=step // 4)
        checkpoint(5)
        ledger(6, range(600, 602))
        """,
    )
    assert proc.wait(timeout=60) == 0
    docs = _lines(run_dir)
    steps = [(d["kind"], d["step"]) for d in docs]
    assert steps == [*(("step", s) for s in range(1, 6)), ("checkpoint", 5), ("step", 6)]
    assert docs[0]["ids"] == ["s1-0", "s1-1", "s1-2", 100]
    assert docs[4]["epoch"] == 1 and docs[6]["ids"] == [600, 601]
    assert {(d["rank"], d["attempt"], d["pid"]) for d in docs} == {(3, 2, proc.pid)}


def test_a_checkpoint_is_on_record_before_the_call_returns_and_survives_a_sigkill(run_dir: Path) -> None:
    # The driver checkpoints, then steps on and is killed before a flush could have written those
    # steps: everything up to the checkpoint is in the file, nothing of the killed tail is needed.
    proc = _driver(
        run_dir,
        """
        for step in range(1, 4):
            ledger(step, [str(step)])
        checkpoint(3)
        print("checkpointed", flush=True)
        ledger(4, ["4"])
        time.sleep(600)
        """,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "checkpointed"
    written = _lines(run_dir)  # read before the kill: checkpoint() already wrote it through
    assert [(d["kind"], d["step"]) for d in written] == [("step", 1), ("step", 2), ("step", 3), ("checkpoint", 3)]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert [d["step"] for d in _lines(run_dir)][:4] == [1, 2, 3, 3]


def test_queued_steps_are_appended_within_a_bounded_time_without_a_checkpoint(run_dir: Path) -> None:
    proc = _driver(
        run_dir,
        """
        ledger(7, ["a", "b"])
        print("recorded", flush=True)
        time.sleep(600)
        """,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "recorded"
        deadline = time.monotonic() + 30  # FLUSH_SECONDS is 1 s; the machine may be busy
        while not (run_dir / names.ledger(3)).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [d["ids"] for d in _lines(run_dir)] == [["a", "b"]]
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_planted_symlink_is_not_followed_and_the_driver_goes_on(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    (run_dir / names.ledger(3)).symlink_to(target)
    proc = subprocess.run(
        [sys.executable, "-c", "from agent.driver_api import ledger, checkpoint\nledger(1, ['x'])\ncheckpoint(1)"],
        env={**os.environ, DriverEnv.RUN_DIR: str(run_dir), DriverEnv.RANK: "3", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert target.read_text() == ""
    assert names.ledger(3) in proc.stderr and "not written" in proc.stderr


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("ledger(-1, ['a'])", "ledger(): step must be an int >= 0"),
        ("ledger(1.5, ['a'])", "ledger(): step must be an int >= 0"),
        ("ledger(1, ['a'], epoch=True)", "ledger(): epoch must be an int >= 0"),
        ("ledger(1, 'abc')", "ids must be a list of str or int sample ids, not str"),
        ("ledger(1, ['a', 2.0])", "ids[1] is a float"),
        ("checkpoint('3')", "checkpoint(): step must be an int >= 0"),
    ],
)
def test_bad_arguments_are_named(call: str, message: str) -> None:
    from agent import driver_api

    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        eval(call, {"ledger": driver_api.ledger, "checkpoint": driver_api.checkpoint})  # noqa: S307


def test_outside_a_run_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "from agent.driver_api import ledger, checkpoint\nledger(1, ['x'])\ncheckpoint(1)"],
        env={k: v for k, v in os.environ.items() if not k.startswith("GYM_")} | {"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []
