"""The spec's rubric template files, checked when a spec is validated: each file is read, must
match its ``template_sha256`` and fill only the known fields (agent/judges/_templates.py).

This is the launcher's half of the pin; the agent checks the file again when it writes
``registry.json``, and every driver checks the recorded text against the recorded digest. It lives
here, not in ``launch.spec`` (the pure model), because the template rules are the judge library's.
"""

from __future__ import annotations

from agent.judges.rubrics import MAX_TEMPLATE_BYTES, RubricError, TemplateError, load_template, rubric_from_spec
from launch.spec import names
from launch.spec.config import RunConfig
from launch.spec.errors import Problem
from launch.spec.keypath import format_key

__all__ = ["open_instruct_problems", "template_problems"]


def template_problems(config: RunConfig) -> list[Problem]:
    """Every problem of every declared rubric's template file (bound or not), keyed by the rubric
    key to change."""
    problems: list[Problem] = []
    bound = {b.rubric for b in config.bindings}
    sizes: dict[str, int] = {}
    for name, rubric in sorted(config.rubrics.items()):
        path = rubric.template_path(config.spec.base_dir)
        if path is None or rubric.template_sha256 is None:
            continue
        try:
            template = load_template(path, rubric.template_sha256)
        except TemplateError as exc:
            problems += [Problem(format_key(("rubrics", name, p.key)), p.message) for p in exc.problems]
            continue
        if name in bound:
            sizes[name] = len(template.text.encode("utf-8"))
    if sum(sizes.values()) > MAX_TEMPLATE_BYTES:
        # registry.json, with these texts, reaches the driver in one environment variable.
        listing = ", ".join(f"{n} ({b} bytes)" for n, b in sizes.items())
        problems.append(
            Problem(
                "rubrics",
                f"the bound rubrics' template files hold {sum(sizes.values())} bytes together ({listing}); at most "
                f"{MAX_TEMPLATE_BYTES}: registry.json carries them to the driver in one environment variable",
            )
        )
    return problems


def open_instruct_problems(config: RunConfig) -> list[Problem]:
    """Every bound rubric naming an open-instruct profile whose template cannot be read from the
    installed open_instruct package here (missing, or not its pinned text): install the package or
    give the text as template_file (agent/judges/_open_instruct.py)."""
    problems: list[Problem] = []
    bound = {b.rubric for b in config.bindings}
    for name, rubric in sorted(config.rubrics.items()):
        if name not in bound or rubric.profile not in names.OPEN_INSTRUCT_PROFILES:
            continue
        try:
            rubric_from_spec(name, rubric.table(config.spec.base_dir))
        except RubricError as exc:
            problems.append(Problem(format_key(("rubrics", name, "profile")), str(exc).split(": ", 1)[-1]))
    return problems
