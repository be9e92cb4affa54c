"""A stand-in for the installed ``open_instruct`` package, written by a test into a folder of its own.

It has open-instruct's layout (the facts agent/judges/_open_instruct.py reads: ``judge_utils.py`` with
the templates as module constants, ``miles/rewards/general_judge.py`` with a ``_PROMPTS`` table of
profile -> (template, sha256)), and template texts of our own: open-instruct's words are never in this
project. The texts have the real templates' structure (sections opened by bracketed heading lines, the
reference after the answer; the verifier's inline "### Label:" sections split by blank runs), so the
reference judge must read that shape to grade them, and ask for open-instruct's reply forms (a JSON
object with REASONING and SCORE; ``Final Decision: Yes|No``).
Put the folder on PYTHONPATH (``env()``) and ``find_spec("open_instruct")`` finds it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

QUALITY = (
    "\nStand-in rubric: grade the assistant's answer.\n\n[Conversation So Far]\n{input}\n\n"
    "[Assistant Answer]\n{output}\n\n[Verdict]\n"
    'Reply in JSON: {{"REASONING": "...", "SCORE": "<an integer from 0 to 10>"}}'
)
QUALITY_REF = (
    "\nStand-in rubric: grade the assistant's answer against the reference.\n\n[Conversation So Far]\n{input}\n\n"
    "[Assistant Answer]\n{output}\n\n[Reference Answer]\n{label}\n\n[Verdict]\n"
    'Reply in JSON: {{"REASONING": "...", "SCORE": "<an integer from 0 to 10>"}}'
)
VERIFIER = (
    "User: ### Question: {input}\n\n\n### Expected Answer: {label}\n\n\n### Submitted Answer: {output}\n\n\n"
    "Stand-in verifier: does the submitted answer match the expected one? "
    "End with Final Decision: Yes or Final Decision: No. Assistant:"
)
TEXTS = {
    "general-quality": ("general_quality_template", QUALITY),
    "general-quality_ref": ("general_quality_ref_template", QUALITY_REF),
    "general-web_instruct_general_verifier": ("web_instruct_general_verifier_template", VERIFIER),
}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write(root: Path, *, pins: dict[str, str] | None = None, layout: str = "rewards") -> Path:
    """The package under ``root`` (created); ``pins`` overrides the table's digests (a drifted
    package); ``layout`` "rewards" (miles/rewards/general_judge.py + judge_utils.py), "inline"
    (miles/general_judge.py with the texts in it) or "utils" (judge_utils.py only). Returns root."""
    pkg = root / "open_instruct"
    (pkg / "miles" / "rewards").mkdir(parents=True, exist_ok=True)
    for init in (pkg, pkg / "miles", pkg / "miles" / "rewards"):
        (init / "__init__.py").write_text("raise ImportError('the stand-in package is read, never imported')\n")
    constants = "".join(f"{var} = {text!r}\n" for var, text in TEXTS.values())
    digests = {key: (pins or {}).get(key, sha256(text)) for key, (_, text) in TEXTS.items()}
    if layout == "inline":
        table = "".join(f"    {key!r}: ({var}, {digests[key]!r}),\n" for key, (var, _) in TEXTS.items())
        (pkg / "miles" / "general_judge.py").write_text(constants + "_PROMPTS = {\n" + table + "}\n")
        return root
    (pkg / "judge_utils.py").write_text(constants)
    if layout == "rewards":
        table = "".join(f"    {key!r}: (judge_utils.{var}, {digests[key]!r}),\n" for key, (var, _) in TEXTS.items())
        source = "from open_instruct import judge_utils\n\n_PROMPTS = {\n" + table + "}\n"
        (pkg / "miles" / "rewards" / "general_judge.py").write_text(source)
    return root


def env(root: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(root)}
