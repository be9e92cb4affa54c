"""A managed judge's prepared directory must prove the revision the spec pins."""

from __future__ import annotations

import json
from pathlib import Path

from agent.judges._prepared import MANIFEST, prove_revision

REV = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def test_hugging_face_snapshot_named_by_the_revision(tmp_path: Path) -> None:
    snap = tmp_path / "models--q" / "snapshots" / REV
    snap.mkdir(parents=True)
    assert prove_revision(str(snap), REV).ok
    proof = prove_revision(str(snap), OTHER)
    assert not proof.ok and REV in proof.detail and OTHER in proof.detail


def test_a_link_to_a_snapshot_proves_it(tmp_path: Path) -> None:
    snap = tmp_path / "models--q" / "snapshots" / REV
    snap.mkdir(parents=True)
    link = tmp_path / "prepared"
    link.symlink_to(snap)
    assert prove_revision(str(link), REV).ok


def test_local_dir_download_metadata(tmp_path: Path) -> None:
    meta = tmp_path / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text(f"{REV}\netag\n1700000000.0\n")
    (meta / "model.safetensors.metadata").write_text(f"{REV}\netag2\n1700000001.0\n")
    assert prove_revision(str(tmp_path), REV).ok
    (meta / "tokenizer.json.metadata").write_text(f"{OTHER}\netag3\n1\n")
    mixed = prove_revision(str(tmp_path), REV)
    assert not mixed.ok and OTHER in mixed.detail  # files from two commits prove neither


def test_manifest(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({"revision": REV, "model": "Qwen/Qwen3-32B"}))
    assert prove_revision(str(tmp_path), REV).ok
    assert "names " + REV in prove_revision(str(tmp_path), OTHER).detail


def test_no_evidence_and_no_directory(tmp_path: Path) -> None:
    bare = prove_revision(str(tmp_path), REV)
    assert not bare.ok and "no revision evidence" in bare.detail and str(tmp_path) in bare.detail
    missing = prove_revision(str(tmp_path / "absent"), REV)
    assert not missing.ok and "not a directory" in missing.detail
