"""Does a managed judge's prepared directory hold the revision the spec pins?

A pin that nothing checks means nothing: a judge re-prepared from another commit would grade
with other weights under the same fingerprint. The agent refuses to start an SGLang judge whose
``prepared_dir`` does not prove ``revision`` in one of three ways:

1. a Hugging Face cache snapshot: the directory (or what it links to) is ``.../snapshots/REV``;
2. a Hugging Face local-dir download: ``DIR/.cache/huggingface/download/**/*.metadata`` files,
   whose first line is the commit the file was downloaded at, all name REV;
3. a manifest written when the weights were prepared: ``DIR/gym-prepared.json`` with
   ``{"revision": "REV", ...}``.

Any evidence that names another revision is reported, so the message says what was found.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HF_DOWNLOAD_METADATA", "MANIFEST", "MAX_METADATA_FILES", "RevisionProof", "prove_revision"]

MANIFEST = "gym-prepared.json"
HF_DOWNLOAD_METADATA = Path(".cache") / "huggingface" / "download"
MAX_METADATA_FILES = 10_000  # a model has tens of files; a bound keeps a hostile tree cheap


@dataclass(frozen=True)
class RevisionProof:
    ok: bool
    detail: str


def _snapshot(path: Path) -> str | None:
    """The revision a HF cache snapshot path names (``.../snapshots/REV``), if it is one."""
    for candidate in (path, Path(os.path.realpath(path))):
        if candidate.parent.name == "snapshots":
            return candidate.name
    return None


def _download_metadata(path: Path) -> set[str]:
    root = path / HF_DOWNLOAD_METADATA
    found: set[str] = set()
    if not root.is_dir():
        return found
    for i, meta in enumerate(root.rglob("*.metadata")):
        if i >= MAX_METADATA_FILES:
            break
        try:
            with meta.open(encoding="utf-8", errors="replace") as fh:
                first = fh.readline().strip()
        except OSError:
            continue
        if first:
            found.add(first)
    return found


def _manifest(path: Path) -> str | None:
    try:
        doc = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = doc.get("revision") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def prove_revision(prepared_dir: str, revision: str) -> RevisionProof:
    """Whether ``prepared_dir`` proves ``revision``; ``detail`` says how, or what was found instead."""
    path = Path(prepared_dir)
    if not path.is_dir():
        return RevisionProof(False, f"prepared_dir {prepared_dir} is not a directory on this node")
    seen: list[str] = []
    snap = _snapshot(path)
    if snap == revision:
        return RevisionProof(True, f"a Hugging Face snapshot named by revision {revision}")
    if snap:
        seen.append(f"it is the snapshot of revision {snap}")
    downloads = _download_metadata(path)
    if downloads == {revision}:
        return RevisionProof(True, f"Hugging Face download metadata naming revision {revision}")
    if downloads:
        seen.append(f"its download metadata names {', '.join(sorted(downloads))}")
    manifest = _manifest(path)
    if manifest == revision:
        return RevisionProof(True, f"{MANIFEST} naming revision {revision}")
    if manifest:
        seen.append(f"its {MANIFEST} names {manifest}")
    found = "; ".join(seen) if seen else "it holds no revision evidence"
    return RevisionProof(
        False,
        f"prepared_dir {prepared_dir} does not prove the pinned revision {revision} ({found}); prepare the "
        f"weights at that revision: a Hugging Face snapshot directory .../snapshots/{revision}, a "
        f'local-dir download, or a {MANIFEST} with "revision": "{revision}"',
    )
