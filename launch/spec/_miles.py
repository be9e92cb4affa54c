"""The seed's own run files: an open-instruct MILES run file resolves to the same model as this
project's spelling, without edits.

A MILES run file (``schema_version = 1`` or a ``[model]`` table) holds the trainer's sections
next to the launch, placement and judging keys this project owns. ``translate`` maps the owned
keys to this project's spelling (``MAPPING`` below, the only place that knows both spellings),
carries every trainer section to the driver untouched, and rewrites problem key paths back to
the MILES spelling, so a typo is reported where the user wrote it.

The fingerprint stays the one of the file as spelled (with ``--set`` overrides): the trainer's
sections are part of it. The driver, by default the trainer itself
(``python -m open_instruct.miles train RUN_FILE``), is given the original file byte for byte.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launch.spec import names
from launch.spec.errors import Problem
from launch.spec.keypath import format_key
from schemas.credentials import CREDENTIAL_VALUE, argv_credentials

__all__ = [
    "DEFAULT_DRIVER",
    "DEFAULT_EVIDENCE_PRESET",
    "EVIDENCE_SOURCES",
    "EXTENSION_SECTIONS",
    "LAUNCH_EXTENSIONS",
    "MAPPING",
    "MILES_CREDENTIAL_FIX",
    "MIXED_SECTIONS",
    "OWNED_SECTIONS",
    "REFERENCE_TEXT",
    "RUBRIC_PROFILES",
    "TRAINER_SECTIONS",
    "Translation",
    "default_driver",
    "forwarded_overrides",
    "mapping_table",
    "translate",
]

# Sections that belong to the trainer (or the MILES workflow): carried to the driver untouched.
TRAINER_SECTIONS = (
    "model",
    "conversion",
    "compiler_cache",
    "records",
    "selection",
    "evaluation",
    "training",
    "optimizer",
    "async",
    "tracking",
    "runtime",
    "core",
    "miles",
)
# Sections where the trainer's own keys sit beside keys this project owns.
MIXED_SECTIONS = ("trainer", "inference", "output", "data")
# Sections of this project's spelling a MILES file may also carry (our extensions).
EXTENSION_SECTIONS = ("driver", "ray", "pools")
OWNED_SECTIONS = ("launch", "judges", "rubrics", "judging")

# MILES key path -> this project's key path. "*" stands for a judge/rubric name.
MAPPING: Mapping[str, str] = {
    "name": "name",
    "output.root": "output.root",
    "launch.gpus_per_replica": "launch.gpus_per_replica",
    "launch.workspace": "launch.beaker.workspace",
    "launch.budget": "launch.beaker.budget",
    "launch.cluster": "launch.beaker.cluster",
    "launch.priority": "launch.beaker.priority",
    "launch.min_runtime": "launch.beaker.min_runtime",
    "launch.timeout": "launch.beaker.timeout",
    "launch.auto_resume": "launch.beaker.auto_resume",
    "launch.max_retries": "launch.max_retries",
    "launch.shared_memory": "launch.beaker.shared_memory",
    "launch.weka_mounts": "launch.weka_mounts",
    "launch.env": "launch.env",
    "launch.secrets": "launch.secrets",
    "launch.coordination": "launch.coordination",
    "launch.preflight": "launch.preflight",
    "trainer.gpus": "trainer.gpus_per_node",
    "trainer.num_gpus": "trainer.gpus_per_node",
    "trainer.trainer_num_nodes": "trainer.nodes",
    "inference.gpus": "inference.gpus",
    "inference.rollout_tensor_parallel_size": "inference.tensor_parallel_size",
    "inference.placement_mode": "inference.placement_mode",
    "judges.*": "judges.*",
    "rubrics.*.profile": "rubrics.*.profile",
    "rubrics.*.max_response_tokens": "rubrics.*.max_output_tokens",
    "rubrics.*.temperature": "rubrics.*.temperature",
    "judging.bindings": "judging.bindings",
    "data.prompt_data": "data.train",
    "data.eval_prompt_data": "data.eval",
}
# This project's keys a MILES [launch] may carry as well (our extensions, same spelling).
LAUNCH_EXTENSIONS = ("hostnames", "backend", "node_gpus", "beaker", "slurm", "skypilot")

# open-instruct's profiles keep their names: the agent reads their text from the installed package,
# as the trainer grades with it (agent/judges/_open_instruct.py).
RUBRIC_PROFILES = names.OPEN_INSTRUCT_PROFILES
DEFAULT_DRIVER = 'exec python -m open_instruct.miles train "$GYM_RUN_FILE"'
DEFAULT_EVIDENCE_PRESET = "miles"  # [driver.evidence] preset unless the file declares its own evidence
EVIDENCE_SOURCES = ("preset", "metrics", "log_step_pattern")  # keys that declare a source of evidence

REFERENCE_TEXT = """
A MILES run file (the open-instruct trainer's own TOML: `schema_version = 1` or a `[model]` table)
is read as it is: `gym-launch plan` says which format it read. The keys this project owns are
mapped below; the trainer's sections (`[model]`, `[training]`, `[optimizer]`, `[async]`, `[tracking]`,
`[runtime]`, `[core]`, `[miles]`, `[compiler_cache]`, `[evaluation]`, ... and the trainer's own keys
inside `[trainer]`, `[inference]`, `[output]` and `[data]`) are carried to the driver untouched and are
part of the fingerprint. The driver defaults to the trainer itself,
`python -m open_instruct.miles train "$GYM_RUN_FILE"` (the original file, byte for byte; `--set`
overrides of MILES keys are passed on as `--set`). A MILES file may also carry `[driver]`, `[ray]`,
`[pools]` and `[launch] hostnames/backend/node_gpus/beaker/slurm/skypilot` of this project's spelling.
Evidence of training defaults to the trainer's own records (`[driver.evidence] preset = "miles"`:
`training_contract_rank*.jsonl` and `publication.jsonl` in `save_dir`, by default the run directory's
`checkpoints/` = `$GYM_CHECKPOINT_DIR`, where the trainer's save path must point); a `[driver.evidence]`
source of the file (`preset`, `metrics` or `log_step_pattern`) replaces that default (`save_dir` alone
keeps it), and `[driver] trains = false` drops it.
When `[inference] placement_mode` is absent, the MILES rule applies: colocated unless
`[async] fully_async = true`. `[inference] rollout_gpus_per_node`, when given, must equal
`launch.gpus_per_replica`. A typo of an owned key fails with its path and a did-you-mean, even inside
a section the trainer shares; a section nobody knows fails.
"""


@dataclass(frozen=True)
class Translation:
    """A MILES file in this project's spelling, and how to report problems in the user's."""

    data: dict[str, Any]
    problems: tuple[Problem, ...] = ()
    renames: Mapping[str, str] = field(default_factory=dict)  # our key path -> MILES key path
    trainer_sections: tuple[str, ...] = ()
    # What is accepted but worth saying (in the user's spelling): a NeMo Gym service's unpinned weights.
    warnings: tuple[Problem, ...] = ()

    def user_problem(self, p: Problem) -> Problem:
        for ours, theirs in sorted(self.renames.items(), key=lambda kv: -len(kv[0])):
            if p.key == ours or p.key.startswith(ours + "."):
                return Problem(theirs + p.key[len(ours) :], p.message)
        return p


def _split(path: str) -> list[str]:
    return path.split(".")


def _get(data: Mapping[str, Any], path: list[str]) -> Any:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _put(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _close(key: str, known: Sequence[str], cutoff: float = 0.8) -> str | None:
    import difflib  # only for a mistake: the audit imports this module

    match = difflib.get_close_matches(key, list(known), n=1, cutoff=cutoff)
    return match[0] if match else None


@dataclass(frozen=True)
class _Draft:
    """A translation being built: this project's data, the problems in the user's spelling, and
    which of our key paths came from which MILES key. The steps below fill it in file order, so
    problems come out in the order the file's sections are read."""

    out: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    renames: dict[str, str] = field(default_factory=dict)

    def problem(self, path: Sequence[str], message: str) -> None:
        self.problems.append(Problem(format_key(path), message))


def translate(data: Mapping[str, Any], overrides: Sequence[str] = ()) -> Translation:
    """This project's spelling of a MILES run file's data (after ``--set`` overrides)."""
    draft = _Draft()
    _top_level(data, draft)
    _launch(data, draft)
    _mixed_sections(data, draft)
    _placement(data, draft)
    _judges(data, draft)
    _rubrics(data, draft)
    _driver(draft, overrides)
    for section in (*TRAINER_SECTIONS, *MIXED_SECTIONS):
        if section in data:
            _trainer_credentials(data[section], [section], draft)
    trainer_sections = tuple(s for s in (*TRAINER_SECTIONS, *MIXED_SECTIONS) if s in data)
    return Translation(draft.out, tuple(draft.problems), draft.renames, trainer_sections)


MILES_CREDENTIAL_FIX = (
    "looks like a credential, and the run file is copied to the shared filesystem (run-file.toml) and given "
    "to the trainer byte for byte; remove it and give the trainer its key through the job's environment "
    "([launch] secrets, or the environment the job is submitted with)"
)


def _trainer_credentials(value: Any, path: list[str], draft: _Draft) -> None:
    """The trainer's own keys: an argument list holds no literal credential (the one rule, by index);
    a single value no known token."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _trainer_credentials(v, [*path, str(k)], draft)
    elif isinstance(value, list) and all(isinstance(a, str) for a in value):
        for i, _how in argv_credentials(value):
            draft.problem([*path, str(i)], MILES_CREDENTIAL_FIX)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _trainer_credentials(v, [*path, str(i)], draft)
    elif isinstance(value, str) and CREDENTIAL_VALUE.search(value):
        draft.problem(path, MILES_CREDENTIAL_FIX)


def _top_level(data: Mapping[str, Any], draft: _Draft) -> None:
    """The file's version and its sections: unknown ones fail; ``name`` and our extensions pass as spelled."""
    version = data.get("schema_version")
    if "schema_version" in data and (not isinstance(version, int) or isinstance(version, bool) or version != 1):
        draft.problem(["schema_version"], f"must be 1 (the MILES run-file version this project reads), not {version!r}")
    known_top = ("schema_version", "name", *OWNED_SECTIONS, *MIXED_SECTIONS, *TRAINER_SECTIONS, *EXTENSION_SECTIONS)
    for key in data:
        if key not in known_top:
            guess = _close(key, known_top) or _close(key, known_top, cutoff=0.6)
            hint = f"did you mean {guess}?" if guess else "known sections: " + ", ".join(sorted(known_top))
            draft.problem([key], f"unknown section of a MILES run file; {hint}")
    if "name" in data:
        draft.out["name"] = data["name"]
    for section in EXTENSION_SECTIONS:
        if section in data:
            draft.out[section] = data[section]


def _launch(data: Mapping[str, Any], draft: _Draft) -> None:
    """[launch]: MILES keys map into launch and launch.beaker; our extensions pass as spelled."""
    launch = data.get("launch", {})
    if not isinstance(launch, Mapping):
        if "launch" in data:
            draft.out["launch"] = launch  # the resolver reports "must be a table"
        return
    owned_launch = [k.split(".", 1)[1] for k in MAPPING if k.startswith("launch.")]
    for key, value in launch.items():
        if key in LAUNCH_EXTENSIONS:
            _launch_extension(key, value, draft)
        elif key in owned_launch:
            _launch_owned(key, value, draft)
        else:
            close = _close(key, [*owned_launch, *LAUNCH_EXTENSIONS])
            hint = f"did you mean launch.{close}?" if close else "known keys: " + ", ".join(sorted(owned_launch))
            draft.problem(["launch", key], f"unknown key; {hint}")


def _launch_extension(key: str, value: Any, draft: _Draft) -> None:
    """One of our [launch] keys, as spelled; a table merges with what MILES keys put in it."""
    placed = draft.out.setdefault("launch", {})
    if isinstance(value, Mapping) and isinstance(placed.get(key), dict):
        # [launch.beaker] next to MILES keys that map into it (launch.cluster): merge.
        for sub, v in value.items():
            if sub in placed[key]:
                draft.problem(["launch", key, sub], f"is also set as launch.{sub}; set it once")
            placed[key][sub] = v
    else:
        placed[key] = dict(value) if isinstance(value, Mapping) else value
    draft.renames.setdefault(f"launch.{key}", f"launch.{key}")


def _launch_owned(key: str, value: Any, draft: _Draft) -> None:
    """A MILES [launch] key, put where MAPPING says; once only (our [launch.beaker] may hold it too)."""
    target = MAPPING[f"launch.{key}"]
    path = _split(target)
    node: Any = draft.out
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and path[-1] in node:
        draft.problem(["launch", key], f"is also set as {target}; set it once")
    _put(draft.out, path, value)
    draft.renames[target] = f"launch.{key}"


def _mixed_sections(data: Mapping[str, Any], draft: _Draft) -> None:
    """Owned keys mapped, the trainer's own keys left for the trainer."""
    for section in MIXED_SECTIONS:
        table = data.get(section)
        if table is None:
            continue
        if not isinstance(table, Mapping):
            draft.out[section] = table
            continue
        owned = {k.split(".", 1)[1]: v for k, v in MAPPING.items() if k.startswith(section + ".")}
        for key, value in table.items():
            if key in owned:
                _mixed_key(section, key, value, owned[key], draft)
            elif close := _close(key, list(owned)):
                draft.problem([section, key], f"unknown key; did you mean {section}.{close}?")
        if section in ("trainer", "inference"):
            draft.out.setdefault(section, {})


def _mixed_key(section: str, key: str, value: Any, target: str, draft: _Draft) -> None:
    """One owned key of a mixed section at ``target``; two spellings of one key must agree."""
    if section == "data" and key == "eval_prompt_data":
        value = _eval_paths(value, draft)
    current = _get(draft.out, _split(target))
    if current is not None and current != value:
        draft.problem([section, key], f"conflicts with another spelling of {target}; give one value")
    _put(draft.out, _split(target), value)
    draft.renames.setdefault(target, f"{section}.{key}")


def _placement(data: Mapping[str, Any], draft: _Draft) -> None:
    """The MILES placement rules: the default placement mode, and rollout nodes as whole replicas."""
    raw_inference = data.get("inference")
    inference: Mapping[str, Any] = raw_inference if isinstance(raw_inference, Mapping) else {}
    if "placement_mode" not in inference and isinstance(draft.out.get("inference"), dict):
        # The MILES rule: colocated unless the run is fully asynchronous.
        fully_async = _get(data, ["async", "fully_async"]) is True
        draft.out["inference"]["placement_mode"] = "disaggregated" if fully_async else "colocated"
    per_node = inference.get("rollout_gpus_per_node")
    per_replica = _get(data, ["launch", "gpus_per_replica"])
    if per_node is not None and per_replica is not None and per_node != per_replica:
        draft.problem(
            ["inference", "rollout_gpus_per_node"],
            f"is {per_node} but launch.gpus_per_replica is {per_replica}: rollout nodes are whole replicas",
        )


def _judges(data: Mapping[str, Any], draft: _Draft) -> None:
    """[judges.NAME]: the same keys as ours; MILES spells "no extension" as "none"."""
    judges = data.get("judges")
    if isinstance(judges, Mapping):
        draft.out["judges"] = {}
        for name, table in judges.items():
            if isinstance(table, Mapping) and table.get("context_extension") == "none":
                table = {k: v for k, v in table.items() if k != "context_extension"}
            draft.out["judges"][name] = table
    elif judges is not None:
        draft.out["judges"] = judges


def _rubrics(data: Mapping[str, Any], draft: _Draft) -> None:
    """[rubrics.NAME] renamed key by key; [judging] passes as spelled."""
    rubrics = data.get("rubrics")
    if isinstance(rubrics, Mapping):
        draft.out["rubrics"] = {name: _rubric(name, table, draft) for name, table in rubrics.items()}
    elif rubrics is not None:
        draft.out["rubrics"] = rubrics
    if "judging" in data:
        draft.out["judging"] = data["judging"]


def _driver(draft: _Draft, overrides: Sequence[str]) -> None:
    """The driver defaults to the trainer on the original file, its evidence to the trainer's records."""
    out = draft.out
    if not isinstance(out.get("driver"), dict) or "command" not in out["driver"]:
        out.setdefault("driver", {})
        if isinstance(out["driver"], dict):
            out["driver"]["command"] = default_driver(overrides)
    # The trainer writes no driver-result.json: its own per-step records are the evidence, unless
    # the file declares another source (a save_dir alone refines the preset).
    driver = out.get("driver")
    evidence = driver.get("evidence", {}) if isinstance(driver, dict) else None
    if (
        isinstance(driver, dict)
        and isinstance(evidence, Mapping)
        and driver.get("trains") is not False
        and not any(k in evidence for k in EVIDENCE_SOURCES)
    ):
        out["driver"] = {**driver, "evidence": {**evidence, "preset": DEFAULT_EVIDENCE_PRESET}}


def _eval_paths(value: Any, draft: _Draft) -> Any:
    """``eval_prompt_data = ["name", "path", ...]``: the paths, for the data check."""
    if not isinstance(value, list) or len(value) % 2 or not all(isinstance(v, str) for v in value):
        draft.problem(["data", "eval_prompt_data"], "must be an array of name, path pairs of strings")
        return None
    return value[1::2]


def _rubric(name: str, table: Any, draft: _Draft) -> Any:
    if not isinstance(table, Mapping):
        return table
    out: dict[str, Any] = {}
    owned = {k.split(".", 2)[2]: v.split(".", 2)[2] for k, v in MAPPING.items() if k.startswith("rubrics.*.")}
    for key, value in table.items():
        if key not in owned:
            close = _close(key, list(owned))
            hint = f"did you mean rubrics.{name}.{close}?" if close else "known keys: " + ", ".join(sorted(owned))
            draft.problem(["rubrics", name, key], f"unknown key; {hint}")
            continue
        if key == "profile" and isinstance(value, str) and value not in RUBRIC_PROFILES:
            options = ", ".join(f'"{p}"' for p in RUBRIC_PROFILES)
            draft.problem(["rubrics", name, "profile"], f"must be one of {options}, not {value!r}")
            continue
        out[owned[key]] = value
        draft.renames[f"rubrics.{name}.{owned[key]}"] = f"rubrics.{name}.{key}"
    return out


def forwarded_overrides(overrides: Sequence[str]) -> list[str]:
    """``--set`` items the trainer must see too: every one but this project's extension keys."""
    out = []
    for item in overrides:
        head = item.split("=", 1)[0].strip().split(".", 1)[0].strip("\"'")
        if head not in EXTENSION_SECTIONS and not item.startswith(tuple(f"launch.{k}" for k in LAUNCH_EXTENSIONS)):
            out.append(item)
    return out


def default_driver(overrides: Sequence[str] = ()) -> str:
    """The trainer on the original run file, with the MILES keys' overrides passed on."""
    extra = "".join(f" --set {shlex.quote(item)}" for item in forwarded_overrides(overrides))
    return DEFAULT_DRIVER + extra


def mapping_table() -> list[str]:
    rows = ["| MILES key | this project's key |", "|---|---|"]
    rows += [f"| `{theirs}` | `{ours}` |" for theirs, ours in MAPPING.items()]
    rows.append(
        "| `rubrics.*.profile` values | "
        + ", ".join(f"`{p}`" for p in RUBRIC_PROFILES)
        + " (as spelled: their text is read from the installed open_instruct package) |"
    )
    return rows
