"""The head's readiness probe (a child that imports Ray and reads its live nodes) is started again
when it has read nothing within its connect window: a probe that met the GCS frozen could stay in
its connect after the GCS came back, until startup_timeout (an idle `make test` saw it: 161 s).
Here a real Ray head's GCS is stopped (SIGSTOP) before the probe starts and continued after the
window has run out."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent.ray import node as ray_node
from tests.harness import kill_tree_by_session

HEAD = "127.0.0.2"
WINDOW_S = 12.0  # the probe's connect window in this test (the product's: PROBE_CONNECT_S)


def _start_head(log: Path) -> tuple[subprocess.Popen[bytes], str, ray_node.RayPorts]:
    ports = ray_node.pick_ports(f"probe-{os.getpid()}", 0, 1)
    temp_dir = ray_node.short_temp_dir()
    spec = ray_node.RayNodeSpec(
        is_head=True,
        address=HEAD,
        head_address=f"{HEAD}:{ports.gcs}",
        ports=ports,
        num_gpus=0,
        num_cpus=1,
        object_store_memory=None,
        temp_dir=temp_dir,
        resources={},
        extra_args=(),
    )
    env = ray_node.ray_env(os.environ, "", temp_dir)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ray_node.ray_start_argv(spec), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return proc, temp_dir, ports


def _gcs(head: subprocess.Popen[bytes], temp_dir: str, deadline: float) -> psutil.Process:
    while time.monotonic() < deadline and head.poll() is None:
        if ray_node.ray_started(temp_dir):
            for p in psutil.Process(head.pid).children(recursive=True):
                if p.name() == "gcs_server":
                    return p
        time.sleep(0.2)
    raise AssertionError("the Ray head did not come up")


@pytest.mark.ray(seconds=30)
def test_a_probe_that_read_no_live_nodes_within_its_window_is_started_again(tmp_path: Path) -> None:
    head, temp_dir, ports = _start_head(tmp_path / "head.log")
    try:
        gcs = _gcs(head, temp_dir, time.monotonic() + 150)
        lines: list[str] = []
        got: dict[str, Any] = {}
        log_path = tmp_path / "probe.log"
        gcs.send_signal(signal.SIGSTOP)
        try:
            with log_path.open("wb") as log:

                def probe() -> None:
                    try:
                        got["nodes"] = ray_node.probe_live_nodes(
                            f"{HEAD}:{ports.gcs}",
                            HEAD,
                            1,
                            150,
                            log.fileno(),
                            lambda: False,
                            lines.append,
                            connect_s=WINDOW_S,
                        )
                    except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                        got["error"] = exc

                t = threading.Thread(target=probe)
                t.start()
                time.sleep(WINDOW_S + 3)  # the first probe's window has run out with the GCS still stopped
                gcs.send_signal(signal.SIGCONT)
                t.join(160)
        finally:
            gcs.send_signal(signal.SIGCONT)
        assert not t.is_alive(), "the probe never ended"
        assert "error" not in got, got.get("error")
        assert [n["address"] for n in got["nodes"]] == [HEAD]
        again = [ln for ln in lines if "starting it again" in ln]
        assert again and again[0].startswith(f"Ray probe read no live nodes within {WINDOW_S:g} s of its start 1")
        assert "starting it again" in log_path.read_text()
    finally:
        kill_tree_by_session(head)
        head.wait(30)
        shutil.rmtree(temp_dir, ignore_errors=True)
