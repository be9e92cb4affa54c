"""agent.proc.signals in a real process: the sender of SIGTERM is recorded (si_pid), and children
spawned through unblocked() can be stopped with SIGTERM, while the agent's own threads keep the
signals blocked for the waiting thread."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROGRAM = """
import json, subprocess, sys, threading, time
from agent.proc import signals
got = []
signals.start(got.append)
def blocked_mask(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("SigBlk:")).split()[1], 16)
with signals.unblocked():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
seen_in_thread = []
t = threading.Thread(target=lambda: seen_in_thread.append(blocked_mask(threading.get_native_id())))
t.start(); t.join()
print(json.dumps({"child_mask": blocked_mask(child.pid), "thread_mask": seen_in_thread[0]}), flush=True)
while not got:
    time.sleep(0.01)
child.terminate()
child.wait(10)
r = got[0]
print(json.dumps({"signal": r.name, "pid": r.sender_pid, "name": r.sender_name, "text": r.describe(),
                  "child_rc": child.returncode, "facts": r.facts()}), flush=True)
"""


def test_sender_is_recorded_and_children_are_stoppable() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", PROGRAM], cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        first = json.loads(p.stdout.readline())
        term = 1 << (signal.SIGTERM - 1)
        assert first["child_mask"] & term == 0, first  # the child takes SIGTERM
        assert first["thread_mask"] & term == term, first  # threads leave it to the waiting thread
        time.sleep(0.1)
        os.kill(p.pid, signal.SIGTERM)
        second = json.loads(p.stdout.readline())
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    me = os.getpid()
    assert (second["signal"], second["pid"], second["child_rc"]) == ("SIGTERM", me, -signal.SIGTERM), second
    assert second["name"] and second["text"] == f"received SIGTERM from pid {me} ({second['name']})"
    # The failure record's fields: the signal by name, its sender as the kernel told it.
    assert second["facts"] == {"signal": "SIGTERM", "sender": {"pid": me, "uid": os.getuid(), "name": second["name"]}}
