"""audit._load fills each loaded Artifact at once, not through its frozen __init__: the record must
be the one the constructor makes, field for field and in order, and stay frozen."""

from __future__ import annotations

import dataclasses

import pytest

from audit import _load
from schemas import names


@pytest.mark.parametrize(
    ("relpath", "doc"),
    [
        (names.heartbeat(7), {"rank": 7}),
        (names.judge_endpoint("general", 3), {}),
        (names.gateway_record("general"), None),
        (names.REGISTRY, {"nodes": []}),
    ],
)
def test_a_loaded_artifact_is_the_constructors(relpath: str, doc: dict[str, object] | None) -> None:
    parsed = names.parse(relpath)
    assert parsed is not None
    got = _load._artifact(relpath, parsed, doc)
    want = _load.Artifact(relpath, parsed.schema, parsed.rank, parsed.judge, doc)
    assert got == want and repr(got) == repr(want)
    assert list(vars(got).items()) == list(vars(want).items())
    assert got.doc is doc
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.schema = "x"  # type: ignore[misc]
