"""Answer extraction: the part of a policy's response that a judge grades.

The rules are open-instruct's judge path (its ``extract_final_answer``), so a reward means the same
thing here as in the system our users come from:

1. the response marks its final answer with ``<answer>...</answer>``: the first such block's
   contents, whitespace stripped;
2. else it closes a reasoning block with ``</think>``: everything after the first ``</think>``,
   stripped (the reasoning never reaches the judge);
3. else the chat-template marker ``<|assistant|>`` is removed; the result is stripped when a marker
   was removed, and the response is passed unchanged (not even stripped) when none was.

An unclosed ``<think>`` is not removed (rule 3 applies): a response cut off mid-reasoning is graded
as written, which is what open-instruct does. A rubric may turn extraction off
(``extract_answer = false``): the judge then sees the response verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Extracted", "ExtractionRule", "extract_answer"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK_END = "</think>"
_ASSISTANT_MARKER = "<|assistant|>"


class ExtractionRule(StrEnum):
    """Which rule produced the graded text (kept in the grade's diagnostics)."""

    ANSWER_TAG = "answer_tag"
    AFTER_THINK = "after_think"
    ASSISTANT_MARKER = "assistant_marker"
    UNCHANGED = "unchanged"
    DISABLED = "disabled"


@dataclass(frozen=True)
class Extracted:
    """The text sent to the judge and how it was obtained from the response."""

    answer: str
    rule: ExtractionRule

    @property
    def changed(self) -> bool:
        return self.rule not in (ExtractionRule.UNCHANGED, ExtractionRule.DISABLED)


def extract_answer(response: str, *, enabled: bool = True) -> Extracted:
    """The final answer of ``response`` by the rules in this module's docstring."""
    if not enabled:
        return Extracted(response, ExtractionRule.DISABLED)
    tagged = _ANSWER.search(response)
    if tagged is not None:
        return Extracted(tagged.group(1).strip(), ExtractionRule.ANSWER_TAG)
    _, sep, tail = response.partition(_THINK_END)
    if sep:
        return Extracted(tail.strip(), ExtractionRule.AFTER_THINK)
    if _ASSISTANT_MARKER in response:
        return Extracted(response.replace(_ASSISTANT_MARKER, "").strip(), ExtractionRule.ASSISTANT_MARKER)
    return Extracted(response, ExtractionRule.UNCHANGED)
