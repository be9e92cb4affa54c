"""The configuration reference, generated from the model's field declarations (``launch.spec.config``):
a JSON Schema (2020-12) of the run spec for editors and ``gym-launch schema``, docs/spec.md, and the
NeMo Gym guide (docs/guides/nemo-gym.md, its key table from ``launch.spec._seed_layout``).

``python -m launch.spec.reference`` rewrites both; a test fails when either is stale.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from launch.spec import _miles as miles
from launch.spec import _seed_layout as seed_layout
from launch.spec import config as model
from launch.spec import names, sections
from launch.spec._fields import REQUIRED, SectionInfo, default_of, key_info, section_info, spelled

__all__ = [
    "DOC_PATH",
    "CREDENTIALS_TEXT",
    "NEMO_GYM_DOC_PATH",
    "PLACEMENT_TEXT",
    "SCHEMA_ID",
    "SEED_LAYOUT_TEXT",
    "main",
    "miles_schema",
    "nemo_gym_markdown",
    "run_spec_schema",
    "spec_markdown",
    "table_schema",
]

SCHEMA_ID = "urn:gym-agent:run-spec"
DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "spec.md"
NEMO_GYM_DOC_PATH = DOC_PATH.parent / "guides" / "nemo-gym.md"


def _modes(f: dataclasses.Field[Any]) -> tuple[str, ...]:
    info = key_info(f)
    return info.modes if info else ()


def _table(f: dataclasses.Field[Any]) -> SectionInfo:
    info = section_info(f)
    assert info is not None, f.name  # _fields keeps keys and sections only
    return info


# The judge keys each mode accepts, from the declarations (modes=...).
_MANAGED_ONLY = [spelled(f) for f in dataclasses.fields(sections.JudgeConfig) if _modes(f) == sections.MANAGED]
_EXTERNAL_ONLY = [spelled(f) for f in dataclasses.fields(sections.JudgeConfig) if _modes(f) == sections.EXTERNAL]


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if key_info(f) or section_info(f)]


def table_schema(cls: type) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in _fields(cls):
        name = spelled(f)
        info = key_info(f)
        if info is not None:
            prop = {**info.type.schema(), "description": info.doc}
            default = default_of(f)
            if default is not REQUIRED and default is not None and not info.derived:
                prop["default"] = _plain(default)
            props[name] = prop
            if default is REQUIRED:
                required.append(name)
            continue
        sinfo = _table(f)
        sub = f.metadata["cls"]
        entry = table_schema(sub)
        if sinfo.named:
            props[name] = {
                "type": "object",
                "description": sinfo.doc,
                "propertyNames": {"pattern": f"^{names.FILE_NAME_RULE}$", "maxLength": sections.MAX_NAME},
                "additionalProperties": entry,
            }
        else:
            props[name] = {**entry, "description": sinfo.doc}
            if any(default_of(g) is REQUIRED for g in _fields(sub) if key_info(g)):
                required.append(name)
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    if cls is sections.JudgeConfig:
        out["allOf"] = [
            {
                "if": {"properties": {"mode": {"const": "external"}}},
                "then": {"properties": dict.fromkeys(_MANAGED_ONLY, False), "required": ["endpoint"]},
            },
            {
                "if": {"properties": {"mode": {"const": "managed"}}},
                "then": {"properties": dict.fromkeys(_EXTERNAL_ONLY, False)},
            },
        ]
    return out


def run_spec_schema() -> dict[str, Any]:
    """The JSON Schema of a run spec in this project's spelling, and of a MILES run file."""
    ours = table_schema(model.RunConfig)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "gym-agent run spec (TOML)",
        "description": "Generated from launch/spec/config.py; see docs/spec.md. A MILES run file is accepted as well.",
        "anyOf": [{**ours, "title": "gym-agent spelling"}, {**miles_schema(), "title": "MILES run file"}],
    }


def miles_schema() -> dict[str, Any]:
    """A JSON Schema of a MILES run file: owned keys typed from the model, trainer sections free."""

    def leaf(path: str) -> dict[str, Any]:
        parts = path.split(".")
        cls: Any = model.RunConfig
        for part in parts[:-1]:
            if part == "*":
                continue
            f = next(f for f in dataclasses.fields(cls) if spelled(f) == part)
            cls = f.metadata["cls"]
        f = next(f for f in dataclasses.fields(cls) if spelled(f) == parts[-1])
        info = key_info(f)
        return info.type.schema() if info else table_schema(f.metadata["cls"])

    launch_props = {k.split(".", 1)[1]: leaf(v) for k, v in miles.MAPPING.items() if k.startswith("launch.")}
    free = {"type": "object"}
    props: dict[str, Any] = {
        "schema_version": {"const": 1},
        "name": leaf("name"),
        "launch": {"type": "object", "properties": launch_props},
        "trainer": {
            "type": "object",
            "properties": {"gpus": leaf("trainer.gpus_per_node"), "trainer_num_nodes": leaf("trainer.nodes")},
        },
        "inference": {
            "type": "object",
            "properties": {
                "gpus": leaf("inference.gpus"),
                "rollout_tensor_parallel_size": leaf("inference.tensor_parallel_size"),
                "placement_mode": leaf("inference.placement_mode"),
            },
        },
        "judges": {"type": "object", "additionalProperties": {"type": "object"}},
        "rubrics": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "profile": {"enum": [*miles.RUBRIC_PROFILES]},
                    "max_response_tokens": leaf("rubrics.*.max_output_tokens"),
                    "temperature": leaf("rubrics.*.temperature"),
                },
                "additionalProperties": False,
            },
        },
        "judging": {"type": "object"},
        **{s: free for s in (*miles.TRAINER_SECTIONS, "output", "data", *miles.EXTENSION_SECTIONS)},
    }
    return {
        "type": "object",
        "properties": props,
        "additionalProperties": False,
        "anyOf": [{"required": ["schema_version"]}, {"required": ["model"]}],
    }


# --- docs/spec.md -------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_text(f: dataclasses.Field[Any]) -> str:
    info = key_info(f)
    default = default_of(f)
    if info and info.derived:
        return f"= {info.derived}"
    if default is REQUIRED:
        return "**required**"
    if default is None:
        return "absent"
    plain = _plain(default)
    if f.name == "dir_mode":
        return f"`{oct(plain)}`"
    return f"`{json.dumps(plain)}`"


def _section(path: str, cls: type, doc: str, lines: list[str]) -> None:
    """The table of ``[path]``'s keys, then its sub-tables, depth first (the order of a TOML file)."""
    rows: list[str] = []
    subs: list[tuple[str, type, str]] = []
    for f in _fields(cls):
        info = key_info(f)
        name = spelled(f)
        if info is None:
            sinfo = _table(f)
            sub = f"{path}.{name}" if path else name
            if sinfo.named:
                sub += '."VERIFIER"' if name == "bindings" else ".NAME"
            subs.append((sub, f.metadata["cls"], sinfo.doc))
            continue
        modes = f" ({', '.join(info.modes)} only)" if info.modes else ""
        rows.append(
            f"| `{name}` | {info.type.doc} | {_default_text(f)} | {_cell(info.type.constraint())} | "
            f"{_cell(info.doc)}{modes} | {_cell(info.rule)} |"
        )
    if rows:
        lines += [f"## `[{path}]`" if path else "## Top level", "", _cell(doc), ""]
        lines += ["| key | type | default | bounds | meaning | rule |", "|---|---|---|---|---|---|", *rows, ""]
    for sub_path, sub_cls, sub_doc in subs:
        _section(sub_path, sub_cls, sub_doc, lines)


PLACEMENT_TEXT = [
    "## Placement",
    "",
    "Capacity C = `launch.gpus_per_replica`. A run that fits one node with one trainer node allocates only",
    "what it requests. Otherwise trainer nodes come first; the final trainer node's spare GPUs take whole",
    "rollout engines; then rollout nodes of `min(C, remaining)`; then bound managed judges, in name order,",
    "fill the last node's spare GPUs, else new judge nodes. Every replica has C GPUs; the plan reports the",
    "unused ones. Multi-node replicas must be whole nodes (`launch.node_gpus`). Pools take contiguous node",
    "ranges in declaration order; a service pinned to a pool (`trainer.node_pool`, `inference.node_pool`,",
    "`judges.NAME.node_pool`) runs only on its nodes and is sized against it, and what is not pinned fills the",
    "other GPU pools. A CPU pool (`gpus_per_node = 0`) gets no GPU work and no Ray unless `ray.node_pools`",
    "names it; pools that differ in partition, GPUs or tasks per node are one Slurm heterogeneous job, one",
    "component per shape in declaration order. Trainer or rollout GPUs on a pool left out of",
    "`ray.node_pools` are refused. `driver.placement =",
    '"inference"` puts the driver on the last node holding rollout GPUs and no trainer GPUs (no effect',
    "without one). An evaluation run (`trainer.nodes = 0`) has no trainer node: its driver goes to the first",
    "node of its policy (seed 001: the `[policy]` service's, else the first rollout node; with neither, node 0).",
    "Ray starts only where the trainer, rollout engines or a `[ray]` table need it; a node that joins Ray with",
    "no trainer or rollout GPUs, in a pool `ray.node_pools` names, gives Ray its free GPUs.",
    "The acceptance table (8 GPUs per replica):",
    "",
    "| request | allocation |",
    "|---|---|",
    "| 2 trainer + 6 rollout, no judge | 1 node, 8 GPUs, none unused |",
    "| 8 trainer + 7 rollout + 1 judge | 2 nodes, 16 GPUs, none unused |",
    "| 4 trainer + 11 rollout + 1 judge | 2 nodes, 16 GPUs, none unused |",
    "| 4 trainer + 19 rollout + 1 judge | 3 nodes, 24 GPUs, none unused |",
    "| 8 trainer + 23 rollout + 1 judge | 4 nodes, 32 GPUs, none unused |",
    "| 8 trainer + 8 rollout + 1 judge | 3 nodes, 24 GPUs, 7 unused |",
    "",
]


CREDENTIALS_TEXT = [
    "## Credentials on a command line",
    "",
    "A spec is copied to the shared filesystem (`spec.json`, `run-file.toml`), so no command line it carries",
    "(`driver.command`, `ray.extra_args`, a MILES run file's argument lists) may hold a credential: a known",
    "token (`sk-`, `hf_`, `ghp_`, ...), the value of a `--*key*`/`--*token*`/`--*password*`/`--*secret*` flag",
    "(`--api-key VALUE` or `--api-key=VALUE`), or a `NAME=VALUE` word whose name looks like one (`HF_TOKEN=...`).",
    "`gym-launch validate` refuses it with exit 2, naming the argument's index (never its value); the same rule",
    "refuses a credential in `launch.env` and `driver.env`.",
    "",
    'Pass it by reference instead: an argument may contain `"${runtime:NAME}"` (exactly that spelling), which',
    "the agent replaces with NAME of the job's environment only in the exec of the process (the driver, `ray",
    "start`); a shell-string driver gets the shell's own `${NAME}`. Export NAME where the job is submitted, or",
    "name it in `[launch] secrets` (a Beaker or SkyPilot secret, given to the job by name). Every file keeps",
    "the reference. A referenced variable the job's environment lacks fails the run before any process starts",
    "(failure kind `environment`, naming it). A MILES trainer reads its run file itself: give it its key through",
    "the job's environment. `docs/security.md` lists what is never written.",
    "",
    "```toml",
    "[driver]",
    'command = ["python", "train.py", "--hub_token", "${runtime:HF_TOKEN}"]',
    "[launch.secrets]",
    "HF_TOKEN = \"my-hf-token\"  # Beaker: the secret's name; SkyPilot: the variable's own name",
    "```",
    "",
]


SEED_LAYOUT_TEXT = (
    "Seed 001 writes a run as NeMo Gym does, `compute:` and `services:`. A `.yaml`/`.yml` file whose top "
    "level has both is read as a NeMo Gym submission config by every command that takes a spec "
    "([the NeMo Gym guide](guides/nemo-gym.md)); a TOML spec with only one of the two keys is refused "
    "with a pointer to this project's tables. Each NeMo Gym key and its meaning here:"
)

NEMO_GYM_GUIDE = """# NeMo Gym submission configs

<!-- Generated by `python -m launch.spec.reference` from launch/spec/_seed_layout.py; do not edit by hand. -->

A NeMo Gym 0.7.0 submission config (the YAML `gym eval submit --config` reads) is accepted as it is
written by every command that takes a spec: `gym-launch validate | plan | render | submit | local`,
`gym-agent --config`, and the run directory's `spec.json` afterwards. A `.yaml` or `.yml` file whose
top level has `compute` and `services` is read as one; `gym-launch plan` says
`read as a NeMo Gym submission config`. The fingerprint is the one of the YAML as written (with
`--set` overrides, spelled with NeMo Gym's keys: `--set services.policy.port=8001`).

Every key is either carried to its meaning (first table) or refused with its YAML path and why
(second table); a typo fails with a did-you-mean, and a problem found on this project's spelling is
reported at the NeMo Gym key that produced it. Examples: `examples/nemo_gym/` holds seed 001's two
examples (`judge_node.yaml`, `ray_pools.yaml`) and a CPU-pool variant that runs on one machine
(`gym-launch local examples/nemo_gym/cpu_pool.yaml`).

Try it (the suite runs these commands, so they work as shown):

<!-- runnable: tests/test_docs.py runs this block -->
```console
$ gym-launch validate examples/nemo_gym/judge_node.yaml
$ gym-launch plan examples/nemo_gym/ray_pools.yaml
$ gym-launch render examples/nemo_gym/ray_pools.yaml --backend slurm
$ gym-launch plan examples/nemo_gym/cpu_pool.yaml
```

## Migrating a NeMo Gym config

1. Keep the file. Check it: `gym-launch validate run.yaml`, then `gym-launch plan run.yaml` (the node
   table: each pool's contiguous node range, the policy's nodes, the judges', the driver's node) and
   `gym-launch render run.yaml --backend slurm` (the batch script).
2. A `type: vllm` service's `model` is served as NeMo Gym serves it: vLLM loads it as given (a hub id
   it downloads as it starts, or a directory), with no `--revision`. Those weights are not pinned:
   what the hub serves under that name may change between attempts and nodes, so every `gym-launch`
   command that reads the config (validate, plan, render, submit, local) warns, naming the key
   (`warning: services.judge.model: the weights are not pinned: ...` on stderr; `gym-launch plan
   --json` lists them under `warnings`), and exits 0. To pin them add gym-agent's extensions to the
   service: `revision: COMMIT` (40 hex; vLLM gets `--revision`), and `prepared_dir: DIR` (the weights
   staged before the job, loaded instead of `model`; every node checks that the directory holds that
   revision before it starts the server; a `model` that is an absolute path is such a directory). A
   TOML spec still requires both.
3. Remove or replace what is refused (second table): `otel` (set `otel.enabled: false`), a benchmark's
   `prepare`, `resumable`, `driver.container`/`mounts`/`gym_install` (the driver runs `gym` in the job's
   own environment), `host:` values (use `runtime:`), SSH submission (`compute.*.hostname`: run
   `gym-launch submit` on the login node), multi-instance vLLM, `vllm_pd`.
4. One benchmark per config: NeMo Gym submits one job per benchmark, and so does gym-launch. The run
   is named `gym-BENCHMARK` (its Slurm `--job-name`). A benchmark's `run` becomes the driver command
   `gym eval run +KEY=VALUE ...` with the policy's address injected (`policy_base_url` from
   `$GYM_POLICY_URL`, `policy_model_name`, a placeholder `policy_api_key`); a benchmark's `command`
   runs as written, with `NEMO_GYM_BENCH_DIR` (the run directory), `NEMO_GYM_POLICY_BASE_URL` and
   `NEMO_GYM_POLICY_MODEL_NAME` exported (not `NEMO_GYM_POLICY_API_KEY`: the policy takes no key).
5. Reach other services as before: `GYM_POOL_<POOL>_NODES` and `GYM_RAY_ADDRESS_<SERVICE>` in the job's
   environment (`runtime:` values in `driver.env`), and each judge service at `GYM_JUDGE_URL_<NAME>`.
   `gym-launch local` sets the pools' host lists too (each replica's loopback address is its host);
   see [the placement guide](nemo-gym-placement.md#exports) for what each backend sets.
6. gym-agent's own settings ride along in a top-level `launch:` mapping (coordination timeouts,
   preflight, `max_retries`, ...), which NeMo Gym itself would refuse.

What differs: every non-policy `type: vllm` service is a judge the agents start, health-check and
stop with the run (no bindings are needed; the audit checks each one answered); its port is chosen
by the agents. A `type: ray` service is the job's one Ray cluster; without one, no Ray is started.

## Keys carried
"""


def spec_markdown() -> str:
    lines = [
        "# Run spec reference",
        "",
        "<!-- Generated by `python -m launch.spec.reference` from launch/spec/config.py; do not edit by hand. -->",
        "",
        "Every key of a run spec, its type, default, bounds and where its rule comes from. Unknown keys",
        "fail with their full path and a did-you-mean; every problem is reported at once. An omitted key",
        "and a key set to its default value fingerprint differently (the spec is fingerprinted as spelled).",
        "`gym-launch schema` prints the same information as a JSON Schema for editors.",
        "",
        "Default or required, decided per key: a key is required only when no value could be right for",
        "every run (the driver's command, trainer and rollout sizes, a judge's mode and model, and for an",
        "SGLang judge its pinned revision and prepared weights). A judge's context and concurrency and a",
        "rubric's output reservation and temperature default to the MILES run file's values, so both",
        "spellings resolve alike; a judge's `timeout` is per HTTP request, not a total budget (seed 000).",
        "",
    ]
    _section("", model.RunConfig, "The run's name.", lines)
    lines += PLACEMENT_TEXT
    lines += CREDENTIALS_TEXT
    lines += ["## MILES run files", "", miles.REFERENCE_TEXT.strip(), "", *miles.mapping_table(), ""]
    lines += ["## Seed 001 layout", "", SEED_LAYOUT_TEXT, "", *seed_layout.mapping_table(), ""]
    lines += ["Refused, each with its reason: see [the NeMo Gym guide](guides/nemo-gym.md).", ""]
    return "\n".join(lines)


def nemo_gym_markdown() -> str:
    lines = [NEMO_GYM_GUIDE.rstrip(), "", *seed_layout.mapping_table(), "", "## Keys refused", ""]
    lines += [*seed_layout.refused_table(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    docs = {DOC_PATH: spec_markdown(), NEMO_GYM_DOC_PATH: nemo_gym_markdown()}
    if args == ["--check"]:
        return 0 if all(p.is_file() and p.read_text(encoding="utf-8") == t for p, t in docs.items()) else 1
    for path, text in docs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
