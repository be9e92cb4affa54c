"""What every managed engine's command shares (launch/spec/sglang_argv.py, launch/spec/vllm_argv.py):
the command the agent executes, its error, and the chat templates and context extensions shipped
with the project. Pure: no I/O but locating a template file in this package."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from launch.spec.errors import GymError

__all__ = [
    "CHAT_TEMPLATES",
    "CONTEXT_EXTENSIONS",
    "JudgeCommand",
    "JudgeCommandError",
    "Weighted",
    "chat_template_path",
    "context_override",
    "loaded_weights",
]

_DATA_DIR = Path(__file__).resolve().parent / "data"

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


class JudgeCommandError(GymError, ValueError):
    """The judge table cannot be turned into a command; the message names the key."""


class Weighted(Protocol):
    """A managed engine's weights keys ([policy], [judges.NAME])."""

    @property
    def prepared_dir(self) -> str | None: ...
    @property
    def weights(self) -> str | None: ...
    @property
    def revision(self) -> str | None: ...


def loaded_weights(svc: Weighted, where: str) -> tuple[str, str | None]:
    """What an engine loads and the revision it is told: the staged directory (which is its revision;
    the agent proves it), else a NeMo Gym config's model as given, with ``--revision`` only when set."""
    if svc.prepared_dir is not None:
        return svc.prepared_dir, None
    if svc.weights is not None:
        return svc.weights, svc.revision
    raise JudgeCommandError(f"{where}.prepared_dir is required to launch it")


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


def context_override(judge: str, extension: str | None) -> Mapping[str, Any] | None:
    """The config override a context extension serves (None without one); the error names the key."""
    if extension is None:
        return None
    try:
        return CONTEXT_EXTENSIONS[extension]
    except KeyError:
        known = ", ".join(sorted(CONTEXT_EXTENSIONS))
        raise JudgeCommandError(f"judges.{judge}.context_extension {extension!r} is unknown (known: {known})") from None
