"""Turn a ``registry.json`` body into ready-to-use graders, one per verifier (for drivers).

Rubric digests in the registry are checked against this package's text, so a driver built from
a different revision of the project cannot grade with different words than the launcher
recorded.

Inside a run (the driver's environment names its run directory and rank) the clients share one
recorder (agent/judges/_recorder.py): every grade goes to grades-RANK.jsonl and the degraded-judge
alarm watches every binding. Outside a run nothing is recorded unless ``recorder`` is given.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.judges._recorder import GradeRecorder
from agent.judges.rubrics import Rubric, resolve_rubric

__all__ = ["FROM_ENV", "BoundJudge", "bindings_from_registry", "clients_from_registry", "rubrics_from_registry"]

if TYPE_CHECKING:
    from agent.judges.client import Grade, GradeItem, JudgeClient, JudgeError

    GradeItemLike = GradeItem | tuple[str, str] | tuple[str, str, str | None]


class _FromEnv(enum.Enum):
    FROM_ENV = "from the driver's environment"


FROM_ENV = _FromEnv.FROM_ENV  # the default recorder: the run's, when the environment names one
Recorder = GradeRecorder | None | _FromEnv


@dataclass(frozen=True)
class BoundJudge:
    """One ``[judging.bindings."VERIFIER"]`` entry: the judge client and the rubric it grades with."""

    verifier: str
    judge: str
    client: JudgeClient
    rubric: Rubric

    def grade(self, question: str, answer: str, reference: str | None = None) -> Grade:
        return self.client.grade(self.rubric, question, answer, reference, binding=self.verifier)

    def grade_sample(self, sample: Mapping[str, Any], answer: str, *, reference: str | None = None) -> Grade:
        return self.client.grade_sample(self.rubric, sample, answer, reference=reference, binding=self.verifier)

    def graded_sample(
        self, sample: Mapping[str, Any], answer: str, *, reference: str | None = None
    ) -> tuple[Grade, dict[str, Any]]:
        return self.client.graded_sample(self.rubric, sample, answer, reference=reference, binding=self.verifier)

    def grade_many(
        self, items: Iterable[GradeItemLike], *, return_exceptions: bool = False
    ) -> list[Grade | JudgeError]:
        """Every item (question, answer[, reference]) through this binding, up to the judge's
        max_concurrent_calls at once; results in order (JudgeClient.grade_many)."""
        return self.client.grade_many(self.rubric, items, binding=self.verifier, return_exceptions=return_exceptions)

    async def agrade_many(
        self, items: Iterable[GradeItemLike], *, return_exceptions: bool = False
    ) -> list[Grade | JudgeError]:
        return await self.client.agrade_many(
            self.rubric, items, binding=self.verifier, return_exceptions=return_exceptions
        )

    def graded_samples(
        self, samples: Sequence[Mapping[str, Any]], answers: Sequence[str]
    ) -> list[tuple[Grade, dict[str, Any]]]:
        """Each prepared sample graded with its answer, at the judge's throughput, in order: the grade and
        a copy of the sample with ``metadata.verifier_diagnostics``."""
        return self.client.graded_samples(self.rubric, samples, answers, binding=self.verifier)

    async def agraded_samples(
        self, samples: Sequence[Mapping[str, Any]], answers: Sequence[str]
    ) -> list[tuple[Grade, dict[str, Any]]]:
        return await self.client.agraded_samples(self.rubric, samples, answers, binding=self.verifier)


def clients_from_registry(
    registry: Mapping[str, Any], *, recorder: Recorder = FROM_ENV, **client_options: Any
) -> dict[str, JudgeClient]:
    """One client (one connection pool) per judge service, shared by every binding that uses it.
    ``recorder``: by default the run's (from the driver's environment; none outside a run); None
    records nothing (the agent's canaries)."""
    if isinstance(recorder, _FromEnv):
        recorder = GradeRecorder.from_env(registry)
    clients: dict[str, JudgeClient] = {}
    for name, judge in registry.get("judges", {}).items():
        from agent.judges.client import JudgeClient  # httpx: only where there is a judge to talk to

        # The registry is written from the resolved spec: every value is there, defaults applied.
        clients[name] = JudgeClient(
            str(judge["endpoint"]),
            str(judge["model"]),
            timeout=float(judge["timeout"]),
            # Counted by the judge's /tokenize only where the registry says so (an older one: always).
            max_context_length=(
                judge.get("max_context_length") if judge.get("context_check", "tokenize") == "tokenize" else None
            ),
            max_connections=int(judge["max_concurrent_calls"]),
            name=name,
            recorder=recorder,
            **client_options,
        )
    return clients


def rubrics_from_registry(registry: Mapping[str, Any]) -> dict[str, Rubric]:
    return {name: resolve_rubric(name, table) for name, table in registry.get("rubrics", {}).items()}


def bindings_from_registry(
    registry: Mapping[str, Any], *, recorder: Recorder = FROM_ENV, **client_options: Any
) -> dict[str, BoundJudge]:
    """verifier -> BoundJudge. Raises KeyError naming a binding whose judge or rubric is missing.
    ``recorder`` as for :func:`clients_from_registry`."""
    clients = clients_from_registry(registry, recorder=recorder, **client_options)
    rubrics = rubrics_from_registry(registry)
    bound: dict[str, BoundJudge] = {}
    for verifier, binding in registry.get("bindings", {}).items():
        judge, rubric = binding["judge"], binding["rubric"]
        if judge not in clients:
            raise KeyError(f'binding "{verifier}" names judge {judge!r}, which the registry does not list')
        if rubric not in rubrics:
            raise KeyError(f'binding "{verifier}" names rubric {rubric!r}, which the registry does not list')
        bound[verifier] = BoundJudge(verifier, judge, clients[judge], rubrics[rubric])
    return bound
