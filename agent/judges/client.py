"""The judge client drivers import to grade samples through a named judge (docs/runtime-notes.md, "Judges").

Contract:
- the full grading request (rubric, question, optional reference, candidate, chat framing) is
  tokenized by the judge's own ``/tokenize`` endpoint; with the rubric's output reservation it
  must fit ``max_context_length`` or :class:`ContextOverflow` is raised. Nothing is truncated:
  a truncated candidate would be graded on text the policy did not write.
- every HTTP request has the judge's ``timeout`` (per request, not a total budget);
- transport errors and retryable statuses (429 and every 5xx but 501) are retried with exponential
  backoff, then :class:`JudgeUnavailable` is raised (open-instruct's MILES client retries a 500
  too; an overloaded vLLM answers one);
- a grading request carries ``seed`` (open-instruct's default, 1) and the ``/tokenize`` request
  ``add_generation_prompt: true``, as open-instruct's client sends them, so both count and sample
  the same thing;
- an incomplete reply (``finish_reason`` other than ``stop``: :class:`TruncatedGrade`) or one
  without a valid score raises :class:`InvalidGrade`. There is no reward-zero fallback: callers
  fail the run.
- with a recorder (agent/judges/_recorder.py; automatic for a driver the agent started, through
  agent/judges/_bindings.py), every outcome is appended to grades-RANK.jsonl before the grade is
  returned or its exception raised, and counted by the degraded-judge alarm: the call that trips
  it, and every later call through that binding, raises :class:`JudgeDegraded`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from agent.judges._batch import BatchRunner
from agent.judges._framing import GradingPrompt
from agent.judges._replies import ReplyFormatError
from agent.judges.extraction import extract_answer
from agent.judges.rubrics import Rubric
from agent.proc import driver_local
from schemas.vocab import GradeOutcome

if TYPE_CHECKING:
    from agent.judges._alarm import Trip
    from agent.judges._recorder import GradeRecorder

__all__ = [
    "ContextOverflow",
    "Grade",
    "GradeItem",
    "InvalidGrade",
    "JudgeClient",
    "JudgeDegraded",
    "JudgeError",
    "JudgeRequestError",
    "REPLY_EXCERPT_CHARS",
    "JudgeUnavailable",
    "TruncatedGrade",
    "normalize_endpoint",
    "reference_from_sample",
]

DEFAULT_SEED = 1  # open-instruct's judge seed when its trainer gets none
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
GRADING_MARGIN_S = 5.0  # beyond a grade's own deadline: the time to record and raise
INVALID_REPLY_BACKOFF_S = 1.0  # before the 2nd grading request of an invalid reply; doubles after
REPLY_EXCERPT_CHARS = 300


class JudgeError(Exception):
    """Base class: grading through a judge failed. ``diagnostics`` says what was seen; ``outcome``
    is how grades-RANK.jsonl records it."""

    outcome: GradeOutcome | None = None

    def __init__(self, message: str, diagnostics: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.diagnostics: dict[str, Any] = dict(diagnostics or {})


class ContextOverflow(JudgeError):
    """The full request plus the output reservation does not fit the judge's context."""

    outcome = GradeOutcome.OVERFLOW

    def __init__(self, message: str, *, prompt_tokens: int, reserved: int, limit: int) -> None:
        super().__init__(message, {"prompt_tokens": prompt_tokens, "reserved_output_tokens": reserved, "limit": limit})
        self.prompt_tokens = prompt_tokens
        self.reserved = reserved
        self.limit = limit


class JudgeUnavailable(JudgeError):
    """Transport errors or retryable statuses persisted through every retry."""

    outcome = GradeOutcome.UNAVAILABLE


class JudgeRequestError(JudgeError):
    """The judge refused the request (a non-retryable HTTP status)."""

    outcome = GradeOutcome.REFUSED


class InvalidGrade(JudgeError):
    """The judge answered, but not with a complete, valid grade."""

    outcome = GradeOutcome.INVALID


class TruncatedGrade(InvalidGrade):
    """The judge's reply was cut off (``finish_reason`` other than ``stop``): never parsed."""

    outcome = GradeOutcome.TRUNCATED


class JudgeDegraded(JudgeError):
    """Too many of a binding's recent replies were invalid or truncated (agent/judges/_alarm.py):
    the run fails as judge_degraded. Raised by the grade that tripped the alarm and by every later
    grade through that binding (those send nothing). ``diagnostics`` is the alarm: the binding,
    the counts and the last two bad replies."""

    def __init__(self, trip: Trip) -> None:
        super().__init__(trip.message(), trip.to_json())
        self.trip = trip

    def __reduce__(self) -> tuple[type[JudgeDegraded], tuple[Trip]]:
        # Pickled whole (a Ray task that grades raises it to its caller), not by its message.
        return (JudgeDegraded, (self.trip,))


@dataclass(frozen=True)
class GradeItem:
    """One answer to grade in :meth:`JudgeClient.grade_many`: the question, the policy's answer and,
    for rubrics that use one, the reference answer."""

    question: str
    answer: str
    reference: str | None = None

    @classmethod
    def of(cls, item: GradeItem | tuple[str, str] | tuple[str, str, str | None]) -> GradeItem:
        if isinstance(item, GradeItem):
            return item
        if isinstance(item, tuple) and len(item) in (2, 3):
            return cls(*item)
        raise TypeError(f"a grade item is GradeItem(question, answer, reference) or such a tuple, not {item!r}")


@dataclass(frozen=True)
class Grade:
    """A reward (the score over its scale's maximum: agent/judges/_replies.py) and how it was obtained."""

    score: float
    # A plain dict so drivers can store it as-is in metadata.verifier_diagnostics (JSON).
    verifier_diagnostics: dict[str, Any] = field(default_factory=dict)


def normalize_endpoint(endpoint: str) -> str:
    """Base URL without a trailing slash or ``/v1``: both spellings of an OpenAI base are accepted."""
    base = endpoint.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def reference_from_sample(sample: Mapping[str, Any]) -> str | None:
    """The reference label of a prepared sample (``ground_truth``, else ``label``), if any."""
    for key in ("ground_truth", "label"):
        value = sample.get(key)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str) and value.strip():
            return value
    return None


class JudgeClient:
    """Grades answers through one judge service. Thread-safe; owns its connection pool."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        timeout: float,
        max_context_length: int | None = None,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_connections: int = 16,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        name: str | None = None,
        recorder: GradeRecorder | None = None,
        headers: Mapping[str, str] | None = None,
        seed: int = DEFAULT_SEED,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.endpoint = normalize_endpoint(endpoint)
        self.model = model
        self.timeout = float(timeout)
        self.max_context_length = max_context_length
        self.max_retries = max_retries
        self.seed = seed
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self.name = name  # the judge's name in the spec (grades-RANK.jsonl `judge`)
        self.recorder = recorder
        # grade_many: as many grades in flight as the pool has connections (the judge's max_concurrent_calls).
        self.max_in_flight = max_connections
        self._batch = BatchRunner(max_connections, f"grade-{name or 'judge'}")
        # Grading traffic has its own pool, sized to the judge's concurrency; health probes use
        # a different client (engine_health), so a saturated grading pool never starves them.
        self._http = httpx.Client(
            base_url=self.endpoint,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            headers=dict(headers or {}),
        )

    # -- lifecycle --

    def close(self) -> None:
        self._batch.close()
        self._http.close()

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- HTTP with retries --

    def _request(self, method: str, path: str, json_body: Any | None = None) -> tuple[httpx.Response, int]:
        """One logical request; returns the response and how many retries it took."""
        attempt = 0
        while True:
            problem: str
            try:
                response = self._http.request(method, path, json=json_body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response, attempt
                if response.status_code not in RETRYABLE_STATUSES:
                    raise JudgeRequestError(
                        f"{method} {self.endpoint}{path} -> HTTP {response.status_code}: {response.text[:500]}",
                        {"status": response.status_code, "retries": attempt},
                    )
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
            if attempt >= self.max_retries:
                raise JudgeUnavailable(
                    f"{method} {self.endpoint}{path} failed after {attempt + 1} attempt(s): {problem}",
                    {"retries": attempt, "last_error": problem},
                )
            self._sleep(min(self.max_backoff_s, self.backoff_s * (2**attempt)))
            attempt += 1

    @staticmethod
    def _json(response: httpx.Response, what: str, error: type[JudgeError] = InvalidGrade) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise error(f"{what}: response is not JSON: {response.text[:200]!r}") from exc

    # -- API --

    def list_models(self) -> list[str]:
        """Model discovery: the ``id`` of every model ``/v1/models`` lists."""
        response, _ = self._request("GET", "/v1/models")
        data = self._json(response, "/v1/models").get("data")
        if not isinstance(data, list):
            raise JudgeRequestError(f"{self.endpoint}/v1/models has no 'data' list")
        return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]

    def count_tokens(self, messages: list[dict[str, str]]) -> tuple[int, int]:
        """Judge tokens of the chat request as the server will render it; returns (count, retries)."""
        response, retries = self._request(
            "POST", "/tokenize", {"model": self.model, "messages": messages, "add_generation_prompt": True}
        )
        # Not the judge's grade: its tokenizer's answer, so a bad one is a refused request.
        count = self._json(response, "/tokenize", JudgeRequestError).get("count")
        if isinstance(count, bool) or not isinstance(count, int):
            raise JudgeRequestError(f"{self.endpoint}/tokenize returned no integer 'count'")
        return count, retries

    def grade(
        self,
        rubric: Rubric,
        question: str,
        answer: str,
        reference: str | None = None,
        *,
        binding: str | None = None,
    ) -> Grade:
        """Grade ``answer`` to ``question`` with ``rubric``. The reference is sent only to rubrics
        that use one (and is then required). Raises ContextOverflow, JudgeUnavailable,
        JudgeRequestError, InvalidGrade (TruncatedGrade) or JudgeDegraded; never returns a default
        score. ``binding`` names the verifier graded for (grades-RANK.jsonl and the alarm count by
        it; a direct call without one is matched to the registry's binding of this judge and rubric)."""
        if rubric.uses_reference and reference is None:
            raise ValueError(f"rubric {rubric.name!r} ({rubric.source}) needs a reference answer")
        # Under the agent: a hang is not called while this grade may still end by its own deadline.
        board = driver_local.board()
        token = board.grading(time.monotonic() + self.grading_budget())
        try:
            return self._recorded_grade(rubric, question, answer, reference, binding)
        finally:
            board.graded(token)

    def _recorded_grade(
        self, rubric: Rubric, question: str, answer: str, reference: str | None, binding: str | None
    ) -> Grade:
        recorder = self.recorder
        if recorder is None:
            try:
                return self._grade(rubric, question, answer, reference)
            except JudgeError as exc:
                self._named(exc, binding, rubric)
                raise
        binding = recorder.binding_for(binding, self.name, rubric)
        earlier = recorder.tripped(binding, self.name, rubric)
        if earlier is not None:
            raise JudgeDegraded(earlier)
        try:
            grade = self._grade(rubric, question, answer, reference)
        except JudgeError as exc:
            self._named(exc, binding, rubric)
            outcome = exc.outcome or GradeOutcome.REFUSED
            trip = recorder.record(
                binding=binding,
                judge=self.name,
                rubric=rubric,
                outcome=outcome,
                score=None,
                error=f"{type(exc).__name__}: {exc}",
                diagnostics=exc.diagnostics,
            )
            if trip is not None:
                raise JudgeDegraded(trip) from exc
            raise
        recorder.record(
            binding=binding,
            judge=self.name,
            rubric=rubric,
            outcome=GradeOutcome.GRADED,
            score=grade.score,
            error=None,
            diagnostics=grade.verifier_diagnostics,
        )
        return grade

    def grading_budget(self) -> float:
        """The longest one grade can take before it returns or raises: every attempt of the chat
        request (and of the tokenize request before it) at the per-request timeout, the backoffs
        between them, and a margin."""
        backoffs = sum(min(self.max_backoff_s, self.backoff_s * (2**a)) for a in range(self.max_retries))
        one = self.timeout * (self.max_retries + 1) + backoffs
        return float(one * (2 if self.max_context_length is not None else 1) + GRADING_MARGIN_S)

    def _named(self, exc: JudgeError, binding: str | None, rubric: Rubric) -> None:
        """Say which binding (else rubric) and judge the failed grade was for: a driver that lets
        the error end it leaves that line in its log, where the audit's excerpt shows it."""
        where = f"binding {binding!r}" if binding else f"rubric {rubric.name!r}"
        judge = f"judge {self.name}" if self.name else self.endpoint
        exc.args = (f"{where} ({judge}): {exc}", *exc.args[1:])

    def _grade(self, rubric: Rubric, question: str, answer: str, reference: str | None) -> Grade:
        extracted = extract_answer(answer, enabled=rubric.extract_answer)
        prompt = GradingPrompt(
            question=question, candidate=extracted.answer, reference=reference if rubric.uses_reference else None
        )
        messages = rubric.messages(prompt)
        started = time.monotonic()
        # What is known before the judge answers: a failure's diagnostics carry it too (which
        # sample overflowed, which request the judge refused).
        request_facts: dict[str, Any] = {
            "rubric": rubric.identity(),
            "model": {"requested": self.model, "served": None, "endpoint": self.endpoint},
            "max_output_tokens": rubric.max_output_tokens,
            "answer": {"raw": answer, "extracted": extracted.answer, "rule": extracted.rule.value},
            "reference": prompt.reference,
            "request": {"messages": messages},  # exactly what the judge was sent
            "reply_format": rubric.reply_format.value,
            "score_scale": [rubric.score_scale.low, rubric.score_scale.high],
        }
        try:
            prompt_tokens, retries = self._fits_context(rubric, messages)
        except JudgeError as exc:
            _with_facts(exc, request_facts, started)
            raise
        request_facts["prompt_tokens"] = prompt_tokens
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": rubric.max_output_tokens,
            "temperature": rubric.temperature,
            "seed": self.seed,
            "stream": False,
        }
        return self._valid_reply(rubric, body, request_facts, started, retries)

    def _fits_context(self, rubric: Rubric, messages: list[dict[str, str]]) -> tuple[int | None, int]:
        """The prompt's tokens (None: not counted, no context check) and the retries counting took;
        ContextOverflow when the prompt and the output reservation exceed the judge's context. An
        overflow is never retried: the same request cannot fit the next time either."""
        if self.max_context_length is None:
            return None, 0
        prompt_tokens, retries = self.count_tokens(messages)
        needed = prompt_tokens + rubric.max_output_tokens
        if needed > self.max_context_length:
            raise ContextOverflow(
                f"grading request for rubric {rubric.name!r} needs {prompt_tokens} prompt tokens + "
                f"{rubric.max_output_tokens} reserved output tokens = {needed} > max_context_length "
                f"{self.max_context_length}; the request is not truncated",
                prompt_tokens=prompt_tokens,
                reserved=rubric.max_output_tokens,
                limit=self.max_context_length,
            )
        return prompt_tokens, retries

    def _valid_reply(
        self, rubric: Rubric, body: dict[str, Any], request_facts: dict[str, Any], started: float, retries: int
    ) -> Grade:
        """An invalid or cut-off reply is asked again (invalid_reply_attempts, 1 s then 2 s apart, as
        the MILES trainer's client does) before it counts: a sampled judge may answer well next time."""
        failed: list[dict[str, Any]] = []
        for attempt in range(1, rubric.invalid_reply_attempts + 1):
            try:
                grade = self._reply(rubric, body, request_facts, started, retries)
            except InvalidGrade as exc:
                exc.diagnostics["failed_attempts"] = failed + [_failed_attempt(attempt, exc)]
                if attempt == rubric.invalid_reply_attempts:
                    raise
                failed.append(_failed_attempt(attempt, exc))
                retries = int(exc.diagnostics.get("retries") or retries)
                self._sleep(INVALID_REPLY_BACKOFF_S * 2 ** (attempt - 1))
                continue
            grade.verifier_diagnostics["failed_attempts"] = failed
            return grade
        raise AssertionError("unreachable: invalid_reply_attempts >= 1")

    def _reply(
        self, rubric: Rubric, body: dict[str, Any], request_facts: dict[str, Any], started: float, retries: int
    ) -> Grade:
        """One chat completion and its reply read as ``rubric`` says."""
        try:
            response, chat_retries = self._request("POST", "/v1/chat/completions", body)
            retries += chat_retries
            latency = time.monotonic() - started
            payload = self._json(response, "/v1/chat/completions")
        except JudgeError as exc:
            _with_facts(exc, request_facts, started)
            raise
        if not isinstance(payload, dict):
            payload = {}

        diagnostics: dict[str, Any] = {
            **request_facts,
            "model": {"requested": self.model, "served": payload.get("model"), "endpoint": self.endpoint},
            "retries": retries,
            "latency_s": round(latency, 6),
            "usage": payload.get("usage"),
        }
        choices = payload.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        raw = message.get("content") if isinstance(message, dict) else None
        finish = choice.get("finish_reason")
        diagnostics["raw_reply"] = raw
        diagnostics["finish_reason"] = finish
        if not isinstance(raw, str) or not raw.strip():
            raise InvalidGrade("judge reply has no content", diagnostics)
        if finish != "stop":
            raise TruncatedGrade(
                f"incomplete judge reply (finish_reason={finish!r}): {raw[:REPLY_EXCERPT_CHARS]!r}",
                diagnostics,
            )
        try:
            parsed = rubric.parse(raw)
        except ReplyFormatError as exc:
            raise InvalidGrade(f"invalid judge reply ({exc}): {raw[:REPLY_EXCERPT_CHARS]!r}", diagnostics) from exc
        diagnostics["reasoning"] = parsed.reasoning
        diagnostics["raw_score"] = parsed.raw_score
        return Grade(score=parsed.score, verifier_diagnostics=diagnostics)

    def grade_sample(
        self,
        rubric: Rubric,
        sample: Mapping[str, Any],
        answer: str,
        *,
        reference: str | None = None,
        binding: str | None = None,
    ) -> Grade:
        """Grade ``answer`` to a prepared sample: question from ``metadata.judge_query``; the
        reference label from ``reference`` or the sample (see :func:`reference_from_sample`)."""
        metadata = sample.get("metadata")
        question = metadata.get("judge_query") if isinstance(metadata, Mapping) else None
        if not isinstance(question, str) or not question.strip():
            raise ValueError("sample has no metadata.judge_query to grade against")
        if reference is None and rubric.uses_reference:
            reference = reference_from_sample(sample)
        return self.grade(rubric, question, answer, reference, binding=binding)

    # -- many at once (agent/judges/_batch.py) --

    def grade_many(
        self,
        rubric: Rubric,
        items: Iterable[GradeItem | tuple[str, str] | tuple[str, str, str | None]],
        *,
        binding: str | None = None,
        return_exceptions: bool = False,
    ) -> list[Grade | JudgeError]:
        """:meth:`grade` for every item — ``GradeItem(question, answer, reference)`` or a tuple —
        up to the judge's ``max_concurrent_calls`` at once; results in order, each recorded as one
        grade. Raises the first JudgeError (in order) once the grades in flight ended, or with
        ``return_exceptions`` returns it in its place."""
        work = [GradeItem.of(x) for x in items]
        return self._batch.map(
            lambda it: self.grade(rubric, it.question, it.answer, it.reference, binding=binding),
            work,
            errors=JudgeError,
            return_exceptions=return_exceptions,
        )  # type: ignore[return-value]

    async def agrade_many(
        self,
        rubric: Rubric,
        items: Iterable[GradeItem | tuple[str, str] | tuple[str, str, str | None]],
        *,
        binding: str | None = None,
        return_exceptions: bool = False,
    ) -> list[Grade | JudgeError]:
        """:meth:`grade_many` for an async driver: awaited, the event loop runs on."""
        work = [GradeItem.of(x) for x in items]
        return await asyncio.to_thread(
            self.grade_many, rubric, work, binding=binding, return_exceptions=return_exceptions
        )

    def graded_samples(
        self,
        rubric: Rubric,
        samples: Sequence[Mapping[str, Any]],
        answers: Sequence[str],
        *,
        binding: str | None = None,
    ) -> list[tuple[Grade, dict[str, Any]]]:
        """:meth:`graded_sample` for every (sample, answer), up to ``max_concurrent_calls`` at once, in
        order: each grade and a copy of its sample carrying ``metadata.verifier_diagnostics``."""
        if len(samples) != len(answers):
            raise ValueError(f"{len(samples)} samples but {len(answers)} answers")
        return self._batch.map(
            lambda pair: self.graded_sample(rubric, pair[0], pair[1], binding=binding),
            list(zip(samples, answers, strict=True)),
            errors=JudgeError,
        )  # type: ignore[return-value]

    async def agraded_samples(
        self,
        rubric: Rubric,
        samples: Sequence[Mapping[str, Any]],
        answers: Sequence[str],
        *,
        binding: str | None = None,
    ) -> list[tuple[Grade, dict[str, Any]]]:
        """:meth:`graded_samples`, awaited."""
        return await asyncio.to_thread(self.graded_samples, rubric, samples, answers, binding=binding)

    def graded_sample(
        self,
        rubric: Rubric,
        sample: Mapping[str, Any],
        answer: str,
        *,
        reference: str | None = None,
        binding: str | None = None,
    ) -> tuple[Grade, dict[str, Any]]:
        """:meth:`grade_sample`, and a copy of the sample carrying its evidence: ``metadata`` keeps
        ``judge_query`` and gains ``verifier_diagnostics`` (raw reply, reasoning, rubric name and
        digest, model requested and served, endpoint, retries, latency, the raw and extracted
        answer, the reference label used and the exact messages sent)."""
        grade = self.grade_sample(rubric, sample, answer, reference=reference, binding=binding)
        return grade, with_diagnostics(sample, grade)


def _with_facts(exc: JudgeError, request_facts: Mapping[str, Any], started: float) -> None:
    """A failed grade's diagnostics: what was asked, how long it took, then what the failure found."""
    exc.diagnostics = {**request_facts, "latency_s": round(time.monotonic() - started, 6), **exc.diagnostics}


def _failed_attempt(attempt: int, exc: JudgeError) -> dict[str, Any]:
    """One invalid reply that was asked again, as a grade's diagnostics keep it."""
    raw = exc.diagnostics.get("raw_reply")
    return {
        "attempt": attempt,
        "error": f"{type(exc).__name__}: {str(exc)[:REPLY_EXCERPT_CHARS]}",
        "raw_reply": raw[:REPLY_EXCERPT_CHARS] if isinstance(raw, str) else None,
        "finish_reason": exc.diagnostics.get("finish_reason"),
    }


def with_diagnostics(sample: Mapping[str, Any], grade: Grade) -> dict[str, Any]:
    """A copy of ``sample`` whose ``metadata.verifier_diagnostics`` is the grade's (labels kept)."""
    copy = dict(sample)
    metadata = dict(sample.get("metadata") or {})
    metadata["verifier_diagnostics"] = {**grade.verifier_diagnostics, "score": grade.score}
    copy["metadata"] = metadata
    return copy
