"""Fingerprints of specs that were valid before the resolved model stay what they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.spec.config import RunConfig
from launch.spec.load import load_spec

PINNED = Path(__file__).resolve().parent / "data" / "pinned"

# Computed by the resolver before the typed model replaced it (commit b476ac1).
FINGERPRINTS = {
    "demo.toml": "6c805252e4c455cc38aa7a3fe741a13e0e51f64982bd2808d488f5245e42f427",
    "node.toml": "ec7ee66e335eb6d6d8a6419961fb09368b5b624839be03d46e90d28ce4732a2b",
    "three-node.toml": "744970b7c907ec9feab613ca9e32ea1993daca096fc514636573c0bff0082abd",
}


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_resolution_keeps_pinned_fingerprints(name: str) -> None:
    resolved = load_spec(PINNED / name)
    config = RunConfig.from_spec(resolved)
    assert resolved.fingerprint == FINGERPRINTS[name]
    assert config.fingerprint == FINGERPRINTS[name]


def test_omitted_and_explicit_default_fingerprint_differently() -> None:
    omitted = load_spec(PINNED / "three-node.toml")
    explicit = load_spec(PINNED / "three-node.toml", ["judges.general.timeout=600"])
    assert RunConfig.from_spec(omitted).judges["general"].timeout == 600
    assert RunConfig.from_spec(explicit).judges["general"].timeout == 600
    assert omitted.fingerprint != explicit.fingerprint
