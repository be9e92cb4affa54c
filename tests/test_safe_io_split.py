"""schemas.safe_io.split refuses a path with an empty, '.' or '..' part (it could leave the run
directory or name it twice) and passes every other name as its parts, as before its set test."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import safe_io


def refused_before(relpath: str) -> bool:
    return any(p in ("", ".", "..") for p in relpath.split("/"))


@pytest.mark.parametrize("relpath", ["", "/a", "a/", "a//b", ".", "..", "a/./b", "../a", "a/..", "heartbeats/../x"])
def test_a_path_with_an_empty_or_dot_part_is_refused(relpath: str) -> None:
    with pytest.raises(safe_io.UnsafeEntry) as err:
        safe_io.split(relpath)
    assert err.value.code == "file.bad_name"


@given(st.lists(st.sampled_from(["a", ".", "..", "", "...", ".a", "a.", "x..y"]), min_size=1, max_size=4).map("/".join))
def test_split_refuses_exactly_what_it_refused_before(relpath: str) -> None:
    if refused_before(relpath):
        with pytest.raises(safe_io.UnsafeEntry):
            safe_io.split(relpath)
    else:
        assert safe_io.split(relpath) == relpath.split("/")
