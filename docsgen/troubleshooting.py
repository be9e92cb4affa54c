"""Troubleshooting and the failure-kind concept page, from the vocabularies (schemas.vocab.FailureKind,
the audit's finding codes) and the hand-written entries (entries_kinds.toml, entries_codes.toml)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from audit._first_cause import KIND_PRIORITY
from docsgen.audit_codes import audit_codes
from schemas.vocab import FailureKind

__all__ = ["Entry", "code_entries", "failure_kinds_concept", "findings_page", "kind_entries", "kinds_page"]

HERE = Path(__file__).resolve().parent
KINDS_FILE = HERE / "entries_kinds.toml"
CODES_FILE = HERE / "entries_codes.toml"


@dataclass(frozen=True)
class Entry:
    meaning: str
    evidence: str
    action: str


def _load(path: Path) -> dict[str, Entry]:
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    return {name: Entry(v["meaning"], v["evidence"], v["action"]) for name, v in data.items()}


def kind_entries() -> dict[str, Entry]:
    return _load(KINDS_FILE)


def code_entries() -> dict[str, Entry]:
    return _load(CODES_FILE)


def _entry_text(name: str, entry: Entry | None) -> str:
    if entry is None:  # the coverage test fails first; the page says so rather than hiding the name
        return f"## `{name}` {{#{name}}}\n\nNo entry yet.\n\n"
    return (
        f"## `{name}` {{#{name}}}\n\n"
        f"**What it means.** {entry.meaning}\n\n"
        f"**What the audit shows.** {entry.evidence}\n\n"
        f"**What to do.** {entry.action}\n\n"
    )


def kinds_page() -> str:
    entries = kind_entries()
    head = (
        "# Troubleshooting: failure kinds\n\n"
        "One entry per failure kind (`failure-RANK.json`'s `kind`, the kind `gym-audit` names in its "
        "first cause). The list is `schemas.vocab.FailureKind`; the text is "
        "`docsgen/entries_kinds.toml`.\n\n"
    )
    return head + "".join(_entry_text(k.value, entries.get(k.value)) for k in FailureKind)


def findings_page() -> str:
    entries = code_entries()
    codes = audit_codes()
    head = (
        "# Troubleshooting: audit findings\n\n"
        "One entry per finding code `gym-audit` reports (text, `--json`'s `findings[].code`, the HTML "
        "report). The codes are read from the audit's source (`docsgen/audit_codes.py`); the text is "
        "`docsgen/entries_codes.toml`.\n\n"
    )
    index = ", ".join(f"[`{c}`](#{c})" for c in codes)
    return head + index + "\n\n" + "".join(_entry_text(c, entries.get(c)) for c in codes)


def failure_kinds_concept() -> str:
    entries = kind_entries()
    rows = [
        "| kind | what it means | first-cause rank |",
        "| --- | --- | --- |",
    ]
    for k in FailureKind:
        entry = entries.get(k.value)
        meaning = entry.meaning if entry else ""
        prio = KIND_PRIORITY.get(k, "")
        rows.append(f"| [`{k.value}`](../troubleshooting/failure-kinds.md#{k.value}) | {meaning} | {prio} |")
    return (
        "# Failure kinds\n\n"
        "A replica that fails writes `failures/failure-RANK.json` with one of these kinds; a replica "
        "that stops because of another's record writes `peer_failure` with `reacting_to`, and "
        "`gym-audit` follows those reactions to the first cause. Where several records are roots, the "
        "audit prefers the kind with the lower first-cause rank (`audit/_first_cause.py`). Each kind's "
        "evidence and what to do: [Troubleshooting: failure kinds](../troubleshooting/failure-kinds.md).\n\n"
        + "\n".join(rows)
        + "\n"
    )
