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
    "BindingCanary": "_canary",
    "CanaryReport": "_canary",
    "CanarySample": "_canary",
    "run_canaries": "_canary",
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
    "DegradedAlarm": "_alarm",
    "GradeLog": "_grade_log",
    "GradeRecorder": "_recorder",
    "with_diagnostics": "client",
    "Extracted": "extraction",
    "extract_answer": "extraction",
    "ReplyFormat": "_replies",
    "ReplyFormatError": "_replies",
    "ScoreScale": "_replies",
    "parse_reply": "_replies",
    "BoundJudge": "_bindings",
    "bindings_from_registry": "_bindings",
    "clients_from_registry": "_bindings",
    "EngineHealthRegistry": "_engine_health",
    "EngineState": "_engine_health",
    "EngineStatus": "_engine_health",
    "PROFILES": "rubrics",
    "Rubric": "rubrics",
    "RubricProfile": "rubrics",
    "get_profile": "rubrics",
    "resolve_rubric": "rubrics",
    "rubric_from_spec": "rubrics",
    "RubricTemplate": "_templates",
    "TemplateError": "_templates",
    "load_template": "_templates",
    "parse_template": "_templates",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
