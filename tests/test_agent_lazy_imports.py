"""An idle agent's memory (issue 51 item 8): what only a flag or a hang needs is imported when it is
needed, not when the agent starts. Checked in a fresh interpreter after importing what a running
agent imports (its command line parsed, its lifecycle loaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# importlib.metadata: only `--version` asks for the installed version; concurrent.futures: only a
# stack capture runs py-spy in a pool.
LAZY = ("importlib.metadata", "concurrent.futures")


def test_a_running_agent_imports_neither_the_version_reader_nor_the_capture_pool() -> None:
    probe = (
        "import sys\n"
        "from agent import cli\n"
        "cli._parser().parse_args(['--uuid', 'u', '--rank', '0'])\n"
        "import agent.lifecycle.agent, agent.lifecycle.init\n"
        f"print(__import__('json').dumps([m for m in {LAZY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_version_flag_still_prints_the_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "--version"], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.startswith("gym-agent ") and out.stdout.endswith("\n")


def test_a_node_without_the_nvml_library_never_imports_the_binding() -> None:
    probe = (
        "import ctypes, sys\n"
        "from agent.ground.nvml import NVML_LIBRARY, open_nvml\n"
        "try:\n    ctypes.CDLL(NVML_LIBRARY); print('driver')\nexcept OSError:\n"
        "    nvml, why = open_nvml()\n"
        "    print(__import__('json').dumps([nvml is None, why, 'pynvml' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    last = out.stdout.strip().splitlines()[-1]
    if last == "driver":
        pytest.skip("this node has an NVIDIA driver: NVML is loaded for real")
    assert json.loads(last) == [True, "NVML Shared Library Not Found", False]
