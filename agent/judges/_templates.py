"""Rubric templates: grading text the user owns, filled per sample (``[rubrics.NAME] template_file``).

A template is written as open-instruct's judge templates are (a Python format string): ``{input}``
is replaced by the question, ``{output}`` by the extracted answer and ``{label}`` by the reference
answer; ``{{`` and ``}}`` are literal braces. Any other field (``{answer}``, ``{}``, ``{0}``), a
conversion or format spec (``{input!r}``, ``{output:>20}``) or a lone brace is refused with the
file, the line and the field, before anything is graded. A template must contain ``{output}``:
one without it would grade nothing (open-instruct's factuality template, whose doubled braces
leave every field unfilled, is the case this catches). A template with ``{label}`` uses a
reference answer; one without it does not.

The fill is this module's own: values are inserted as they are, never read as format strings,
so a question or an answer with braces in it reaches the judge unchanged.

The digest is the sha256 of the file's bytes. The template is pinned: the spec's
``template_sha256`` must equal it, checked when the spec is validated, again when the agent
writes ``registry.json`` and again by every driver that reads the registry.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

__all__ = [
    "FIELDS",
    "MAX_TEMPLATE_BYTES",
    "RubricTemplate",
    "TemplateError",
    "TemplateProblem",
    "digest_of",
    "load_template",
    "parse_template",
]

INPUT, OUTPUT, LABEL = "input", "output", "label"
FIELDS = (INPUT, OUTPUT, LABEL)
# registry.json (with every bound template's text, JSON-escaped) reaches the driver in one
# environment variable, which Linux caps at 128 KiB; a real rubric is a few KiB. The cap holds for
# one file and for the bound templates together (launch/_rubric_files.py).
MAX_TEMPLATE_BYTES = 32 * 1024

TEMPLATE_FILE = "template_file"
TEMPLATE_SHA256 = "template_sha256"


@dataclass(frozen=True)
class TemplateProblem:
    key: str  # the rubric key to change: template_file or template_sha256
    message: str


class TemplateError(ValueError):
    """A template file that cannot be used: unreadable, not pinned to its digest, or malformed."""

    def __init__(self, problems: list[TemplateProblem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Literal:
    text: str


@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class RubricTemplate:
    """A parsed template: its text as written, where it came from, and its pieces in order."""

    text: str
    source: str  # the file, for messages and registry.json
    parts: tuple[Literal | Field, ...]

    @property
    def digest(self) -> str:
        return digest_of(self.text.encode("utf-8"))

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(p.name for p in self.parts if isinstance(p, Field))

    @property
    def uses_reference(self) -> bool:
        return LABEL in self.fields

    def fill(self, *, input: str, output: str, label: str | None = None) -> str:  # noqa: A002 - the field's name
        if self.uses_reference and label is None:
            raise ValueError(f"template {self.source} has {{label}} and needs a reference answer")
        values = {INPUT: input, OUTPUT: output, LABEL: label or ""}
        return "".join(p.text if isinstance(p, Literal) else values[p.name] for p in self.parts)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _field_problem(content: str) -> str:
    if content == "" or content.isdigit():
        return f"positional field {{{content}}} is not filled (fields: {_known()}; write {{{{ and }}}} for braces)"
    base = content.split("!", 1)[0].split(":", 1)[0]
    if base in FIELDS:
        return f"field {{{content}}}: conversions and format specs are not supported; write {{{base}}}"
    return f"unknown field {{{content}}} (fields: {_known()}; write {{{{ and }}}} for literal braces)"


def _known() -> str:
    return ", ".join(f"{{{f}}}" for f in FIELDS)


def parse_template(text: str, source: str) -> RubricTemplate:
    """The template of ``text``; raises TemplateError naming ``source``, the line and the field of
    every problem at once."""
    parts: list[Literal | Field] = []
    problems: list[str] = []
    literal: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch not in "{}":
            literal.append(ch)
            i += 1
            continue
        line = text.count("\n", 0, i) + 1
        if text.startswith(ch * 2, i):  # {{ or }}: a literal brace
            literal.append(ch)
            i += 2
            continue
        if ch == "}":
            problems.append(f"line {line}: a single '}}' (write '}}}}' for a literal brace)")
            i += 1
            continue
        close = text.find("}", i + 1)
        reopen = text.find("{", i + 1)
        if close == -1 or (reopen != -1 and reopen < close):
            problems.append(f"line {line}: a '{{' that opens no field (write '{{{{' for a literal brace)")
            i += 1
            continue
        content = text[i + 1 : close]
        if content in FIELDS:
            if literal:
                parts.append(Literal("".join(literal)))
                literal = []
            parts.append(Field(content))
        else:
            problems.append(f"line {line}: {_field_problem(content)}")
        i = close + 1
    if literal:
        parts.append(Literal("".join(literal)))
    template = RubricTemplate(text, source, tuple(parts))
    if not problems and OUTPUT not in template.fields:
        problems.append("has no {output} field: the judge would never see the answer it grades")
    if problems:
        raise TemplateError([TemplateProblem(TEMPLATE_FILE, f"template {source}: {p}") for p in problems])
    return template


def mismatch(source: str, pinned: str, actual: str) -> str:
    """The message of a digest mismatch: both digests and the file, and what to do."""
    return (
        f"template {source} has sha256 {actual}, but template_sha256 pins {pinned}: the file changed since it "
        "was pinned; check the text, then set template_sha256 to the new digest"
    )


def load_template(path: str, pinned: str) -> RubricTemplate:
    """Read the template at ``path``, check it against its pinned sha256 and parse it. Raises
    TemplateError with every problem (unreadable, too large, not UTF-8, digest, fields)."""
    try:
        size = os.path.getsize(path)
        if size > MAX_TEMPLATE_BYTES:
            raise TemplateError(
                [TemplateProblem(TEMPLATE_FILE, f"template {path} has {size} bytes; at most {MAX_TEMPLATE_BYTES}")]
            )
        with open(path, "rb") as fh:
            data = fh.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        raise TemplateError(
            [TemplateProblem(TEMPLATE_FILE, f"template {path} cannot be read: {exc.strerror or exc}")]
        ) from None
    problems: list[TemplateProblem] = []
    actual = digest_of(data)
    if actual != pinned:
        problems.append(TemplateProblem(TEMPLATE_SHA256, mismatch(path, pinned, actual)))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        problems.append(TemplateProblem(TEMPLATE_FILE, f"template {path}: line {line}: not UTF-8 text"))
        raise TemplateError(problems) from None
    try:
        template = parse_template(text, path)
    except TemplateError as exc:
        problems.extend(exc.problems)
    if problems:
        raise TemplateError(problems)
    return template
