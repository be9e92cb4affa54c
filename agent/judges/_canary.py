"""Canaries: before training, prove every binding's judge can tell a right answer from a wrong one.

For each binding: model discovery (``/v1/models`` must list the judge's model), then a known-good
and a known-bad answer graded through the binding's rubric ``repetitions`` times. The binding
passes only if known-good scores STRICTLY above known-bad on every repetition; one repetition of a
stochastic judge passing proves little, so several are run and every sample is recorded.
A judge error (unavailable, invalid reply, overflow) fails the binding with what was seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.judges.rubrics import Rubric
from schemas import records

if TYPE_CHECKING:
    from agent.judges.client import JudgeClient

__all__ = [
    "BindingCanary",
    "CanaryReport",
    "CanarySample",
    "DEFAULT_REPETITIONS",
    "KNOWN_BAD",
    "KNOWN_GOOD",
    "QUESTION",
    "REFERENCE",
    "run_canaries",
]

# The client (httpx) is imported where a canary talks to a judge: a run without judges writes its
# empty report without loading it.

DEFAULT_REPETITIONS = 3
QUESTION = "What is the capital of France?"
KNOWN_GOOD = "The capital of France is Paris."
KNOWN_BAD = "The capital of France is Saturn, a type of sandwich."
REFERENCE = "Paris."


@dataclass(frozen=True)
class CanarySample:
    repetition: int
    answer: str  # "known-good" | "known-bad"
    score: float | None
    reply_excerpt: str | None
    latency_s: float | None
    retries: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "repetition": self.repetition,
            "answer": self.answer,
            "score": self.score,
            "reply_excerpt": self.reply_excerpt,
            "latency_s": self.latency_s,
            "retries": self.retries,
            "error": self.error,
        }


@dataclass(frozen=True)
class BindingCanary:
    verifier: str
    judge: str
    rubric: str
    model: str
    model_listed: bool
    passed: bool
    reason: str
    samples: tuple[CanarySample, ...] = ()
    listed_models: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return records.canary_binding(
            verifier=self.verifier,
            judge=self.judge,
            rubric=self.rubric,
            model=self.model,
            model_listed=self.model_listed,
            listed_models=self.listed_models,
            passed=self.passed,
            reason=self.reason,
            samples=[s.to_json() for s in self.samples],
        )


@dataclass(frozen=True)
class CanaryReport:
    repetitions: int
    bindings: tuple[BindingCanary, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return all(b.passed for b in self.bindings)

    def failures(self) -> list[BindingCanary]:
        return [b for b in self.bindings if not b.passed]

    def summary(self) -> str:
        """One line per failing binding (or 'all passed'): what a failure record should say."""
        failed = self.failures()
        if not failed:
            return f"judge canaries passed for {len(self.bindings)} binding(s)"
        return "; ".join(f'binding "{b.verifier}" (judge {b.judge}, rubric {b.rubric}): {b.reason}' for b in failed)

    def to_json(self) -> dict[str, Any]:
        """The body of ``judge-canaries.json`` (the caller adds the artifact header)."""
        return records.canaries_fields(
            passed=self.passed, repetitions=self.repetitions, bindings=[b.to_json() for b in self.bindings]
        )


def _excerpt(text: Any) -> str | None:
    from agent.judges.client import REPLY_EXCERPT_CHARS

    return text[:REPLY_EXCERPT_CHARS] if isinstance(text, str) else None


def _grade(client: JudgeClient, rubric: Rubric, repetition: int, label: str, answer: str) -> CanarySample:
    from agent.judges.client import JudgeError

    reference = REFERENCE if rubric.uses_reference else None
    try:
        grade = client.grade(rubric, QUESTION, answer, reference)
    except JudgeError as exc:
        diagnostics = exc.diagnostics
        return CanarySample(
            repetition,
            label,
            None,
            _excerpt(diagnostics.get("raw_reply")),
            diagnostics.get("latency_s"),
            diagnostics.get("retries"),
            error=f"{type(exc).__name__}: {exc}",
        )
    diagnostics = grade.verifier_diagnostics
    return CanarySample(
        repetition,
        label,
        grade.score,
        _excerpt(diagnostics.get("raw_reply")),
        diagnostics.get("latency_s"),
        diagnostics.get("retries"),
    )


def _binding_canary(verifier: str, judge: str, rubric: Rubric, client: JudgeClient, repetitions: int) -> BindingCanary:
    def result(listed: tuple[str, ...], passed: bool, reason: str, samples: list[CanarySample]) -> BindingCanary:
        return BindingCanary(
            verifier,
            judge,
            rubric.name,
            client.model,
            client.model in listed,
            passed,
            reason,
            tuple(samples),
            listed,
        )

    from agent.judges.client import JudgeError

    try:
        listed = tuple(client.list_models())
    except JudgeError as exc:
        return result((), False, f"model discovery failed: {type(exc).__name__}: {exc}", [])
    if client.model not in listed:
        return result(listed, False, f"/v1/models does not list {client.model!r} (it lists {list(listed)})", [])

    samples: list[CanarySample] = []
    for repetition in range(1, repetitions + 1):
        good = _grade(client, rubric, repetition, "known-good", KNOWN_GOOD)
        bad = _grade(client, rubric, repetition, "known-bad", KNOWN_BAD)
        samples += [good, bad]
        for sample in (good, bad):
            if sample.error is not None:
                answered = f"; the judge answered {sample.reply_excerpt!r}" if sample.reply_excerpt else ""
                return result(
                    listed,
                    False,
                    f"repetition {repetition}, {sample.answer}: {sample.error}{answered}",
                    samples,
                )
        assert good.score is not None and bad.score is not None
        if not good.score > bad.score:
            return result(
                listed,
                False,
                f"repetition {repetition}: known-good scored {good.score:g}, "
                f"not above known-bad {bad.score:g}; "
                f"the judge answered known-good {good.reply_excerpt!r} and known-bad {bad.reply_excerpt!r}",
                samples,
            )
    return result(listed, True, f"known-good above known-bad in {repetitions}/{repetitions} repetitions", samples)


def run_canaries(
    bindings: Mapping[str, Mapping[str, Any]],
    clients: Mapping[str, JudgeClient],
    rubrics: Mapping[str, Rubric],
    repetitions: int = DEFAULT_REPETITIONS,
) -> CanaryReport:
    """``bindings``: verifier -> {"judge": NAME, "rubric": NAME}; ``clients`` by judge name;
    ``rubrics`` by rubric name. Bindings are checked in verifier order; all are checked even after
    a failure, so the report names every broken binding at once."""
    if repetitions < 1:
        raise ValueError("repetitions must be >= 1")
    results: list[BindingCanary] = []
    for verifier in sorted(bindings):
        binding = bindings[verifier]
        judge, rubric_name = str(binding["judge"]), str(binding["rubric"])
        client, rubric = clients.get(judge), rubrics.get(rubric_name)
        if client is None or rubric is None:
            missing = f"judge {judge!r}" if client is None else f"rubric {rubric_name!r}"
            results.append(BindingCanary(verifier, judge, rubric_name, "", False, False, f"no {missing} is configured"))
            continue
        results.append(_binding_canary(verifier, judge, rubric, client, repetitions))
    return CanaryReport(repetitions, tuple(results))
