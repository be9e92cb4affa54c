"""Canaries during the run: a judge that drifts fails the run before it trains a policy on noise.

A corrupted judge keeps producing valid-looking grades (NeMo-Gym #2384 calls it "not uncommon"): the
degraded-judge alarm counts only unparseable and cut-off replies. So while the driver runs, the
driver's node grades the known-good and known-bad answers again through every binding of each judge
every ``[judges.NAME] canary_interval`` seconds (0: never), through the judge's gateway and marked as
canaries (the gateway's log says so; they are not training grades). A round in which known-bad
scores at or above known-good, or which gets no valid grade, fails the run as ``judge_degraded``,
naming the binding, both scores and the judge's replies. Every round is kept in judge-canaries.json
(``rounds``, the last MAX_ROUNDS).

One thread; it sleeps on an event, so stopping it (the driver ended, or any failure) is immediate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.judges._canary import BindingCanary, run_canaries
from schemas import records
from schemas.timefmt import iso_ms

__all__ = ["MAX_ROUNDS", "CanaryRound", "CanaryWatch", "describe_failure"]

MAX_ROUNDS = 50  # rounds kept in judge-canaries.json (a week of 30-minute rounds would be 336)


@dataclass(frozen=True)
class CanaryRound:
    judge: str
    at: float
    bindings: tuple[BindingCanary, ...]

    @property
    def passed(self) -> bool:
        return all(b.passed for b in self.bindings)

    def to_json(self) -> dict[str, Any]:
        return records.canary_round(
            judge=self.judge, at=iso_ms(self.at), passed=self.passed, bindings=[b.to_json() for b in self.bindings]
        )


class CanaryWatch:
    """Rounds of canaries per judge, each judge on its own interval."""

    def __init__(
        self,
        registry: Mapping[str, Any],
        intervals: Mapping[str, int],
        *,
        repetitions: int,
        on_round: Callable[[CanaryRound], None],
        on_failure: Callable[[CanaryRound], None],
        headers: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from agent.judges._bindings import clients_from_registry, rubrics_from_registry

        self.registry = registry
        self.intervals = {j: float(s) for j, s in intervals.items() if s > 0}
        self.repetitions = repetitions
        self.on_round = on_round
        self.on_failure = on_failure
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._clients = clients_from_registry(registry, recorder=None, headers=dict(headers)) if self.intervals else {}
        self._rubrics = rubrics_from_registry(registry)

    @property
    def active(self) -> bool:
        return bool(self.intervals)

    def start(self) -> None:
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="canary-watch", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for client in self._clients.values():
            client.close()
        self._clients = {}

    def _run(self) -> None:
        due = {judge: self._clock() + interval for judge, interval in self.intervals.items()}
        while not self._stop.is_set():
            judge = min(due, key=lambda j: due[j])
            if self._stop.wait(max(0.0, due[judge] - self._clock())):
                return
            result = self.round(judge)
            due[judge] = self._clock() + self.intervals[judge]
            if result is not None and not result.passed:
                self.on_failure(result)
                return

    def round(self, judge: str) -> CanaryRound | None:
        """One round through every binding of ``judge``; None when stopped first."""
        bindings = {v: b for v, b in self.registry.get("bindings", {}).items() if b.get("judge") == judge}
        at = time.time()
        report = run_canaries(bindings, self._clients, self._rubrics, repetitions=self.repetitions)
        if self._stop.is_set():
            return None  # stopped mid-round (the run is ending): its errors say nothing of the judge
        result = CanaryRound(judge, at, report.bindings)
        self.on_round(result)
        return result


def describe_failure(result: CanaryRound) -> str:
    """The failure's cause: each failing binding, its scores and the judge's replies."""
    parts = []
    for b in result.bindings:
        if b.passed:
            continue
        good = [s.score for s in b.samples if s.answer == "known-good"]
        bad = [s.score for s in b.samples if s.answer == "known-bad"]
        parts.append(
            f"binding {b.verifier!r} (judge {b.judge}, rubric {b.rubric}): known-good scored {good}, known-bad "
            f"{bad}; {b.reason}"
        )
    return f"judge degraded: the canary round of {iso_ms(result.at)} failed: " + "; ".join(parts)
