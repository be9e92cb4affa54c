"""Taking stacks of real processes (agent/stacks/): py-spy reads a blocked Python process (frames,
never local variables; its command line scrubbed); where py-spy is missing a process that imported
agent.driver_api dumps its own stacks and the record says so; the whole capture keeps its time
bound even when py-spy never answers; records are schema-valid and capped."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.stacks import _pyspy as pyspy
from agent.stacks._targets import describe
from agent.stacks.capture import capture
from schemas import DriverEnv
from schemas.vocab import StackReason
from tests.harness.documents import checked

capture_mod = importlib.import_module("agent.stacks.capture")  # the module (the package exports its function)
BLOCKED = """
import sys, threading, time
{imports}
def barrier():
    threading.Event().wait()
threading.Thread(target=barrier, name="waiter", daemon=True).start()
def depth(n):
    return depth(n - 1) if n else load_weights()
def load_weights():
    token = "sk-local-variable-never-recorded"
    print("ready", flush=True)
    time.sleep(3600)
depth(int(sys.argv[1]))
"""


@pytest.fixture
def blocked(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    procs: list[subprocess.Popen] = []

    def start(depth: int = 0, armed: Path | None = None, extra: tuple[str, ...] = ()) -> subprocess.Popen:
        program = tmp_path / f"blocked{len(procs)}.py"  # a file: its text is not in the command line
        program.write_text(BLOCKED.format(imports="from agent import driver_api" if armed else ""))
        env = {**os.environ, **({DriverEnv.STACK_DUMP_DIR: str(armed)} if armed else {})}
        p = subprocess.Popen([sys.executable, str(program), str(depth), *extra], env=env, stdout=subprocess.PIPE)
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def record(fields: dict) -> dict:
    return checked("stacks", fields)


def test_py_spy_reads_a_blocked_process_without_its_locals(blocked: Callable[..., subprocess.Popen]) -> None:
    p = blocked(extra=("--api-key=sk-abcdefghijklmnop", "--token", "hf_notreal"))
    taken = capture([describe(p.pid, "driver")], reason=StackReason.HANG, timeout=20, dump_dir=None)
    doc = record(taken.fields)
    [proc] = doc["processes"]
    assert proc["method"] == "py-spy" and proc["role"] == "driver", proc
    main = proc["threads"][0]
    assert main["main"] is True and [f["function"] for f in main["frames"][:2]] == ["load_weights", "depth"]
    assert any(f["function"] == "barrier" for t in proc["threads"][1:] for f in t["frames"])
    text = json.dumps(doc)
    assert "sk-local-variable-never-recorded" not in text and '"locals"' not in text
    assert "--api-key=<redacted>" in proc["cmdline"] and "hf_notreal" not in text and "sk-abcdefghijklmnop" not in text
    assert doc["ptrace"]["permitted"] is True and doc["py_spy"]["problem"] is None


def test_without_py_spy_the_driver_apis_fallback_answers_and_says_so(
    blocked: Callable[..., subprocess.Popen], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pyspy, "find", lambda: None)
    armed = tmp_path / "dumps"
    armed.mkdir()
    with_api = blocked(armed=armed)
    without = blocked()
    targets = [describe(with_api.pid, "driver"), describe(without.pid, "driver")]
    doc = record(capture(targets, reason=StackReason.HANG, timeout=20, dump_dir=str(armed)).fields)
    assert doc["py_spy"]["path"] is None and "py-spy was not found" in doc["py_spy"]["problem"]
    assert doc["fallback_dumps"] == 1
    own, none = doc["processes"]
    assert (
        own["method"] == "faulthandler"
        and "faulthandler" in own["problem"]
        and "py-spy was not found" in own["problem"]
    )
    assert own["threads"][0]["main"] and own["threads"][0]["frames"][0]["function"] == "load_weights"
    assert none["method"] == "none" and "did not import agent.driver_api" in none["problem"]
    assert with_api.poll() is None  # the dump signal left the process running


def test_the_capture_keeps_its_bound_when_py_spy_never_answers(
    blocked: Callable[..., subprocess.Popen], tmp_path: Path
) -> None:
    stuck_spy = tmp_path / "py-spy"
    stuck_spy.write_text("#!/bin/sh\nexec sleep 60\n")
    stuck_spy.chmod(0o755)
    procs = [blocked() for _ in range(6)]
    t0 = time.monotonic()
    taken = capture(
        [describe(p.pid, "ray-worker") for p in procs],
        reason=StackReason.HANG,
        timeout=1.5,
        dump_dir=None,
        py_spy=str(stuck_spy),
    )
    took = time.monotonic() - t0
    assert took < 1.5 + 2.0, took  # the bound, plus the time to kill what still ran (loaded host)
    doc = record(taken.fields)
    assert all(p["method"] == "none" for p in doc["processes"])
    assert all("did not answer" in p["problem"] or "stack_dump_timeout" in p["problem"] for p in doc["processes"])


def test_deep_stacks_are_cut_and_say_so(
    blocked: Callable[..., subprocess.Popen], monkeypatch: pytest.MonkeyPatch
) -> None:
    p = blocked(depth=200)
    monkeypatch.setattr(capture_mod, "MAX_BYTES", 6_000)
    doc = record(capture([describe(p.pid, "driver")], reason=StackReason.HANG, timeout=20, dump_dir=None).fields)
    main = doc["processes"][0]["threads"][0]
    assert len(main["frames"]) < capture_mod.MAX_FRAMES and main["frames_cut"] > 150
    assert doc["truncated"] is True and len(json.dumps(doc)) < 6_000 + 1000
    assert main["frames"][0]["function"] == "load_weights"  # the innermost frames are the ones kept
