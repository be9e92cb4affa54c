"""The run directory contract: file names, JSON Schemas, vocabularies, atomic writes, safe reads.

Agent and audit both import this package; nothing else knows a run-directory file name
(tests/test_contract.py enforces it).
"""

from . import names, order, records, safe_io, vocab
from .safe_io import RunDirError, UnsafeEntry
from .store import RunDir, Writer, new_incarnation
from .validation import SCHEMA_VERSION, Violation, check, schema_names, violations
from .vocab import AgentState, DriverEnv, FailureKind, Phase, PhaseOutcome, RunOutcome, WriterKind

__all__ = [
    "SCHEMA_VERSION",
    "AgentState",
    "DriverEnv",
    "FailureKind",
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
    "names",
    "new_incarnation",
    "order",
    "records",
    "safe_io",
    "schema_names",
    "violations",
    "vocab",
]
