"""Stand-in for `python -m sglang.launch_server` (a mock: real SGLang needs a GPU).

What it does, so the agent's managed-SGLang path runs for real around it:
- refuses any flag not in the recorded SGLang 0.5.23 flag list (exit 2, like argparse);
- appends its argv, CUDA_VISIBLE_DEVICES and pid to the JSON-lines file named by
  GYM_STAND_IN_SGLANG_RECORD, so a test can see exactly what the agent ran;
- loses a port race on its first GYM_STAND_IN_SGLANG_LOSE_RACES starts (counted in the record
  file): it prints the bind error SGLang's uvicorn prints and exits 1;
- waits, if GYM_STAND_IN_SGLANG_GATE names a file, until that file exists before it binds
  anything: a test can take a port between the agent's choice and the bind;
- binds the ports SGLang 0.5.23 binds on one node, in its order: first --nccl-port on every
  interface (torch.distributed's store, as the scheduler starts; without the flag a random port
  below the ephemeral range, checked free and released first, as SGLang picks it), printing the
  store's EADDRINUSE error and exiting 1 if it is taken; then it serves the project's reference
  judge on the given --host and --port under --served-model-name (the same OpenAI-compatible
  endpoints the agent and client use), holding the store's port while it runs.
"""

from __future__ import annotations

import errno
import json
import os
import random
import socket
import sys
import time

from agent.judges import reference_server
from launch.spec.sglang_argv import argv_flags, recorded_flags

RECORD_ENV = "GYM_STAND_IN_SGLANG_RECORD"
LOSE_RACES_ENV = "GYM_STAND_IN_SGLANG_LOSE_RACES"
GATE_ENV = "GYM_STAND_IN_SGLANG_GATE"
GATE_WAIT_S = 120.0


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _wait_for_gate(path: str | None) -> None:
    deadline = time.monotonic() + GATE_WAIT_S
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def _store_socket(port: int) -> socket.socket:
    """A listening socket on `port` of every interface, as torch's TCPStore server opens it
    (dual-stack where IPv6 is there, else IPv4); OSError if the port is taken."""
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        host = "::"
    except OSError:
        s, host = socket.socket(socket.AF_INET, socket.SOCK_STREAM), "0.0.0.0"
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        s.listen(16)
    except OSError:
        s.close()
        raise
    return s


def _random_store_port() -> int:
    """What SGLang 0.5.23 does without --nccl-port: a random port in 22000-29999 (below the
    ephemeral range) that binds now, released until its scheduler binds it."""
    for port in random.sample(range(22000, 30000), 64):
        try:
            _store_socket(port).close()
            return port
        except OSError:
            continue
    raise OSError("no free port in 22000-29999")


def _starts_so_far(record: str | None) -> int:
    if not record or not os.path.exists(record):
        return 0
    with open(record, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def main(argv: list[str]) -> int:
    unknown = [flag for flag in argv_flags(argv) if flag not in recorded_flags()]
    if unknown:
        print(f"launch_server.py: error: unrecognized arguments: {' '.join(unknown)}", file=sys.stderr)
        return 2
    record = os.environ.get(RECORD_ENV)
    starts = _starts_so_far(record)
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {"argv": argv, "pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
                )
                + "\n"
            )
    host, port = _value(argv, "--host"), int(_value(argv, "--port"))
    _wait_for_gate(os.environ.get(GATE_ENV))
    if starts < int(os.environ.get(LOSE_RACES_ENV, "0")):
        print(
            f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
            "address already in use",
            flush=True,
        )
        return 1
    store_port = int(_value(argv, "--nccl-port")) if "--nccl-port" in argv else _random_store_port()
    try:
        store = _store_socket(store_port)
    except OSError as exc:
        print(
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            f"address. port: {store_port}, useIpv6: false, code: -98, name: EADDRINUSE, message: {exc.strerror}",
            flush=True,
        )
        return 1
    with store:
        return _serve(argv, host, port)


def _serve(argv: list[str], host: str, port: int) -> int:
    server_argv = ["--host", host, "--port", str(port), "--model", _value(argv, "--served-model-name")]
    try:
        # Without --context-length (the policy's command gives none) SGLang takes the model's: the
        # reference server's default here.
        context = ["--context-length", _value(argv, "--context-length")] if "--context-length" in argv else []
        return reference_server.main([*server_argv, *context])
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        # The line uvicorn prints for it (the reference server would end in a traceback).
        print(f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): ", end="")
        print("address already in use", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
