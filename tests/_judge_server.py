"""Start the reference judge server as a real subprocess for tests, and stop it by its PID.

Each server runs in its own session (process group == its PID), is reached only on 127.0.0.1,
and is stopped by the fixture finalizer with SIGTERM then SIGKILL to that group — never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.judges._port_file import read_port_file

HOST = "127.0.0.1"
START_TIMEOUT_S = 20.0


@dataclass
class RunningServer:
    proc: subprocess.Popen[bytes]
    port: int
    model: str
    log_path: Path
    port_file: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, grace_s: float = 5.0) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(grace_s)
        return self.proc.returncode


def start_module(
    tmp_dir: Path,
    module: str,
    *args: str,
    name: str,
    model: str = "",
    env: dict[str, str] | None = None,
) -> RunningServer:
    """``python -m MODULE ARGS --port-file F`` in its own session; returns once F names its port."""
    port_file = tmp_dir / f"{name}.port.json"
    log_path = tmp_dir / f"{name}.log"
    argv = [sys.executable, "-m", module, *args, "--port-file", str(port_file)]
    child_env = {k: v for k, v in os.environ.items() if k != "GYM_REFERENCE_JUDGE_FAULTS"}
    child_env.update(env or {})
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=child_env)
    deadline = time.monotonic() + START_TIMEOUT_S
    server = RunningServer(proc, 0, model, log_path, port_file)
    while time.monotonic() < deadline:
        port = read_port_file(port_file)
        if port is not None:
            server.port = port
            return server
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"{module} did not publish its port: {log_path.read_text(errors='replace')}")


def start_server(
    tmp_dir: Path,
    *extra: str,
    model: str = "judge-model",
    name: str = "judge",
    env: dict[str, str] | None = None,
) -> RunningServer:
    args = ("--host", HOST, "--port", "0", "--model", model, *extra)
    return start_module(tmp_dir, "agent.judges.reference_server", *args, name=name, model=model, env=env)


def server_factory(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """Body of each test module's ``judge_server`` fixture: yields ``factory(*extra_cli_args,
    model=..., env=...)``; every server it started is stopped afterwards."""
    started: list[RunningServer] = []

    def factory(*extra: str, model: str = "judge-model", env: dict[str, str] | None = None) -> RunningServer:
        server = start_server(tmp_path, *extra, model=model, name=f"judge{len(started)}", env=env)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


def dead_port() -> int:
    """A loopback port with nothing listening (bound, then closed: used only to be refused)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]
