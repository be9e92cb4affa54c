"""The audit's finding codes, read from its source: every string literal of audit/ shaped like a
code (``area.what``), and the codes of the run directory's refusals (schemas/safe_io.py) that the
audit reports as findings. The audit declares its codes where it raises them, so a new
``Finding("warning", "data.skipped", ...)`` is found here without a list to keep in step."""

from __future__ import annotations

import ast
import re
from pathlib import Path

__all__ = ["REPO", "audit_codes"]

REPO = Path(__file__).resolve().parent.parent
_CODE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
# Literals of that shape that name files, not findings (a log's extension, a secret's file).
_NOT_CODES = frozenset({"json", "jsonl", "log", "toml", "sbatch", "html", "py", "txt", "out", "err", "yaml", "md"})
_SOURCES = ("audit", "schemas/safe_io.py")


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def audit_codes(repo: Path = REPO) -> list[str]:
    """Every finding code, sorted."""
    found: set[str] = set()
    for source in _SOURCES:
        path = repo / source
        for py in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            found |= {s for s in _literals(py) if _CODE.match(s) and s.rsplit(".", 1)[1] not in _NOT_CODES}
    return sorted(found)
