"""An artifact's document as an agent writes it (the header every record carries, then its fields),
checked against its schema: for tests that produce a record's fields without a run directory."""

from __future__ import annotations

from typing import Any

from schemas import violations


def checked(schema: str, fields: dict[str, Any], rank: int = 0) -> dict[str, Any]:
    doc = {
        "schema": schema,
        "schema_version": 1,
        "fingerprint": "f" * 64,
        "rank": rank,
        "incarnation": "me",
        "writer": "agent",
        "written_at": 1.0,
        "attempt": 1,
        **fields,
    }
    assert not violations(schema, doc), violations(schema, doc)
    return doc
