"""The preflight's GPU checks and the teardown's residue check. GPUs cannot exist on these machines:
NVML is the fake module tests/harness/fake_nvml/pynvml.py (the real binding's names and shapes);
the processes holding a GPU are real processes, so PIDs and command lines are real."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from agent.ground.nvml import open_nvml
from agent.preflight._gpus import check_gpus
from agent.preflight._residue import residue
from tests.harness.fake_nvml import pynvml as fake

GIB = 1 << 30


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "nvml.json"
    monkeypatch.setenv(fake.STATE_ENV, str(state))
    fake.write_state(str(state), [fake.gpu(i) for i in range(4)])
    return state


@dataclass
class Holder:
    pid: int

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


@pytest.fixture
def holder() -> Iterator[Holder]:
    """A real process of "another job" holding a GPU: not a descendant of this one (the check
    never counts its own process tree as foreign), so it is started through a shell that exits."""
    out = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(300)' sglang-dp-worker >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    h = Holder(int(out.stdout.strip()))
    yield h
    h.kill()


PLANNED = ((0, "0"), (1, "1"))


def test_without_nvml_the_check_is_skipped_and_never_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fake.STATE_ENV, raising=False)
    seen, states = check_gpus(PLANNED, 0.95, fake)
    assert seen.skipped and not seen.problems and states == ()
    assert seen.summary == "skipped: no NVML (NVML Shared Library Not Found)"
    # The real binding on this GPU-less machine says the same.
    real, why = open_nvml()
    assert real is None and why


def test_healthy_gpus_pass_and_are_named_by_uuid(nvml: Path) -> None:
    seen, states = check_gpus(PLANNED, 0.95, fake)
    assert not seen.problems and not seen.skipped, seen
    assert [(g.device, g.index, g.uuid) for g in states] == [
        (0, 0, "GPU-fake-0000-0000-0000-0000-000000000000"),
        (1, 1, "GPU-fake-0001-0000-0000-0000-000000000000"),
    ]
    # A CUDA_VISIBLE_DEVICES entry may be a UUID: NVML finds it by UUID.
    seen, states = check_gpus(((0, "GPU-fake-0003-0000-0000-0000-000000000000"),), 0.95, fake)
    assert not seen.problems and states[0].index == 3


def test_a_foreign_process_is_named_with_pid_and_command_line(nvml: Path, holder: Holder) -> None:
    devices = [fake.gpu(i) for i in range(4)]
    devices[1]["holders"] = [{"pid": holder.pid, "used": 70 * GIB}]
    fake.write_state(str(nvml), devices)
    seen, states = check_gpus(PLANNED, 0.95, fake)
    assert len(seen.problems) == 2, seen.problems  # the process, and the memory it takes
    who, memory = seen.problems
    assert who.startswith("GPU 1 (GPU-fake-0001-0000-0000-0000-000000000000; planned device 1) is used by 1 process")
    assert f"pid {holder.pid} `" in who and "sglang-dp-worker" in who and "70.0 GiB" in who
    assert "min_free_gpu_memory = 0.95" in memory and "GPU 1 " in memory
    assert states[1].processes[0].pid == holder.pid
    # Once that process is gone the GPU is fit again.
    holder.kill()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(holder.pid) and psutil.Process(holder.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    seen, _ = check_gpus(PLANNED, 0.95, fake)
    assert not seen.problems


def test_low_free_memory_without_a_visible_process(nvml: Path) -> None:
    devices = [fake.gpu(i) for i in range(4)]
    devices[0]["used"] = 20 * GIB  # 60 of 80 GiB free: 75 %
    fake.write_state(str(nvml), devices)
    seen, _ = check_gpus(PLANNED, 0.95, fake)
    assert seen.problems == (
        "GPU 0 (GPU-fake-0000-0000-0000-0000-000000000000; planned device 0) has 60.0 GiB free of 80.0 GiB (75%), "
        "below [launch.preflight] min_free_gpu_memory = 0.95: free it or exclude this node",
    )
    assert not check_gpus(PLANNED, 0.7, fake)[0].problems  # the bound is the spec's


def test_ecc_errors_and_pending_retirement(nvml: Path) -> None:
    devices = [fake.gpu(i) for i in range(4)]
    devices[0]["ecc"] = 3
    devices[1]["retired_pending"] = True
    devices[2] = {**fake.gpu(2), "remap_pending": True}
    del devices[2]["retired_pending"]  # a GPU that remaps rows instead of retiring pages
    devices[3]["ecc_supported"] = False
    fake.write_state(str(nvml), devices)
    seen, states = check_gpus(((0, "0"), (1, "1"), (2, "2"), (3, "3")), 0.95, fake)
    assert len(seen.problems) == 3, seen.problems
    assert "GPU 0 (GPU-fake-0000" in seen.problems[0] and "3 uncorrectable ECC error(s)" in seen.problems[0]
    assert "GPU 1 (GPU-fake-0001" in seen.problems[1] and "retirement or row remapping pending" in seen.problems[1]
    assert "GPU 2 (GPU-fake-0002" in seen.problems[2]
    assert states[3].ecc_uncorrected is None  # not supported: unknown, not a problem


def test_missing_devices_are_named(nvml: Path) -> None:
    fake.write_state(str(nvml), [fake.gpu(0)])  # NVML sees one GPU; the plan gives this node two
    seen, states = check_gpus(((0, "0"), (1, "1"), (2, "GPU-gone")), 0.95, fake)
    assert seen.summary.startswith("1/3 planned GPU(s) found")
    assert len(seen.problems) == 2
    assert seen.problems[0].startswith("planned device 1 (CUDA_VISIBLE_DEVICES entry '1') does not exist here")
    assert "NVML sees 1 GPU(s) here" in seen.problems[0]
    assert "planned device 2 (CUDA_VISIBLE_DEVICES entry 'GPU-gone')" in seen.problems[1]
    assert [g.index for g in states] == [0, None, None]


def test_memory_not_released_after_teardown_names_the_pids(nvml: Path, holder: Holder) -> None:
    _, baseline = check_gpus(PLANNED, 0.95, fake)
    # During the run a process of ours took GPU 0 and escaped the teardown.
    devices = [fake.gpu(i) for i in range(4)]
    devices[0]["holders"] = [{"pid": holder.pid, "used": 40 * GIB}]
    fake.write_state(str(nvml), devices)
    t0 = time.monotonic()
    left = residue(baseline, 1.0, module=fake)
    assert time.monotonic() - t0 >= 1.0  # it waited for the memory to come back
    assert len(left) == 1, left
    (g,) = left
    assert (g["device"], g["index"], g["uuid"]) == (0, 0, "GPU-fake-0000-0000-0000-0000-000000000000")
    assert g["used_bytes"] == 40 * GIB + (500 << 20) and g["preflight_used_bytes"] == 500 << 20
    assert [p["pid"] for p in g["pids"]] == [holder.pid] and "sglang-dp-worker" in g["pids"][0]["cmdline"]
    # Memory given back within the timeout is no residue, and the wait ends when it is.
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill {holder.pid}"])
    t0 = time.monotonic()
    assert residue(baseline, 10.0, module=fake) == []
    assert time.monotonic() - t0 < 8.0
    killer.wait()


def test_without_cuda_visible_devices_the_gpus_are_nvmls(nvml: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU discovery asks NVML before parsing nvidia-smi's text (agent/coord/identity.py)."""
    from agent.coord.identity import visible_devices

    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert visible_devices({}) == ("0", "1", "2", "3")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == ("2", "3")
