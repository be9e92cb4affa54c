"""The chat framing of a grading request, shared by the judge client (which builds it) and the
reference server (which reads it back). Keeping both directions in one module keeps them in
step: a change to the tags changes both.

A built-in profile: the system message is the rubric text; the user message carries tagged
sections in a fixed order: question, optional reference answer, candidate answer (last, so that
whatever the policy wrote cannot hide a later section).

A template rubric (agent/judges/_templates.py): ONE user message, the filled template, as
open-instruct sends its judge templates; the user's text decides the framing. The reference server
reads a template request back when the template uses the same tagged sections (after any preamble).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.judges._templates import RubricTemplate

__all__ = [
    "CLOSING_INSTRUCTION",
    "GradingPrompt",
    "build_messages",
    "build_template_messages",
    "instructions_text",
    "message_text",
    "parse_messages",
]

CLOSING_INSTRUCTION = "Grade the candidate answer now."


@dataclass(frozen=True)
class GradingPrompt:
    question: str
    candidate: str
    reference: str | None = None


def _section(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def build_messages(rubric_text: str, prompt: GradingPrompt) -> list[dict[str, str]]:
    sections = [_section("question", prompt.question)]
    if prompt.reference is not None:
        sections.append(_section("reference_answer", prompt.reference))
    sections.append(_section("candidate_answer", prompt.candidate))
    sections.append(CLOSING_INSTRUCTION)
    return [
        {"role": "system", "content": rubric_text},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def build_template_messages(template: RubricTemplate, prompt: GradingPrompt) -> list[dict[str, str]]:
    """The filled template as the one user message (no system message, nothing appended)."""
    filled = template.fill(input=prompt.question, output=prompt.candidate, label=prompt.reference)
    return [{"role": "user", "content": filled}]


def _between(text: str, tag: str, start: int, *, last_close: bool = False) -> tuple[str, int] | None:
    """Body of section ``tag`` that opens at ``start`` (after blank space), and where it ends.

    The section must open right there, not anywhere later, so a tag quoted inside an earlier
    section's body is never mistaken for the next section.
    """
    opening, closing = f"<{tag}>\n", f"\n</{tag}>"
    begin = len(text) - len(text[start:].lstrip())
    if not text.startswith(opening, begin):
        return None
    body_start = begin + len(opening)
    end = text.rfind(closing) if last_close else text.find(closing, body_start)
    if end < body_start:
        return None
    return text[body_start:end], end + len(closing)


def message_text(message: Mapping[str, Any]) -> str:
    """A chat message's text, whether content is a string or a list of typed parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def parse_messages(messages: Sequence[Mapping[str, Any]]) -> GradingPrompt | None:
    """Read a grading prompt back from chat messages; None when the sections are not there."""
    user = "\n".join(message_text(m) for m in messages if m.get("role") == "user")
    # A template may put its own words before the sections; the first <question> opens them.
    opening = user.find("<question>\n")
    question = _between(user, "question", opening) if opening != -1 else None
    if question is None:
        return _parse_headed(user)
    reference = _between(user, "reference_answer", question[1])
    after = reference[1] if reference is not None else question[1]
    candidate = _between(user, "candidate_answer", after, last_close=True)
    if candidate is None:
        return None
    return GradingPrompt(
        question=question[0],
        candidate=candidate[0],
        reference=reference[0] if reference is not None else None,
    )


def instructions_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The rubric's own words in a request: the system message, else (a template) the user text
    outside the tagged sections, where a template says how to reply."""
    system = [message_text(m) for m in messages if m.get("role") == "system"]
    if system:
        return "\n".join(system)
    user = "\n".join(message_text(m) for m in messages if m.get("role") == "user")
    start, closing = user.find("<question>\n"), "\n</candidate_answer>"
    end = user.rfind(closing)
    if start == -1 or end < start:
        return user
    return user[:start] + user[end + len(closing) :]


# open-instruct's templates label their sections with headings instead of tags: a line of its own in
# square brackets, or a markdown "### Label:" (after a speaker prefix too) with the text after the
# colon. Which section a heading opens is read from its words; a heading of none of the three (the
# reply instructions) ends one.
_HEADING = re.compile(r"^\[([^\]\n]+)\][ \t]*\n|(?:^|(?<=[ \t]))#{2,4}[ \t]*([^:\n]+):[ \t]*", re.MULTILINE)
_SECTION_WORDS = (
    ("reference", ("reference", "ground truth", "gold", "expected")),
    ("question", ("question", "conversation", "history", "query", "prompt")),
    ("candidate", ("answer", "response")),
)
_TAIL_BREAK = "\n\n\n"  # the headed verifier form ends its last section with a blank run, then prose


def _section_kind(label: str) -> str | None:
    low = label.lower()
    return next((kind for kind, words in _SECTION_WORDS if any(w in low for w in words)), None)


def _parse_headed(user: str) -> GradingPrompt | None:
    """Question, candidate and (if present) reference from a heading-labelled prompt; None without
    both a question and a candidate section."""
    headings = list(_HEADING.finditer(user))
    found: dict[str, str] = {}
    for index, heading in enumerate(headings):
        kind = _section_kind(heading.group(1) or heading.group(2))
        if kind is None or kind in found:
            continue
        end = headings[index + 1].start() if index + 1 < len(headings) else None
        body = user[heading.end() : end]
        if end is None and _TAIL_BREAK in body:
            body = body[: body.rindex(_TAIL_BREAK)]
        found[kind] = body.strip("\n").strip()
    if "question" not in found or "candidate" not in found:
        return None
    return GradingPrompt(question=found["question"], candidate=found["candidate"], reference=found.get("reference"))
