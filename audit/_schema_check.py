"""Every parsed artifact against its JSON Schema, plus the header facts a schema cannot know
(the run's fingerprint, and that the rank in the header is the rank in the file name)."""

from __future__ import annotations

from audit._load import LoadedRun
from audit._model import Finding
from schemas import violations
from schemas.lenient import as_int, as_str

__all__ = ["MAX_VIOLATIONS_PER_FILE", "check_schemas"]

MAX_VIOLATIONS_PER_FILE = 20  # a wholly wrong file would otherwise bury every other finding


def check_schemas(run: LoadedRun, fingerprint: str | None) -> list[Finding]:
    out: list[Finding] = []
    for relpath in sorted(run.artifacts):
        art = run.artifacts[relpath]
        if art.doc is None:
            continue
        try:
            found = violations(art.schema, art.doc)
        except RecursionError:
            out.append(Finding("error", "schema.violation", "nested too deeply to validate", relpath, art.file_rank))
            continue
        for v in found[:MAX_VIOLATIONS_PER_FILE]:
            out.append(Finding("error", "schema.violation", v.reason, relpath, art.file_rank, v.path))
        if len(found) > MAX_VIOLATIONS_PER_FILE:
            out.append(
                Finding(
                    "error",
                    "schema.violation",
                    f"{len(found) - MAX_VIOLATIONS_PER_FILE} more violations not shown",
                    relpath,
                    art.file_rank,
                )
            )
        header_rank = art.doc.get("rank")
        if art.file_rank is not None and "rank" in art.doc and as_int(header_rank) != art.file_rank:
            out.append(
                Finding(
                    "error",
                    "header.rank",
                    f"header rank {header_rank!r} differs from the rank {art.file_rank} in the file name",
                    relpath,
                    art.file_rank,
                    "$.rank",
                )
            )
        fp = as_str(art.doc.get("fingerprint"))
        if fingerprint and fp is not None and fp != fingerprint and art.schema != "spec":
            out.append(
                Finding(
                    "error",
                    "header.fingerprint",
                    f"written for spec {fp[:12]}…, not this run's {fingerprint[:12]}… (stale or foreign file)",
                    relpath,
                    art.file_rank,
                    "$.fingerprint",
                )
            )
    out.extend(_check_jsonl_headers(run, fingerprint))
    return out


def _check_jsonl_headers(run: LoadedRun, fingerprint: str | None) -> list[Finding]:
    """The header facts of JSON Lines artifacts (their lines were validated on load): one finding
    per file, counting the lines of another rank or another spec."""
    out: list[Finding] = []
    for relpath in sorted(run.jsonl):
        art = run.jsonl[relpath]
        other_rank = [x for x in art.lines if art.file_rank is not None and x.get("rank") != art.file_rank]
        if other_rank:
            out.append(
                Finding(
                    "error",
                    "header.rank",
                    f"{len(other_rank)} line(s) name another rank than the {art.file_rank} in the file name "
                    f"(first: {other_rank[0].get('rank')!r}, seq {other_rank[0].get('seq')!r})",
                    relpath,
                    art.file_rank,
                    "$.rank",
                )
            )
        stragglers = [x for x in art.lines if x.get("attempt") not in (None, run.attempt)]
        if stragglers:
            # A driver of an earlier attempt still grading after its files were archived.
            out.append(
                Finding(
                    "warning",
                    "record.other_attempt",
                    f"{len(stragglers)} line(s) stamped attempt {stragglers[0].get('attempt')!r}, "
                    f"but this is attempt {run.attempt}",
                    relpath,
                    art.file_rank,
                    "$.attempt",
                )
            )
        foreign = [x for x in art.lines if fingerprint and x.get("fingerprint") not in (None, fingerprint)]
        if foreign:
            out.append(
                Finding(
                    "error",
                    "header.fingerprint",
                    f"{len(foreign)} line(s) written for another spec than this run's {(fingerprint or '')[:12]}…",
                    relpath,
                    art.file_rank,
                    "$.fingerprint",
                )
            )
    return out
