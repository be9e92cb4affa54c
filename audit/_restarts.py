"""Attempts: how each was entered (attempts/N/claim.json), and those the restart caps refused
(attempts/N/refused.json, agent/coord/attempts/_decide.py)."""

from __future__ import annotations

from pathlib import Path

import orjson

from audit._model import Finding
from audit.safedir import SafeDir, UnsafeFile
from schemas import names

__all__ = ["REFUSED", "attempt_numbers", "how_entered", "refused_findings"]

REFUSED = "attempt.refused"  # the finding's code


def attempt_numbers(path: Path) -> list[int]:
    """The numbered directories under attempts/ (archives, claims, refusals), ascending."""
    root = path / names.ATTEMPTS_DIR
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if names.ATTEMPT_RE.match(p.name))


def refused_findings(safe: SafeDir, path: Path) -> list[Finding]:
    root = path / names.ATTEMPTS_DIR
    if root.is_symlink():
        return []  # a planted link is not followed for a refusal's words
    out = []
    for n in attempt_numbers(path):
        rel = names.attempt_refused(n)
        if (root / str(n) / names.CLAIM_LEAF).exists():
            continue  # refused once, started later (the caps were raised): it ran
        try:
            doc = orjson.loads(safe.read_capped(rel))
        except (UnsafeFile, OSError, orjson.JSONDecodeError):
            continue
        from schemas.records import AttemptRecord  # a run with attempts only (issue 51 item 9)

        rec = AttemptRecord.from_json(doc)
        reason = rec.reason if rec is not None else None
        out.append(Finding("error", REFUSED, f"attempt {n} was refused: {reason or '(no reason)'}", rel))
    return out


def how_entered(safe: SafeDir, n: int) -> tuple[str | None, str | None]:
    """Attempt n's claim: its mode (resume, restart) and launch token; (None, None) without one
    (a run started without --resume or a restart mode claims nothing)."""
    try:  # read_capped follows no link: a planted one reads as no claim
        doc = orjson.loads(safe.read_capped(names.attempt_claim(n)))
    except (UnsafeFile, OSError, orjson.JSONDecodeError):
        return None, None
    from schemas.records import AttemptRecord  # a claimed attempt only (issue 51 item 9)

    rec = AttemptRecord.from_json(doc)
    return (rec.mode, rec.token) if rec is not None else (None, None)
