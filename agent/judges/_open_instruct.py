"""open-instruct's own judge templates, read from the installed ``open_instruct`` package at run time.

A rubric naming an open-instruct profile (``open-instruct/general-quality``, ``..._ref``,
``...general-web_instruct_general_verifier``) grades with exactly the words the MILES trainer's
judge client sends: its template, filled as open-instruct fills it, as the one user message. This
project never carries those words: they are read from the package the trainer's image installs, and
the text's sha256 must equal the pin the package itself checks (its "prompt drift" guard), else this
project's record of it (below). Without the package the rubric cannot be built, and the message says
to install it or to give the text as ``template_file``.

Reading never imports ``open_instruct`` (its import pulls in the trainer): the package is located
with ``importlib.util.find_spec`` and its source files are parsed with ``ast`` for string constants.
Where the text lives moved between releases; both layouts are read:

- ``open_instruct/miles/general_judge.py`` or ``open_instruct/miles/rewards/general_judge.py``: a
  ``_PROMPTS`` table of profile -> (template, sha256), the template a module constant or an
  attribute of ``open_instruct.judge_utils``;
- ``open_instruct/judge_utils.py``: the templates as module constants (pinned by this project then).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["PACKAGE", "PROFILES", "OpenInstructError", "OpenInstructProfile", "OpenInstructTemplate", "read_template"]

PACKAGE = "open_instruct"
INSTALL_HINT = "pip install open-instruct (the package the MILES trainer's image has)"
MAX_SOURCE_BYTES = 4 << 20


class OpenInstructError(ValueError):
    """The profile's template cannot be read, or is not the pinned text."""


@dataclass(frozen=True)
class OpenInstructProfile:
    """One built-in profile of open-instruct's MILES judges."""

    name: str  # as a run spec names it: open-instruct/KEY
    key: str  # the name in open-instruct's own table
    variable: str  # the module constant of open_instruct/judge_utils.py holding its text
    reply_format: str  # how its replies are read (agent/judges/_replies.py)
    uses_reference: bool
    sha256: str  # the digest open-instruct pins for its text (a fact, recorded here)


PROFILES = MappingProxyType(
    {
        p.name: p
        for p in (
            OpenInstructProfile(
                "open-instruct/general-quality",
                "general-quality",
                "general_quality_template",
                "json",
                False,
                "dc5690758431cfeb5d5eb308540eddb728a581ef2c341a73ca12fb4beaa6e6b1",
            ),
            OpenInstructProfile(
                "open-instruct/general-quality_ref",
                "general-quality_ref",
                "general_quality_ref_template",
                "json",
                True,
                "33907cb811254249db7fd78683ebb7c2cc194c9e04dc78472dde0663b0762d4e",
            ),
            OpenInstructProfile(
                "open-instruct/general-web_instruct_general_verifier",
                "general-web_instruct_general_verifier",
                "web_instruct_general_verifier_template",
                "decision",
                True,
                "6d14cbfb0909d57f3f607d3dc92f9f35ee98219434f62b3ab7346c95dc29b098",
            ),
        )
    }
)
_JUDGE_MODULES = ("miles/rewards/general_judge.py", "miles/general_judge.py")
_TEXT_MODULE = "judge_utils.py"


@dataclass(frozen=True)
class OpenInstructTemplate:
    profile: OpenInstructProfile
    text: str
    source: str  # file (and constant) the text was read from
    pinned: str  # the digest it was checked against
    pinned_by: str  # where that pin comes from: the package's file, or this project

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def package_dir() -> Path | None:
    """The installed package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _module(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value of the last module-level ``name = ...``."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            found = node.value
    return found


def _string(value: ast.expr | None) -> str | None:
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


def _from_judge_table(root: Path, profile: OpenInstructProfile) -> tuple[str, str, str, str] | None:
    """(text, source, pin, pinned_by) from the package's ``_PROMPTS`` table, if it has one for the profile."""
    for rel in _JUDGE_MODULES:
        path = root / rel
        tree = _module(path) if path.is_file() else None
        table = _assigned(tree, "_PROMPTS") if tree is not None else None
        if not isinstance(table, ast.Dict):
            continue
        for key, value in zip(table.keys, table.values, strict=True):
            if _string(key) != profile.key or not isinstance(value, ast.Tuple) or len(value.elts) != 2:
                continue
            ref, pin = value.elts
            pinned = _string(pin)
            if pinned is None:
                continue
            where = f"{PACKAGE}/{rel}"
            if isinstance(ref, ast.Name) and tree is not None:
                text = _string(_assigned(tree, ref.id))
                source = f"{where}:{ref.id}"
            elif isinstance(ref, ast.Attribute) and isinstance(ref.value, ast.Name):
                utils = _module(root / f"{ref.value.id}.py")
                text = _string(_assigned(utils, ref.attr)) if utils is not None else None
                source = f"{PACKAGE}/{ref.value.id}.py:{ref.attr}"
            else:
                continue
            if text is not None:
                return text, source, pinned, where
    return None


def read_template(name: str) -> OpenInstructTemplate:
    """The template of open-instruct profile ``name`` from the installed package, checked against
    its pin. Raises OpenInstructError saying what to do."""
    profile = PROFILES.get(name)
    if profile is None:
        raise OpenInstructError(f"unknown open-instruct profile {name!r} (known: {', '.join(sorted(PROFILES))})")
    root = package_dir()
    if root is None:
        raise OpenInstructError(
            f"profile {name!r} grades with open-instruct's own template, read from the installed {PACKAGE} "
            f"package, which is not installed here: {INSTALL_HINT}, or give the text as template_file "
            "with its template_sha256"
        )
    found = _from_judge_table(root, profile)
    if found is None:
        utils = _module(root / _TEXT_MODULE)
        text = _string(_assigned(utils, profile.variable)) if utils is not None else None
        if text is None:
            raise OpenInstructError(
                f"profile {name!r}: the installed {PACKAGE} ({root}) has no template for {profile.key!r} "
                f"(looked in {', '.join(_JUDGE_MODULES)} and {_TEXT_MODULE}); install the release the trainer "
                "uses, or give the text as template_file"
            )
        found = (text, f"{PACKAGE}/{_TEXT_MODULE}:{profile.variable}", profile.sha256, "gym-agent")
    text, source, pinned, pinned_by = found
    template = OpenInstructTemplate(profile, text, source, pinned, pinned_by)
    if template.digest != pinned:
        raise OpenInstructError(
            f"profile {name!r}: prompt drift: {source} has sha256 {template.digest}, but {pinned_by} pins "
            f"{pinned}; the trainer would refuse to grade with it too. Install the open-instruct release the "
            "trainer uses"
        )
    return template


def describe(template: OpenInstructTemplate) -> dict[str, Any]:
    """What registry.json records of where the text came from."""
    return {"source": template.source, "pinned_by": template.pinned_by}
