"""What the MILES trainer reads from its environment to find its judges: ``OI_MILES_JUDGE_REGISTRY``.

open-instruct's trainer (``python -m open_instruct.miles train RUN_FILE``) grades a named binding only
through a registry its launcher resolves and hands over in one environment variable, a JSON object::

    {"schema_version": 1,
     "judges":   {NAME: {"mode", "model", "endpoint": "http://HOST:PORT/v1", "max_context_length",
                         "max_concurrent_calls", "timeout", ...}},
     "rubrics":  {NAME: {"profile", "max_response_tokens", "temperature"}},
     "bindings": {VERIFIER: {"judge", "rubric"}}}

with only the judges some binding uses; it refuses any other ``schema_version``. Its launcher sets the
variable for the trainer and in the environment of every node's ``ray start``, so graders in Ray actors
on any node see it. This module builds that object from the resolved spec and the endpoints the agents
hand out (pure: the agent supplies the endpoints once it knows them).

A rubric the trainer cannot grade (this project's own profiles, a template file) keeps its binding: the
trainer then fails on that binding with its own error, which names it, instead of grading it silently
with other words. ``profile`` is the rubric's profile as the spec names it (``open-instruct/...``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from launch.spec.config import RunConfig

__all__ = ["SCHEMA_VERSION", "judge_registry", "judge_registry_json", "openai_base"]

SCHEMA_VERSION = 1  # the only version the trainer accepts
# A judge's keys the trainer reads, as the spec spells them; the second group only for a managed judge.
_JUDGE_KEYS = ("max_context_length", "max_concurrent_calls", "timeout")
_MANAGED_KEYS = ("backend", "revision", "gpus", "tensor_parallel_size", "chat_template")


def openai_base(endpoint: str) -> str:
    """``endpoint`` as an OpenAI base URL ending in ``/v1`` (the trainer appends ``/chat/completions``)."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def judge_registry(config: RunConfig, endpoints: Mapping[str, str]) -> dict[str, Any]:
    """The trainer's registry for ``config``'s bindings; ``endpoints`` maps every bound judge to the URL
    its clients must use. Raises KeyError naming a bound judge without one (an agent bug)."""
    judges: dict[str, Any] = {}
    for j in config.bound_judges:
        if j.name not in endpoints:
            raise KeyError(f"no endpoint for bound judge {j.name!r}")
        entry: dict[str, Any] = {"mode": j.mode, "model": j.model, "endpoint": openai_base(endpoints[j.name])}
        entry.update((k, getattr(j, k)) for k in _JUDGE_KEYS + (_MANAGED_KEYS if j.managed else ()))
        judges[j.name] = {k: v for k, v in entry.items() if v is not None}
    rubrics: dict[str, Any] = {}
    for name in sorted({b.rubric for b in config.bindings}):
        r = config.rubrics[name]
        rubric: dict[str, Any] = {"max_response_tokens": r.max_output_tokens, "temperature": r.temperature}
        if r.profile is not None:
            rubric["profile"] = r.profile
        else:
            rubric["template_file"] = r.template_file
        rubrics[name] = rubric
    bindings = {b.verifier: {"judge": b.judge, "rubric": b.rubric} for b in config.bindings}
    return {"schema_version": SCHEMA_VERSION, "judges": judges, "rubrics": rubrics, "bindings": bindings}


def judge_registry_json(config: RunConfig, endpoints: Mapping[str, str]) -> str:
    """:func:`judge_registry` as the variable's value (compact, keys sorted: one spelling per registry)."""
    return json.dumps(judge_registry(config, endpoints), sort_keys=True, separators=(",", ":"))
