"""Concept pages made from the code: the run directory (schemas.names' tables and each artifact's
JSON Schema title) and the lifecycle (the step table `gym-agent --steps` prints)."""

from __future__ import annotations

import json
import re

from agent.lifecycle import steps
from docsgen.audit_codes import REPO
from schemas import names

__all__ = ["lifecycle_page", "readable", "run_directory_page"]

# Regex pieces of schemas.names' patterns, spelled as a user reads a name.
_READABLE = (
    (r"(?:-[0-9a-f]{8,32})?", "[-REQUEST]"),
    (r"(?:\.([1-9][0-9]{0,3}))?", "[.N]"),
    (r"([a-z][a-z0-9_-]*?)", "NAME"),
    (r"([a-z][a-z0-9_-]*)", "NAME"),
    (r"[1-9][0-9]*", "N"),
    (r"(?:claim|ready|refused)", "{claim,ready,refused}"),
    (r"[0-9a-f]{8,32}", "ID"),
    (r"(?P<job>\d+)", "JOBID"),
    (r"(\d+)", "RANK"),
    (r"\d+", "JOBID"),
    (r"(toml|json)", "{toml,json}"),
    (r"[a-z.]+", "SUFFIX"),
    (r"[A-Za-z0-9][A-Za-z0-9_.-]*", "FILE"),
)


def readable(pattern: re.Pattern[str]) -> str:
    """`^placement-(\\d+)\\.json$` -> `placement-RANK.json`."""
    text = pattern.pattern.removeprefix("^").removesuffix("$")
    for piece, word in _READABLE:
        text = text.replace(piece, word)
    return text.replace("\\.", ".")


def _title(schema: str) -> str:
    doc = json.loads((REPO / "schemas" / f"{schema}.schema.json").read_text())
    return str(doc.get("title", "")).replace("|", "\\|")


def run_directory_page() -> str:
    out = [
        "# The run directory",
        "",
        "Every run lives in `OUTPUT/cluster/UUID` on a filesystem every replica sees. Agents coordinate "
        "only through it; `gym-audit` reads nothing else. The tables below are generated from "
        "`schemas/names.py` (the one place that knows these names) and each artifact's JSON Schema in "
        "`schemas/`. RANK is a replica's rank, NAME a judge's name, N an attempt or a log segment.",
        "",
        "Subdirectories written often or listed: " + ", ".join(f"`{d}/`" for d in names.SUBDIRS) + ".",
        "",
        "## JSON artifacts",
        "",
        "| name | schema | what it holds |",
        "| --- | --- | --- |",
    ]
    out += [f"| `{readable(a.pattern)}` | `{a.schema}` | {_title(a.schema)} |" for a in names.ARTIFACTS]
    out += ["", "## JSON Lines artifacts (every line against its schema)", "", "| name | schema | what it holds |"]
    out += ["| --- | --- | --- |"]
    out += [f"| `{readable(a.pattern)}` | `{a.schema}` | {_title(a.schema)} |" for a in names.JSONL_ARTIFACTS]
    out += ["", "## Logs", "", "| name | written by |", "| --- | --- |"]
    out += [f"| `{readable(p)}` | {kind} |" for p, kind in names.LOG_KINDS]
    out += ["", "## Other files the audit knows", ""]
    out += [f"- `{readable(p)}`" for p in names.OTHER_FILES]
    return "\n".join(out) + "\n"


def lifecycle_page() -> str:
    return (
        "# The lifecycle\n\n"
        "Every replica runs these steps in order (each node the ones that apply to it); each prints one "
        "line as it ends and is recorded in `phases-RANK.json`. This table is what `gym-agent --steps` "
        "prints (`agent/lifecycle/steps.py`). What a replica does in each, and why: "
        "[What a replica does](replica.md).\n\n" + steps.markdown()
    )
