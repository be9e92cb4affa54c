"""The run directory contract: file names, JSON Schemas, atomic writes, tolerant reads.

Agent and audit both import this package; nothing else knows a run-directory file name.
"""

from . import names
from .store import RunDir, RunDirError, Writer, new_incarnation
from .validation import SCHEMA_VERSION, Violation, check, schema_names, violations

__all__ = [
    "SCHEMA_VERSION",
    "RunDir",
    "RunDirError",
    "Violation",
    "Writer",
    "check",
    "names",
    "new_incarnation",
    "schema_names",
    "violations",
]
