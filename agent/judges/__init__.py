"""Judges at run time: the reference judge server, rubric profiles and templates, the judge client
drivers import (answer extraction, reply formats, the grades log and the degraded-judge alarm),
engine health (probes, quarantine, epochs) and pre-training canaries.

Exports resolve lazily so that ``python -m agent.judges.reference_server`` (a stdlib-only
server) does not pay for importing httpx at startup.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BindingCanary": "canary",
    "CanaryReport": "canary",
    "CanarySample": "canary",
    "run_canaries": "canary",
    "ContextOverflow": "client",
    "Grade": "client",
    "GradeItem": "client",
    "InvalidGrade": "client",
    "JudgeClient": "client",
    "JudgeDegraded": "client",
    "JudgeError": "client",
    "JudgeRequestError": "client",
    "JudgeUnavailable": "client",
    "TruncatedGrade": "client",
    "DegradedAlarm": "alarm",
    "GradeLog": "grade_log",
    "GradeRecorder": "recorder",
    "with_diagnostics": "client",
    "Extracted": "extraction",
    "extract_answer": "extraction",
    "ReplyFormat": "replies",
    "ReplyFormatError": "replies",
    "ScoreScale": "replies",
    "parse_reply": "replies",
    "BoundJudge": "bindings",
    "bindings_from_registry": "bindings",
    "clients_from_registry": "bindings",
    "EngineHealthRegistry": "engine_health",
    "EngineState": "engine_health",
    "EngineStatus": "engine_health",
    "PROFILES": "rubrics",
    "Rubric": "rubrics",
    "RubricProfile": "rubrics",
    "get_profile": "rubrics",
    "resolve_rubric": "rubrics",
    "rubric_from_spec": "rubrics",
    "RubricTemplate": "templates",
    "TemplateError": "templates",
    "load_template": "templates",
    "parse_template": "templates",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
