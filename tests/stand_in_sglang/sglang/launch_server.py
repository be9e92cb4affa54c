"""Stand-in for `python -m sglang.launch_server` (a mock: real SGLang needs a GPU).

What it does, so the agent's managed-SGLang path runs for real around it:
- refuses any flag not in the recorded SGLang 0.5.23 flag list (exit 2, like argparse);
- appends its argv, CUDA_VISIBLE_DEVICES and pid to the JSON-lines file named by
  GYM_STAND_IN_SGLANG_RECORD, so a test can see exactly what the agent ran;
- loses a port race on its first GYM_STAND_IN_SGLANG_LOSE_RACES starts (counted in the record
  file): it prints the bind error SGLang's uvicorn prints and exits 1;
- otherwise serves the project's reference judge on the given --host and --port under
  --served-model-name (the same OpenAI-compatible endpoints the agent and client use).
"""

from __future__ import annotations

import json
import os
import sys

from agent.judges import reference_server
from launch.spec.sglang_argv import argv_flags, recorded_flags

RECORD_ENV = "GYM_STAND_IN_SGLANG_RECORD"
LOSE_RACES_ENV = "GYM_STAND_IN_SGLANG_LOSE_RACES"


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


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
    if starts < int(os.environ.get(LOSE_RACES_ENV, "0")):
        print(
            f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
            "address already in use",
            flush=True,
        )
        return 1
    return reference_server.main(
        [
            "--host",
            host,
            "--port",
            str(port),
            "--model",
            _value(argv, "--served-model-name"),
            "--context-length",
            _value(argv, "--context-length"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
