"""What a new user's hang trials found (issue 49, item 3), with real agents (`gym-launch local`, three
on 127.0.0.x, no Ray): a frozen node (its agent and reaper SIGSTOPped) no longer keeps the launcher
waiting: it ends that rank's processes a bound after the others ended and says so;
`gym-launch status --json` gives each agent's pid and the driver's. A driver whose two worker
threads deadlock on two locks while its main thread joins them is a hang whose audit (text, JSON,
HTML) names both threads and their lines, and whose log excerpt is what the driver printed before
the hang was called, not the traceback it printed while being stopped. The rules without runs:
tests/test_hang_trials.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from audit._report_html import render as render_html
from audit._report_text import render
from audit.api import audit_run
from schemas import names
from tests.harness import (
    BIN,
    agent_pid,
    assert_artifacts_valid,
    assert_nothing_left,
    failures,
    launch_local,
    read,
    small_spec,
    uid,
    wait_phase,
)
from tests.test_hang_trials import LOCK_PAIR

pytestmark = pytest.mark.slow
BEACON_TIMEOUT = 3.0
SLEEPY = 'command = ["python", "-c", "import time; time.sleep(300)"]\ntrains = false'
DRIVER = (
    """
import signal, sys, threading, time
def stopped(signum, frame):
    print("Traceback (most recent call last):", flush=True)
    print('  File "shutdown.py", line 1, in <module>', flush=True)
    print("SystemExit: 15", flush=True)
    sys.exit(15)
signal.signal(signal.SIGTERM, stopped)
"""
    + LOCK_PAIR
    + """for i in range(3):
    print("step", i, flush=True)
ts = [threading.Thread(target=take_ab, name="loader", daemon=True),
      threading.Thread(target=take_ba, name="saver", daemon=True)]
for t in ts: t.start()
print("waiting for the workers", flush=True)
for t in ts: t.join()
"""
)


def _spec(driver: str, extra: str = "") -> str:
    text = small_spec(driver=driver, ray=False, heartbeat_timeout=120, poll_interval=0.25, teardown_grace=2.0)
    return text.replace(
        "[launch.coordination]\n",
        f"[launch.coordination]\nbeacon_timeout = {BEACON_TIMEOUT}\nstack_dump_timeout = 10\n{extra}",
        1,
    )


def test_a_frozen_node_is_ended_by_the_launcher_and_status_gives_every_pid(tmp_path: Path) -> None:
    run = launch_local(tmp_path, _spec(SLEEPY), uid("frozen-launch"))
    for r in range(3):
        wait_phase(run.run_dir, r, "driver", 90)
    time.sleep(1.0)  # a heartbeat with the driver's pid
    status = subprocess.run(
        [str(BIN / "gym-launch"), "status", str(run.run_dir), "--json"], capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stderr
    rows = {r["rank"]: r for r in json.loads(status.stdout)["ranks"]}
    pids = {rank: psutil.Process(agent_pid(run.run_dir, rank)) for rank in rows}  # (read before the freeze)
    driver_rank = next(r for r in rows if any("time.sleep(300)" in " ".join(c.cmdline()) for c in pids[r].children()))
    driver_pids = [c.pid for c in pids[driver_rank].children() if "time.sleep(300)" in " ".join(c.cmdline())]
    text = subprocess.run([str(BIN / "gym-launch"), "status", str(run.run_dir)], capture_output=True, text=True)
    frozen_rank = next(r for r in range(3) if r != driver_rank)
    agent = pids[frozen_rank]
    frozen = [agent, *agent.children(recursive=True)]
    for p in frozen:
        os.kill(p.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        code = run.wait(150)  # before the fix: waits for as long as the node stays frozen
    finally:
        for p in frozen:  # a failed test leaves no stopped process behind
            if p.is_running():
                p.kill()
    took = time.monotonic() - t0
    assert code == 1
    said = [ln for ln in run.text.splitlines() if f"rank {frozen_rank}'s agent (pid {agent.pid}, stopped)" in ln]
    assert said and "neither ended nor written a heartbeat" in said[0], run.text[-3000:]
    assert "SIGKILL, by process group and pid" in said[0]
    # beacon_timeout, then the bound: poll 0.25 + stack_dump_timeout 10 + teardown_grace 2 + 15 s margin.
    assert took < BEACON_TIMEOUT + 0.25 + 10 + 2 + 15 + 30, took
    assert not [p.pid for p in frozen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    recs = failures(run.run_dir)
    assert frozen_rank not in recs, recs  # killed frozen: it never wrote, nor did its reaper
    assert any(rec["kind"] == "peer_silent" and rec["reacting_to"]["rank"] == frozen_rank for rec in recs.values())
    first = render(audit_run(run.run_dir))
    assert f"rank {frozen_rank}, silent" in first[first.index("First cause:") :].splitlines()[1]
    # gym-launch status, read while every agent ran, gave each agent's pid and the driver's.
    for rank, row in rows.items():
        assert row["agent_pid"] == pids[rank].pid
    assert [r for r in rows if rows[r]["driver_pid"] is not None] == [driver_rank], rows
    driver = rows[driver_rank]["driver_pid"]
    assert driver in driver_pids, (driver, driver_pids)
    assert f"agent {pids[driver_rank].pid} driver {driver}" in text.stdout, text.stdout
    assert_nothing_left(run.run_dir)


def test_two_deadlocked_threads_are_named_and_the_excerpt_ends_where_the_hang_was_called(tmp_path: Path) -> None:
    program = tmp_path / "deadlock.py"
    program.write_text(DRIVER)
    table = f'command = ["python", "{program}"]\nprogress_timeout = 3\nfirst_progress_timeout = 3\n'
    run = launch_local(tmp_path, _spec(table), uid("deadlock"))
    assert run.wait(180) == 1, run.text[-3000:]
    recs = failures(run.run_dir)
    [rank] = [r for r, rec in recs.items() if rec["kind"] == "hang"]
    assert "SystemExit: 15" in (run.run_dir / names.driver_log(rank)).read_text()  # it was stopped so
    stacks = read(run.run_dir, names.stacks(rank))
    assert {t["name"] for p in stacks["processes"] for t in p["threads"]} >= {"loader", "saver"}

    result = audit_run(run.run_dir)
    text = render(result)
    block = text[text.index("First cause:") :]
    head = block.splitlines()[2]
    assert head.startswith(f"  waiting threads: rank {rank}, driver pid"), block[:1500]
    assert "loader in take_ab (deadlock.py:13)" in head and "saver in take_ba (deadlock.py:18)" in head, head
    excerpt = [ln for ln in block.splitlines() if ln.startswith("    | ")]
    assert excerpt[-1] == "    | waiting for the workers" and "    | step 2" in excerpt, excerpt
    assert not any("SystemExit" in ln for ln in excerpt), excerpt
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["stacks"]["waiting_threads"] and "take_ab" in doc["stacks"]["waiting_threads"][0]
    html = render_html(result)
    assert "loader in take_ab (deadlock.py:13)" in html and 'id="stacks-waiting"' in html
    assert isinstance(recs[rank]["hang"]["log_bytes"], int)
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
