"""The real inference engine the tests run: vLLM's CPU build in its own venv, and the tiny model.

`make engines` builds both once per checkout (`.venv-engines/`, its `tiny-model/`); GYM_ENGINE_PYTHON
names another interpreter with vLLM. A test that needs the engine skips without it, except under
`make test-engines` (GYM_REQUIRE_ENGINES=1), where a missing engine is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launch.spec.vllm_argv import ENGINE_PYTHON_ENV

__all__ = [
    "ENGINE_ENV",
    "ENGINE_VENV",
    "REQUIRE_ENV",
    "TINY_MODEL",
    "engine_env",
    "engine_python",
    "require_engine",
    "tiny_model",
    "vllm_judge_tables",
]

ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = ROOT / ".venv-engines"
TINY_MODEL = ENGINE_VENV / "tiny-model"
TINY_MODEL_SCRIPT = ROOT / "tests" / "engines" / "tiny_model.py"
REQUIRE_ENV = "GYM_REQUIRE_ENGINES"
# What the engine's environment needs here: a small KV cache (GiB) on two cores and no hub.
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def engine_python() -> str | None:
    """The interpreter with vLLM: GYM_ENGINE_PYTHON, else this checkout's engine venv; None without one."""
    named = os.environ.get(ENGINE_PYTHON_ENV)
    if named:
        return named
    python = ENGINE_VENV / "bin" / "python"
    return str(python) if (ENGINE_VENV / ".installed-stamp").is_file() and python.is_file() else None


def require_engine() -> str:
    """The engine's interpreter, or skip (fail under `make test-engines`) saying how to get one."""
    python = engine_python()
    if python is None:
        why = f"no vLLM: run `make engines` (or set {ENGINE_PYTHON_ENV})"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    return python


def tiny_model(python: str) -> tuple[Path, str]:
    """The tiny model's directory and the revision it proves, built with ``python`` if missing."""
    manifest = TINY_MODEL / "gym-prepared.json"
    if not manifest.is_file():
        subprocess.run([python, str(TINY_MODEL_SCRIPT), str(TINY_MODEL)], check=True, timeout=300)
    return TINY_MODEL, str(json.loads(manifest.read_text())["revision"])


def engine_env(python: str) -> dict[str, str]:
    """What an agent's environment adds to run the engine here: its interpreter, ENGINE_ENV."""
    return {ENGINE_PYTHON_ENV: python, **ENGINE_ENV}


def vllm_judge_tables(model_dir: Path, revision: str, *, canary: bool, max_concurrent_calls: int = 2) -> str:
    """A managed vLLM judge serving the tiny model (random weights), bound once."""
    return f"""
[judges.general]
mode = "managed"
backend = "vllm"
model = "tiny"
revision = "{revision}"
prepared_dir = "{model_dir}"
gpus = 1
max_context_length = 2048
max_concurrent_calls = {max_concurrent_calls}
timeout = 120
canary = {str(canary).lower()}
extra_args = ["--load-format", "dummy"]
[rubrics.general-quality]
profile = "general-quality"
max_output_tokens = 16
invalid_reply_attempts = 1
[judging.bindings."general-quality"]
judge = "general"
rubric = "general-quality"
"""
