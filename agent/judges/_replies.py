"""Reading a grade out of a judge's reply: the reply formats and score scales a rubric may declare.

Three formats:
- ``score_line``: a ``SCORE: N`` line; the LAST one wins (earlier ones may be quoted material),
  and the text before it is the reasoning;
- ``json``: a JSON object with a ``SCORE`` (and usually a ``REASONING``) key, as open-instruct's
  general-quality judges are asked to reply. The object may sit in a Markdown code fence or after
  other text; the last object that has a ``SCORE`` key wins. Keys match case-insensitively. As
  open-instruct's own parser reads it when there is no such object: a ``"SCORE": N`` inside prose
  (the first), else exactly one ``SCORE: N`` line (``**SCORE**:`` too); two such lines are ambiguous;
- ``decision``: open-instruct's web-instruct verifier: ``Final Decision: yes`` or ``no``
  (any case), exactly one distinct decision in the reply: 1.0 or 0.0, whatever the scale says.

``<think>...</think>`` blocks of a reasoning judge and ``<answer>`` tags are removed first. A score
must be a finite number inside the rubric's declared scale ``[MIN, MAX]`` (a JSON boolean is no
number); anything else — no score, out of scale, not a number — raises :class:`ReplyFormatError`.
There is no zero fallback: the caller retries (``invalid_reply_attempts``), then fails the run.

The reward is ``score / MAX``: a scale of ``[0, 10]`` gives rewards in [0, 1] and ``[1, 10]`` gives
[0.1, 1], as open-instruct's quality judges divide their 1–10 scores by 10. The raw score and the
scale are kept beside it in the grade's diagnostics.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["DEFAULT_SCALE", "ParsedReply", "ReplyFormat", "ReplyFormatError", "ScoreScale", "parse_reply"]


class ReplyFormat(StrEnum):
    SCORE_LINE = "score_line"
    JSON = "json"
    DECISION = "decision"


class ReplyFormatError(ValueError):
    """The judge's reply holds no valid score in the rubric's format and scale."""


@dataclass(frozen=True)
class ScoreScale:
    """The scale a rubric asks the judge to score on, both ends included."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or not 0 <= self.low < self.high:
            raise ValueError(f"score scale must be [MIN, MAX] with 0 <= MIN < MAX, got [{self.low}, {self.high}]")

    def reward(self, raw: float) -> float:
        return raw / self.high

    def __str__(self) -> str:
        return f"{_number(self.low)}..{_number(self.high)}"


DEFAULT_SCALE = ScoreScale(0, 10)


@dataclass(frozen=True)
class ParsedReply:
    raw_score: float  # on the rubric's scale
    score: float  # the reward: raw_score / scale.high
    reasoning: str


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_ANSWER_TAG = re.compile(r"</?answer>")
_SCORE_LINE = re.compile(r"^[ \t*]*SCORE[ \t*]*:[ \t*]*(-?\d+(?:\.\d+)?)[ \t*.]*$", re.MULTILINE | re.IGNORECASE)
_SCORE_IN_PROSE = re.compile(r'"SCORE"\s*:\s*"?(-?\d+(?:\.\d+)?)"?', re.IGNORECASE)
_DECISION = re.compile(r"final decision\s*:\s*\**\s*(yes|no)\b", re.IGNORECASE)
_REASONING_PREFIX = re.compile(r"^\s*reasoning\s*:\s*", re.IGNORECASE)
_NUMBER = re.compile(r"\s*-?\d+(?:\.\d+)?\s*")


def parse_reply(
    reply: str, fmt: ReplyFormat = ReplyFormat.SCORE_LINE, scale: ScoreScale = DEFAULT_SCALE
) -> ParsedReply:
    """The grade in ``reply``; raises ReplyFormatError saying what is wrong."""
    visible = _ANSWER_TAG.sub("", _THINK.sub("", reply))
    if fmt is ReplyFormat.DECISION:
        return _from_decision(visible)
    if fmt is ReplyFormat.JSON:
        raw, reasoning = _from_json_lenient(visible)
    else:
        raw, reasoning = _from_score_line(visible)
    if not math.isfinite(raw) or not scale.low <= raw <= scale.high:
        raise ReplyFormatError(f"score {_number(raw)} outside {scale}")
    return ParsedReply(raw_score=raw, score=scale.reward(raw), reasoning=reasoning)


def _from_score_line(text: str) -> tuple[float, str]:
    matches = list(_SCORE_LINE.finditer(text))
    if not matches:
        raise ReplyFormatError("no 'SCORE: N' line in the reply")
    last = matches[-1]
    return float(last.group(1)), _REASONING_PREFIX.sub("", text[: last.start()]).strip()


def _from_decision(text: str) -> ParsedReply:
    decisions = {m.lower() for m in _DECISION.findall(text)}
    if len(decisions) != 1:
        found = "no" if not decisions else "both a yes and a no"
        raise ReplyFormatError(f"{found} 'Final Decision: yes|no' in the reply; exactly one decision is needed")
    yes = decisions == {"yes"}
    return ParsedReply(raw_score=float(yes), score=float(yes), reasoning=text.strip())


def _from_json_lenient(text: str) -> tuple[float, str]:
    """A JSON object with SCORE; else, as open-instruct reads a reply, a "SCORE": N inside prose; else
    exactly one SCORE: N line. The first form's error is the one reported when all fail."""
    try:
        return _from_json(text)
    except ReplyFormatError as exc:
        if "is not a number" in str(exc):
            raise  # an object with a SCORE that is no number: not a reply to read some other way
        first = exc
    m = _SCORE_IN_PROSE.search(text)
    if m is not None:
        return float(m.group(1)), text.strip()
    lines = _SCORE_LINE.findall(text)
    if len(lines) == 1:
        return float(lines[0]), text.strip()
    if len(lines) > 1:
        raise ReplyFormatError(f"{len(lines)} 'SCORE: N' lines and no JSON object: the score is ambiguous")
    raise first


def _from_json(text: str) -> tuple[float, str]:
    found: dict[str, Any] | None = None
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict) and _key(value, "score") is not None:
            found = value
        start = text.find("{", end)
    if found is None:
        raise ReplyFormatError("no JSON object with a 'SCORE' key in the reply")
    score = found[_key(found, "score") or ""]
    if isinstance(score, bool) or not isinstance(score, int | float | str):
        raise ReplyFormatError(f"'SCORE' is not a number: {score!r}")
    if isinstance(score, str):
        if not _NUMBER.fullmatch(score):
            raise ReplyFormatError(f"'SCORE' is not a number: {score!r}")
        score = float(score)
    reasoning_key = _key(found, "reasoning")
    reasoning = found[reasoning_key] if reasoning_key is not None else ""
    return float(score), reasoning if isinstance(reasoning, str) else json.dumps(reasoning)


def _key(obj: dict[str, Any], name: str) -> str | None:
    return next((k for k in obj if isinstance(k, str) and k.strip().lower() == name), None)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)
