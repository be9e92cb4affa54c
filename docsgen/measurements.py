"""The measurement pages, from measurements/*.json (written by `make faults` and `make bench`; the
first ones converted once from the README's tables): every table says its date, commit and machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from docsgen.audit_codes import REPO

__all__ = ["MEASUREMENTS", "benchmarks_page", "faults_page", "tests_page"]

MEASUREMENTS = REPO / "measurements"
# The order bench parts are shown in; a part not named here comes after them, by name.
_BENCH_ORDER = ("coordination", "projection", "audit", "judges", "engines", "hang")


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _provenance(doc: dict[str, Any], name: str) -> str:
    seconds = f", {doc['seconds']:g} s" if doc.get("seconds") is not None else ""
    source = f" {doc['source'][0].upper()}{doc['source'][1:]}." if doc.get("source") else ""
    return (
        f"Measured {doc['date']} at commit `{doc['commit']}` on {doc['machine']}: `{doc['command']}`{seconds} "
        f"(`measurements/{name}`).{source}\n\n"
    )


def _table(doc: dict[str, Any]) -> str:
    if "text" in doc:
        return f"```text\n{doc['text'].rstrip()}\n```\n\n"
    lines = ["| " + " | ".join(_cell(c) for c in doc["columns"]) + " |", "|" + " --- |" * len(doc["columns"])]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in doc["rows"]]
    return "\n".join(lines) + "\n\n"


def _generated(title: str, intro: str) -> str:
    return f"# {title}\n\n{intro}\n\n"


def faults_page() -> str:
    doc = _load(MEASUREMENTS / "faults.json")
    intro = (
        "Every fault of the matrix against real agents, from the outside ([what each row injects and "
        "expects](../development/fault-matrix.md)). Seconds: the slowest trial; exit codes, records and "
        "ending: the last trial's."
    )
    return _generated("Fault matrix", intro) + _provenance(doc, "faults.json") + _table(doc)


def _bench_key(path: Path) -> tuple[int, str]:
    part = path.stem.removeprefix("bench-")
    return (_BENCH_ORDER.index(part) if part in _BENCH_ORDER else len(_BENCH_ORDER), part)


def benchmarks_page() -> str:
    out = _generated(
        "Benchmarks",
        "One section per `make bench` part, as it printed its tables. What each part measures, how to "
        "read it and the earlier figures: [Benchmark notes](benchmark-notes.md).",
    )
    for path in sorted(MEASUREMENTS.glob("bench-*.json"), key=_bench_key):
        doc = _load(path)
        part = path.stem.removeprefix("bench-")
        out += f"## {part} {{#{part}}}\n\n" + _provenance(doc, path.name) + _table(doc)
    return out


def tests_page() -> str:
    doc = _load(MEASUREMENTS / "tests.json")
    intro = (
        "How long the suite takes, on the machine the project is developed on. "
        "The notes behind each run: [History](history.md)."
    )
    return _generated("Test-suite times", intro) + _provenance(doc, "tests.json") + _table(doc)
