"""Asking a scheduler's client a question, bounded in time and never raising.

The clients (beaker-py, SkyPilot's Python API) may block on their network, so every question runs in
a daemon thread given up after ``ASK_TIMEOUT_S``; an answer is the client's own objects, or why
there are none. `gym-audit` (why a job ended) and `gym-launch status` (what it is doing) ask alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["ASK_TIMEOUT_S", "Asked", "bounded", "then"]

ASK_TIMEOUT_S = 10.0

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Asked(Generic[T]):
    """What asking gave: the scheduler's own objects, or why there are none."""

    value: T | None
    why_not: str | None = None


def bounded(question: Callable[[], T], who: str, timeout: float = ASK_TIMEOUT_S) -> Asked[T]:
    """``question()`` in a daemon thread, given up after ``timeout`` seconds."""
    out: list[T] = []
    errors: list[str] = []

    def run() -> None:
        try:
            out.append(question())
        except Exception as exc:  # noqa: BLE001 - clients raise their own, gRPC's, requests' and pydantic's errors
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    worker = threading.Thread(target=run, daemon=True, name=f"ask-{who}")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return Asked(None, f"{who} did not answer within {timeout:g} s")
    if errors:
        return Asked(None, f"{who} answered with an error: {errors[0]}")
    return Asked(out[0])


def then(first: Asked[T], question: Callable[[T], Asked[U]]) -> Asked[U]:
    """``question`` of what ``first`` gave (a client), or why it was not asked."""
    if first.value is None:
        return Asked(None, f"not asked: {first.why_not}")
    return question(first.value)
