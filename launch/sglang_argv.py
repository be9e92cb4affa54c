"""The exact command line and environment of a managed judge (DESIGN §7). Pure: no I/O but
locating the chat-template file shipped in this package.

SGLang renames and removes flags between releases (``--cuda-graph-max-bs`` disappeared in
0.5.20), so this module targets one pinned release, ``SGLANG_VERSION``. The flags used here are
checked against ``launch/data/sglang-<version>-flags.txt`` (recorded from that release's parser)
on every test run, and against the real parser when sglang is installed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

SGLANG_VERSION = "0.5.23"

# Fixed in both eager and graph modes: an explicit fraction bypasses SGLang's automatic choice
# (and its graph-headroom adjustment), so the memory split does not change with cuda_graphs.
MEM_FRACTION_STATIC = "0.85"

# Liveness probes must not generate: with this set, SGLang's /health is a cheap 200 instead of a
# one-token generation that queues behind grading traffic.
JUDGE_ENV: Mapping[str, str] = MappingProxyType({"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"})

CHAT_TEMPLATES: Mapping[str, str] = MappingProxyType({"qwen3-no-thinking": "qwen3-no-thinking.jinja"})

# Qwen's documented factor-4 YaRN setting, passed as a serving override so prepared weights
# and their config.json are never rewritten.
CONTEXT_EXTENSIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "qwen3-yarn-128k": MappingProxyType(
            {
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                }
            }
        )
    }
)

_DATA_DIR = Path(__file__).resolve().parent / "data"


class JudgeCommandError(ValueError):
    """The judge table cannot be turned into a command; the message names the key."""


@dataclass(frozen=True)
class JudgeCommand:
    """What the agent executes for one judge: argv plus the variables it adds to the environment.

    ``CUDA_VISIBLE_DEVICES`` is deliberately absent: the agent adds the judge's own devices.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env": dict(self.env)}


def chat_template_path(name: str) -> str:
    """Absolute path of a chat template shipped with the project (resolved where it runs)."""
    try:
        file_name = CHAT_TEMPLATES[name]
    except KeyError:
        known = ", ".join(sorted(CHAT_TEMPLATES))
        raise JudgeCommandError(f"unknown chat_template {name!r} (known: {known})") from None
    return str(_DATA_DIR / file_name)


def recorded_flags(version: str = SGLANG_VERSION) -> frozenset[str]:
    """Long flags accepted by ``sglang.launch_server`` at ``version``, as recorded in launch/data."""
    path = _DATA_DIR / f"sglang-{version}-flags.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def argv_flags(argv: Sequence[str]) -> list[str]:
    """The ``--flag`` tokens of an argv (values and ``flag=value`` suffixes dropped)."""
    return [token.split("=", 1)[0] for token in argv if token.startswith("--")]


def _positive_int(name: str, judge: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = judge.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise JudgeCommandError(f"judges.{name}.{key} must be a positive integer, got {value!r}")
    return value


def _required_str(name: str, judge: Mapping[str, Any], key: str) -> str:
    value = judge.get(key)
    if not isinstance(value, str) or not value:
        raise JudgeCommandError(f"judges.{name}.{key} is required for a managed judge")
    return value


def _check_managed(name: str, judge: Mapping[str, Any], backend: str) -> None:
    mode = judge.get("mode", "managed")
    if mode != "managed":
        raise JudgeCommandError(f"judges.{name} is mode={mode!r}: only managed judges are launched")
    actual = judge.get("backend", "sglang")
    if actual != backend:
        raise JudgeCommandError(f"judges.{name}.backend is {actual!r}, not {backend!r}")


def sglang_command(
    name: str,
    judge: Mapping[str, Any],
    *,
    host: str,
    port: int,
    python: str | None = None,
) -> JudgeCommand:
    """``python -m sglang.launch_server ...`` for managed judge ``name`` (its ``[judges.NAME]`` table).

    ``python`` is the interpreter that has sglang installed (default: this interpreter).
    """
    _check_managed(name, judge, "sglang")
    model = _required_str(name, judge, "model")
    prepared_dir = _required_str(name, judge, "prepared_dir")
    tp_size = _positive_int(name, judge, "tensor_parallel_size", 1)
    context_length = _positive_int(name, judge, "max_context_length")
    concurrency = _positive_int(name, judge, "max_concurrent_calls")

    argv: list[str] = [
        python or sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        prepared_dir,
        "--served-model-name",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--tp-size",
        str(tp_size),
        "--context-length",
        str(context_length),
        "--max-running-requests",
        str(concurrency),
        "--mem-fraction-static",
        MEM_FRACTION_STATIC,
    ]

    template = judge.get("chat_template")
    if template is not None:
        argv += ["--chat-template", chat_template_path(template)]

    cuda_graphs = judge.get("cuda_graphs")
    if cuda_graphs is True:
        # Decode capture never needs a batch larger than the running-request limit; prefill keeps
        # SGLang's default (breakable) graph backend and its own capture sizes.
        argv += ["--cuda-graph-max-bs-decode", str(concurrency)]
    elif cuda_graphs is None or cuda_graphs is False:
        # Eager by default. The per-phase backends are the 0.5.23 spelling; the older
        # --disable-cuda-graph is deprecated there.
        argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    else:
        raise JudgeCommandError(f"judges.{name}.cuda_graphs must be true or false, got {cuda_graphs!r}")

    extension = judge.get("context_extension")
    if extension is not None:
        try:
            override = CONTEXT_EXTENSIONS[extension]
        except KeyError:
            known = ", ".join(sorted(CONTEXT_EXTENSIONS))
            raise JudgeCommandError(
                f"judges.{name}.context_extension {extension!r} is unknown (known: {known})"
            ) from None
        argv += ["--json-model-override-args", json.dumps(_plain(override), sort_keys=True)]

    return JudgeCommand(argv=tuple(argv), env=MappingProxyType(dict(JUDGE_ENV)))


def reference_command(
    name: str,
    judge: Mapping[str, Any],
    *,
    host: str,
    port_file: str,
    faults: Sequence[str] = (),
    python: str | None = None,
) -> JudgeCommand:
    """The project's reference judge server for managed judge ``name`` with ``backend = "reference"``.

    It binds an ephemeral port itself and publishes it atomically in ``port_file`` (no
    pick-then-release race). ``faults`` are ``KIND`` or ``KIND=VALUE`` test hooks
    (see ``agent.judges.reference_server``).
    """
    _check_managed(name, judge, "reference")
    model = _required_str(name, judge, "model")
    argv: list[str] = [
        python or sys.executable,
        "-m",
        "agent.judges.reference_server",
        "--host",
        host,
        "--port",
        "0",
        "--port-file",
        port_file,
        "--model",
        model,
    ]
    if judge.get("max_context_length") is not None:
        argv += ["--context-length", str(_positive_int(name, judge, "max_context_length"))]
    for fault in faults:
        argv += ["--fault", *fault.split("=", 1)]
    return JudgeCommand(argv=tuple(argv), env=MappingProxyType({}))


def judge_command(
    name: str,
    judge: Mapping[str, Any],
    *,
    host: str,
    port: int,
    port_file: str,
    python: str | None = None,
) -> JudgeCommand:
    """Dispatch on ``backend``: SGLang gets ``port``; the reference server reports via ``port_file``."""
    if judge.get("backend", "sglang") == "reference":
        return reference_command(name, judge, host=host, port_file=port_file, python=python)
    return sglang_command(name, judge, host=host, port=port, python=python)


def _plain(value: Any) -> Any:
    """Read-only mappings back to dicts so json can encode them."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value
