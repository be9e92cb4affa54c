"""The run directory contract: file names, JSON Schemas, vocabularies, atomic writes, safe reads.

Agent and audit both import this package; nothing else knows a run-directory file name
(tests/test_contract.py enforces it).

Exports resolve lazily, so a stdlib-only process (the reference judge server writes its port
file through `schemas.safe_io`) does not import jsonschema or orjson.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # static tools see the eager imports; at run time they resolve on first use
    from schemas import lenient, names, order, records, safe_io, store, validation, vocab
    from schemas.safe_io import RunDirError, UnsafeEntry
    from schemas.store import RunDir, Writer, new_incarnation
    from schemas.validation import SCHEMA_VERSION, Violation, check, schema_names, violations
    from schemas.vocab import AgentState, DriverEnv, FailureKind, JobEnv, Phase, PhaseOutcome, RunOutcome, WriterKind

_EXPORTS = {
    "RunDirError": "safe_io",
    "UnsafeEntry": "safe_io",
    "RunDir": "store",
    "Writer": "store",
    "new_incarnation": "store",
    "SCHEMA_VERSION": "validation",
    "Violation": "validation",
    "check": "validation",
    "schema_names": "validation",
    "violations": "validation",
    "AgentState": "vocab",
    "DriverEnv": "vocab",
    "FailureKind": "vocab",
    "JobEnv": "vocab",
    "Phase": "vocab",
    "PhaseOutcome": "vocab",
    "RunOutcome": "vocab",
    "WriterKind": "vocab",
}
_SUBMODULES = ("lenient", "names", "order", "records", "safe_io", "store", "validation", "vocab")

__all__ = [  # a literal, so linters see what the lazy exports are
    "SCHEMA_VERSION",
    "AgentState",
    "DriverEnv",
    "FailureKind",
    "JobEnv",
    "Phase",
    "PhaseOutcome",
    "RunDir",
    "RunDirError",
    "RunOutcome",
    "UnsafeEntry",
    "Violation",
    "Writer",
    "WriterKind",
    "check",
    "lenient",
    "names",
    "new_incarnation",
    "order",
    "records",
    "safe_io",
    "schema_names",
    "store",
    "validation",
    "violations",
    "vocab",
]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
