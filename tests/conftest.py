"""Shared fixtures. `judge_server` starts real reference judge servers (see _judge_server.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _judge_server import RunningServer, server_factory


@pytest.fixture
def judge_server(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """A factory for real reference judge servers, each stopped by its PID at teardown."""
    yield from server_factory(tmp_path)
