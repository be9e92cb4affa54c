"""Key-level rules of the run spec: every key, its type, its cross-references.

``check_spec(data)`` returns every problem it finds (never stops at the first).
Placement rules that need the whole GPU picture live in ``launch.plan``;
``launch.validate.validate`` runs both.

Decisions beyond ARCHITECTURE.md's key table (also in docs of each check):

* Known-but-unsupported keys fail with a specific message instead of
  "unknown key": ``judges.X.engine`` / ``backend = "vllm"`` (independent vLLM
  allocations), ``judges.X.{api_key, api_key_env, headers, token, password,
  auth, bearer_token, username}`` (credentialed judges), ``rubrics.X.{file,
  path, rubric_file, template_file, text, prompt}`` (custom rubric files),
  ``inference.eval_gpus`` / ``inference.eval_tensor_parallel_size`` (separate
  evaluation pools) and ``inference.nnodes`` / ``judges.X.nnodes`` (cross-node
  serving TP).
* Double scaling: ``context_extension`` is the only way to scale RoPE. A judge
  that also carries ``rope_scaling`` or ``json_model_override_args`` would be
  scaled twice and is rejected; without ``context_extension`` those keys are
  rejected as unsupported (use ``context_extension``).
* Required keys: ``trainer.gpus_per_node``, ``inference.gpus`` (0 for none),
  ``driver.command``, ``judges.X.mode`` and ``model``, ``rubrics.X.profile`` and
  ``max_output_tokens``, ``judging.bindings.V.judge`` and ``rubric``,
  ``pools.X.nodes`` and ``gpus_per_node``; everything else has a default
  (``launch.config``) or is optional.
* ``max_context_length`` and ``max_concurrent_calls`` are required for every
  judge (the client's overflow check and the server's running-request limit
  need them); ``gpus`` is required for managed judges and
  ``tensor_parallel_size`` defaults to it.
* External endpoints must be http(s) with a host and carry no userinfo, query
  string or fragment (no credentials of any kind).
* ``driver.env`` values are strings and may not set ``CUDA_VISIBLE_DEVICES``
  (device masks come from the plan); ``ray.extra_args`` may not set flags the
  plan owns (``--num-gpus``, ``--num-cpus``, ``--resources``, ...).
* ``output.dir_mode`` must give the owner rwx and must not be world-writable.
* ``launch.backend = "beaker"`` requires ``launch.node_gpus = 8``.
* Pools must all have ``gpus_per_node == launch.gpus_per_replica``.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from launch import names
from launch.errors import Problem
from launch.keypath import format_key

Path_ = tuple[str, ...]
# A check returns None when the value is fine, else what to change.
Check = Callable[[Any], str | None]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _describe(v: Any) -> str:
    if isinstance(v, bool):
        return f"the boolean {str(v).lower()}"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "an array"
    return f"{type(v).__name__} {v!r}"


# --- value checks -----------------------------------------------------------


def positive_int(v: Any) -> str | None:
    if not _is_int(v) or v <= 0:
        return f"must be a positive integer, not {_describe(v)}"
    return None


def non_negative_int(v: Any) -> str | None:
    if not _is_int(v) or v < 0:
        return f"must be a non-negative integer, not {_describe(v)}"
    return None


def positive_number(v: Any) -> str | None:
    if not _is_number(v) or v <= 0:
        return f"must be a positive number of seconds, not {_describe(v)}"
    return None


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, not {_describe(v)}"


def text(v: Any) -> str | None:
    if not isinstance(v, str) or not v.strip():
        return f"must be a non-empty string, not {_describe(v)}"
    return None


def one_of(*choices: str) -> Check:
    def check(v: Any) -> str | None:
        if v in choices and isinstance(v, str):
            return None
        options = " or ".join(f'"{c}"' for c in choices)
        return f"must be {options}, not {_describe(v)}"

    return check


def string_list(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        return f"must be an array of non-empty strings, not {_describe(v)}"
    return None


def absolute_path(v: Any) -> str | None:
    if not isinstance(v, str) or not PurePosixPath(v).is_absolute():
        return f"must be an absolute path (weights are prepared before GPU allocation), not {_describe(v)}"
    return None


def revision(v: Any) -> str | None:
    if not isinstance(v, str) or not names.REVISION.fullmatch(v):
        return f"must be an immutable commit: 40 lowercase hex digits, not {_describe(v)}"
    return None


def run_name(v: Any) -> str | None:
    if not isinstance(v, str) or not names.RUN_NAME.fullmatch(v):
        return f"must be 1-100 letters, digits, '.', '_' or '-' starting with a letter or digit, not {_describe(v)}"
    return None


def endpoint(v: Any) -> str | None:
    if not isinstance(v, str):
        return f"must be an http(s) URL string, not {_describe(v)}"
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, not {v!r}"
    if parts.username is not None or parts.password is not None:
        return "must not contain user:password@ (credentialed judges are not supported); remove the userinfo"
    if parts.query or parts.fragment:
        return "must not carry a query string or fragment (credentials are not supported); remove it"
    return None


def slurm_time(v: Any) -> str | None:
    if not isinstance(v, str) or not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", v):
        return f'must be a Slurm time such as "04:00:00" or "1-00:00:00", not {_describe(v)}'
    return None


def beaker_cluster(v: Any) -> str | None:
    if isinstance(v, str) and v:
        return None
    return string_list(v)


def driver_command(v: Any) -> str | None:
    if isinstance(v, str) and v.strip():
        return None
    if isinstance(v, list) and v and all(isinstance(x, str) and x for x in v):
        return None
    return f"must be a non-empty array of strings (or one shell string), not {_describe(v)}"


def dir_mode(v: Any) -> str | None:
    if not _is_int(v) or not 0 <= v <= 0o777:
        return f"must be a permission mode such as 0o750, not {_describe(v)}"
    if v & 0o700 != 0o700:
        return f"must give the owner rwx (0o7..), not {v:#o}"
    if v & 0o002:
        return f"must not be world-writable (coordination records decide what runs), not {v:#o}"
    return None


# --- table walking ----------------------------------------------------------

VLLM = "independent vLLM allocations are not supported; managed judges run SGLang or the reference judge"
CREDENTIALS = "credentialed judges are not supported; use an unauthenticated endpoint and remove this key"
RUBRIC_FILES = 'custom rubric files are not supported; choose profile = "general-quality" or "general-quality-ref"'
EVAL_POOLS = "separate evaluation GPU pools are not supported; evaluation uses the rollout engines"
CROSS_NODE_TP = "cross-node serving tensor parallelism is not supported; an engine must fit within one node"

CREDENTIAL_KEYS = (
    "api_key",
    "api_key_env",
    "headers",
    "token",
    "password",
    "auth",
    "bearer_token",
    "username",
)
RUBRIC_FILE_KEYS = ("file", "path", "rubric_file", "template_file", "text", "prompt")
SCALING_KEYS = ("rope_scaling", "json_model_override_args")
# Flags ray start gets from the plan or from [ray]; letting extra_args override
# them would break the readiness gate's per-node GPU check.
PLAN_OWNED_RAY_FLAGS = (
    "--num-gpus",
    "--num-cpus",
    "--resources",
    "--object-store-memory",
    "--address",
    "--head",
    "--block",
)
RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "accelerator_type")


class Checker:
    """Collects problems while walking the spec."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: Path_, message: str) -> None:
        self.problems.append(Problem(format_key(path), message))

    def value(self, table: Mapping[str, Any], path: Path_, key: str, check: Check) -> None:
        if key in table:
            msg = check(table[key])
            if msg:
                self.add((*path, key), msg)

    def table(self, parent: Mapping[str, Any], path: Path_, key: str) -> Mapping[str, Any]:
        """The sub-table ``parent[key]``; an empty mapping if absent or not a table (reported)."""
        value = parent.get(key, {})
        if isinstance(value, dict):
            return value
        self.add((*path, key), f"must be a table ([{format_key((*path, key))}]), not {_describe(value)}")
        return {}

    def keys(
        self,
        table: Mapping[str, Any],
        path: Path_,
        known: Mapping[str, Check] | tuple[str, ...],
        unsupported: Mapping[str, str] | None = None,
        required: tuple[str, ...] = (),
        hint: str = "",
    ) -> None:
        """Report unsupported, unknown (with did-you-mean) and missing required keys."""
        unsupported = unsupported or {}
        for key in table:
            if key in unsupported:
                self.add((*path, key), unsupported[key])
            elif key not in known:
                self.add((*path, key), unknown_key_message(path, key, list(known)))
        for key in required:
            if key not in table:
                where = f"[{format_key(path)}]" if path else "the top level"
                self.add((*path, key), f"is required{hint}; add it to {where}")
        if isinstance(known, Mapping):
            for key, check in known.items():
                self.value(table, path, key, check)


def unknown_key_message(path: Path_, key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {format_key((*path, close[0]))}?"
    listing = ", ".join(sorted(known)) or "none"
    return f"unknown key (known keys here: {listing})"


# --- sections ---------------------------------------------------------------

TOP: dict[str, Check] = {"name": run_name}
SECTIONS = (
    "output",
    "launch",
    "trainer",
    "inference",
    "driver",
    "judges",
    "rubrics",
    "judging",
    "data",
    "pools",
    "ray",
)

COORDINATION: dict[str, Check] = {
    "startup_timeout": positive_number,
    "heartbeat_timeout": positive_number,
    "heartbeat_interval": positive_number,
    "poll_interval": positive_number,
    "teardown_grace": positive_number,
    "ack_timeout": positive_number,
}
BEAKER: dict[str, Check] = {
    "image": text,
    "cluster": beaker_cluster,
    "workspace": text,
    "budget": text,
    "priority": one_of(*names.BEAKER_PRIORITIES),
    "preemptible": boolean,
}
SLURM: dict[str, Check] = {"partition": text, "account": text, "qos": text, "time": slurm_time}

JUDGE_COMMON: dict[str, Check] = {
    "mode": one_of(*names.JUDGE_MODES),
    "model": text,
    "max_context_length": positive_int,
    "max_concurrent_calls": positive_int,
    "timeout": positive_int,
}
JUDGE_EXTERNAL: dict[str, Check] = {**JUDGE_COMMON, "endpoint": endpoint}
JUDGE_MANAGED: dict[str, Check] = {
    **JUDGE_COMMON,
    "backend": lambda v: None,  # checked with its own messages (vllm) in _judge
    "revision": revision,
    "prepared_dir": absolute_path,
    "gpus": positive_int,
    "tensor_parallel_size": positive_int,
    "chat_template": one_of(*names.CHAT_TEMPLATES),
    "cuda_graphs": boolean,
    "context_extension": one_of(*names.CONTEXT_EXTENSIONS),
    "node_pool": lambda v: None,  # must name a declared pool; checked in _judge
}


def check_spec(data: Mapping[str, Any]) -> list[Problem]:
    """Every key-level problem of a resolved spec (types, names, references, unsupported keys)."""
    c = Checker()
    if not isinstance(data, Mapping):
        c.add(("spec",), f"must be a table, not {_describe(data)}")
        return c.problems
    c.keys(data, (), (*TOP, *SECTIONS))
    c.value(data, (), "name", run_name)
    _output(c, c.table(data, (), "output"))
    launch = c.table(data, (), "launch")
    _launch(c, launch)
    pools = _pools(c, c.table(data, (), "pools"), launch)
    _trainer(c, data)
    _inference(c, data)
    _driver(c, data)
    judges = c.table(data, (), "judges")
    for name, judge in judges.items():
        _judge(c, name, judge, pools)
    rubrics = c.table(data, (), "rubrics")
    for name, rubric in rubrics.items():
        _rubric(c, name, rubric)
    _judging(c, c.table(data, (), "judging"), judges, rubrics)
    _data(c, c.table(data, (), "data"))
    _ray(c, c.table(data, (), "ray"), pools)
    return c.problems


def _output(c: Checker, t: Mapping[str, Any]) -> None:
    c.keys(t, ("output",), {"root": text, "dir_mode": dir_mode})


def _launch(c: Checker, t: Mapping[str, Any]) -> None:
    p: Path_ = ("launch",)
    c.keys(
        t,
        p,
        {
            "gpus_per_replica": positive_int,
            "node_gpus": positive_int,
            "hostnames": string_list,
            "backend": one_of(*names.LAUNCH_BACKENDS),
            "coordination": lambda v: None,
            "beaker": lambda v: None,
            "slurm": lambda v: None,
        },
    )
    hosts = t.get("hostnames")
    if isinstance(hosts, list) and len(set(map(str, hosts))) != len(hosts):
        c.add((*p, "hostnames"), "lists a host more than once; remove the duplicates")
    node_gpus = t.get("node_gpus", 8)
    if t.get("backend") == "beaker" and _is_int(node_gpus) and node_gpus != 8:
        c.add((*p, "node_gpus"), "Beaker replica groups need full eight-GPU nodes; set node_gpus = 8")
    coord = c.table(t, p, "coordination")
    cp: Path_ = (*p, "coordination")
    c.keys(coord, cp, COORDINATION)
    poll = coord.get("poll_interval")
    if _is_number(poll) and poll > 1:
        c.add((*cp, "poll_interval"), f"must be at most 1 second so failures propagate fast, not {poll}")
    hb_i, hb_t = coord.get("heartbeat_interval", 2.0), coord.get("heartbeat_timeout", 120)
    if _is_number(hb_i) and _is_number(hb_t) and 0 < hb_t <= hb_i:
        c.add(
            (*cp, "heartbeat_interval"),
            f"must be smaller than heartbeat_timeout ({hb_t}), else every peer looks dead",
        )
    c.keys(c.table(t, p, "beaker"), (*p, "beaker"), BEAKER)
    c.keys(c.table(t, p, "slurm"), (*p, "slurm"), SLURM)


def _pools(c: Checker, t: Mapping[str, Any], launch: Mapping[str, Any]) -> set[str]:
    """Check [pools.NAME]; return the declared pool names."""
    per_replica = launch.get("gpus_per_replica", 8)
    for name, pool in t.items():
        p: Path_ = ("pools", name)
        if not names.is_file_name(name):
            c.add(p, f"pool names end up in file names and must match {names.FILE_NAME_RULE}")
        if not isinstance(pool, dict):
            c.add(p, f"must be a table ([pools.{name}]), not {_describe(pool)}")
            continue
        c.keys(
            pool,
            p,
            {"nodes": positive_int, "gpus_per_node": positive_int, "partition": text},
            required=("nodes", "gpus_per_node"),
        )
        gpn = pool.get("gpus_per_node")
        # One allocation has one node size; gpus_per_replica is that size.
        if _is_int(gpn) and _is_int(per_replica) and gpn != per_replica:
            c.add(
                (*p, "gpus_per_node"),
                f"is {gpn} but launch.gpus_per_replica is {per_replica}: pools share one allocation, "
                "so every pool and the replica size must agree",
            )
    return {n for n in t if isinstance(n, str)}


def _trainer(c: Checker, data: Mapping[str, Any]) -> None:
    if "trainer" not in data:
        c.add(("trainer",), "is required: add [trainer] gpus_per_node = N (and nodes = M)")
        return
    t = c.table(data, (), "trainer")
    known = {"nodes": positive_int, "gpus_per_node": positive_int}
    c.keys(t, ("trainer",), known, required=("gpus_per_node",))


def _inference(c: Checker, data: Mapping[str, Any]) -> None:
    if "inference" not in data:
        c.add(("inference",), "is required: add [inference] gpus = N (0 for none)")
        return
    t = c.table(data, (), "inference")
    c.keys(
        t,
        ("inference",),
        {
            "gpus": non_negative_int,
            "tensor_parallel_size": positive_int,
            "placement_mode": one_of(*names.PLACEMENT_MODES),
        },
        unsupported={
            "eval_gpus": EVAL_POOLS,
            "eval_tensor_parallel_size": EVAL_POOLS,
            "nnodes": CROSS_NODE_TP,
        },
        required=("gpus",),
    )


def _driver(c: Checker, data: Mapping[str, Any]) -> None:
    if "driver" not in data:
        c.add(("driver",), 'is required: add [driver] command = ["python", "train.py"]')
        return
    t = c.table(data, (), "driver")
    p: Path_ = ("driver",)
    c.keys(
        t,
        p,
        {"command": driver_command, "env": lambda v: None, "placement": one_of(*names.DRIVER_PLACEMENTS)},
        required=("command",),
    )
    env = c.table(t, p, "env")
    for key, value in env.items():
        if not names.ENV_NAME.fullmatch(key):
            c.add((*p, "env", key), "is not a valid environment variable name")
        elif key == "CUDA_VISIBLE_DEVICES":
            c.add((*p, "env", key), "is set by the agent from the plan; remove it")
        if not isinstance(value, str):
            c.add((*p, "env", key), f"must be a string (quote it), not {_describe(value)}")


def _judge(c: Checker, name: str, t: Any, pools: set[str]) -> None:
    p: Path_ = ("judges", name)
    if not names.is_file_name(name):
        c.add(p, f"judge names end up in file names (judge-NAME-RANK.log): use {names.FILE_NAME_RULE}")
    if not isinstance(t, dict):
        c.add(p, f"must be a table ([judges.{name}]), not {_describe(t)}")
        return
    mode = t.get("mode")
    unsupported: dict[str, str] = dict.fromkeys(CREDENTIAL_KEYS, CREDENTIALS)
    unsupported["engine"] = VLLM
    unsupported["nnodes"] = CROSS_NODE_TP
    if mode == "external":
        for key in JUDGE_MANAGED:
            if key not in JUDGE_EXTERNAL:
                unsupported[key] = (
                    "is not allowed for an external judge: its serving configuration and placement are "
                    "owned by the endpoint; remove it"
                )
        unsupported["cuda_graphs"] = (
            "external endpoints reject cuda_graphs, even when false: their serving configuration is "
            "externally owned; remove the key"
        )
        for key in SCALING_KEYS:
            unsupported[key] = "is not allowed for an external judge; remove it"
        c.keys(t, p, JUDGE_EXTERNAL, unsupported, required=("model", "endpoint", *_CONTEXT_KEYS))
        return
    if mode is not None and mode != "managed":
        c.add((*p, "mode"), f'must be "managed" or "external", not {_describe(mode)}')
        # Still check the keys against everything a judge may carry.
        c.keys(t, p, {**JUDGE_MANAGED, **JUDGE_EXTERNAL}, unsupported)
        return
    if mode is None:
        c.add((*p, "mode"), 'is required: mode = "managed" (started by the agent) or "external" (endpoint)')
    unsupported["endpoint"] = 'is only for mode = "external"; a managed judge gets its endpoint at run time'
    for key in SCALING_KEYS:
        unsupported[key] = (
            "would scale RoPE twice: context_extension already applies YaRN; remove this key"
            if "context_extension" in t
            else 'is not supported; long context is set with context_extension = "qwen3-yarn-128k"'
        )
    backend = t.get("backend", "sglang")
    if backend == "vllm":
        c.add((*p, "backend"), VLLM)
    elif backend not in names.JUDGE_BACKENDS or not isinstance(backend, str):
        c.add((*p, "backend"), f'must be "sglang" or "reference", not {_describe(backend)}')
    required = ["model", "gpus", *_CONTEXT_KEYS]
    if backend != "reference":
        # A real server needs immutable, pre-staged weights; the reference judge has none.
        required += ["revision", "prepared_dir"]
    c.keys(t, p, JUDGE_MANAGED, unsupported, required=tuple(required))
    gpus, tp = t.get("gpus"), t.get("tensor_parallel_size")
    if _is_int(gpus) and _is_int(tp) and gpus != tp:
        c.add((*p, "tensor_parallel_size"), f"must equal gpus ({gpus}): one server spans its GPUs, not {tp}")
    pool = t.get("node_pool")
    if "node_pool" in t and (not isinstance(pool, str) or pool not in pools):
        declared = ", ".join(sorted(pools)) or "none declared"
        c.add((*p, "node_pool"), f"must name a [pools.NAME] table (declared: {declared}), not {pool!r}")
    ext = t.get("context_extension")
    if isinstance(ext, str) and ext in names.CONTEXT_EXTENSIONS:
        model, limit = names.CONTEXT_EXTENSIONS[ext]
        if t.get("model") != model:
            c.add((*p, "context_extension"), f'"{ext}" is only supported for model "{model}"; remove it')
        mcl = t.get("max_context_length")
        if _is_int(mcl) and mcl > limit:
            c.add((*p, "max_context_length"), f'must be at most {limit} with context_extension "{ext}"')


_CONTEXT_KEYS = ("max_context_length", "max_concurrent_calls")


def _rubric(c: Checker, name: str, t: Any) -> None:
    p: Path_ = ("rubrics", name)
    if not names.is_file_name(name):
        c.add(p, f"rubric names end up in file names and must match {names.FILE_NAME_RULE}")
    if not isinstance(t, dict):
        c.add(p, f"must be a table ([rubrics.{name}]), not {_describe(t)}")
        return

    def temperature(v: Any) -> str | None:
        if not _is_number(v) or not 0 <= v <= 2:
            return f"must be a number from 0 to 2, not {_describe(v)}"
        return None

    c.keys(
        t,
        p,
        {
            "profile": one_of(*names.RUBRIC_PROFILES),
            "max_output_tokens": positive_int,
            "temperature": temperature,
        },
        unsupported=dict.fromkeys(RUBRIC_FILE_KEYS, RUBRIC_FILES),
        required=("profile", "max_output_tokens"),
    )


def _judging(c: Checker, t: Mapping[str, Any], judges: Mapping[str, Any], rubrics: Mapping[str, Any]) -> None:
    c.keys(t, ("judging",), ("bindings",))
    bindings = c.table(t, ("judging",), "bindings")
    reported: set[tuple[str, str]] = set()
    for verifier, b in bindings.items():
        p: Path_ = ("judging", "bindings", verifier)
        if not names.is_file_name(verifier):
            c.add(p, f"verifier names end up in file names and must match {names.FILE_NAME_RULE}")
        if not isinstance(b, dict):
            c.add(p, f"must be a table with judge and rubric, not {_describe(b)}")
            continue
        c.keys(b, p, {"judge": text, "rubric": text}, required=("judge", "rubric"))
        judge, rubric = b.get("judge"), b.get("rubric")
        if isinstance(judge, str) and judge not in judges:
            c.add((*p, "judge"), f"names no [judges.{judge}]; declared judges: {_listing(judges)}")
        if isinstance(rubric, str) and rubric not in rubrics:
            c.add((*p, "rubric"), f"names no [rubrics.{rubric}]; declared rubrics: {_listing(rubrics)}")
        j = judges.get(judge) if isinstance(judge, str) else None
        r = rubrics.get(rubric) if isinstance(rubric, str) else None
        if isinstance(j, dict) and isinstance(r, dict) and (judge, rubric) not in reported:
            context, reserve = j.get("max_context_length"), r.get("max_output_tokens")
            if _is_int(context) and _is_int(reserve) and reserve >= context:
                reported.add((judge, rubric))
                c.add(
                    ("rubrics", str(rubric), "max_output_tokens"),
                    f"({reserve}) must be smaller than judges.{judge}.max_context_length ({context}), "
                    f"which judges it through judging.bindings.{format_key((verifier,))}",
                )


def _listing(table: Mapping[str, Any]) -> str:
    return ", ".join(sorted(table)) or "none"


def _data(c: Checker, t: Mapping[str, Any]) -> None:
    c.keys(t, ("data",), {"train": text, "eval": text})


def _ray(c: Checker, t: Mapping[str, Any], pools: set[str]) -> None:
    p: Path_ = ("ray",)

    def extra_args(v: Any) -> str | None:
        msg = string_list(v)
        if msg:
            return msg
        owned = [a for a in v if a.split("=", 1)[0] in PLAN_OWNED_RAY_FLAGS]
        if owned:
            return f"must not set {', '.join(owned)}: the plan and [ray] own those flags"
        return None

    c.keys(
        t,
        p,
        {
            "enabled": boolean,
            "num_cpus": non_negative_int,
            "object_store_memory": positive_int,
            "resources": lambda v: None,
            "extra_args": extra_args,
        },
    )
    resources = c.table(t, p, "resources")
    for pool, table in resources.items():
        rp: Path_ = (*p, "resources", pool)
        if pool not in pools:
            c.add(rp, f"names no [pools.{pool}]; declared pools: {', '.join(sorted(pools)) or 'none'}")
        if not isinstance(table, dict):
            c.add(rp, f"must be a table of resource = amount, not {_describe(table)}")
            continue
        for res, amount in table.items():
            if res in RAY_BUILTIN_RESOURCES:
                c.add((*rp, res), "is a built-in Ray resource set from the plan; use a custom name")
            elif not _is_number(amount) or amount < 0:
                c.add((*rp, res), f"must be a non-negative number, not {_describe(amount)}")
