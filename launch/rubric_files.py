"""The spec's rubric template files, checked when a spec is validated: each file is read, must
match its ``template_sha256`` and fill only the known fields (agent/judges/templates.py).

This is the launcher's half of the pin; the agent checks the file again when it writes
``registry.json``, and every driver checks the recorded text against the recorded digest. It lives
here, not in ``launch.spec`` (the pure model), because the template rules are the judge library's.
"""

from __future__ import annotations

from agent.judges.rubrics import TemplateError, load_template
from launch.spec.config import RunConfig
from launch.spec.errors import Problem
from launch.spec.keypath import format_key


def template_problems(config: RunConfig) -> list[Problem]:
    """Every problem of every declared rubric's template file (bound or not), keyed by the rubric
    key to change."""
    problems: list[Problem] = []
    for name, rubric in sorted(config.rubrics.items()):
        path = rubric.template_path(config.spec.base_dir)
        if path is None or rubric.template_sha256 is None:
            continue
        try:
            load_template(path, rubric.template_sha256)
        except TemplateError as exc:
            problems += [Problem(format_key(("rubrics", name, p.key)), p.message) for p in exc.problems]
    return problems
