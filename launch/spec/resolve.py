"""The one resolver: a spec's data (as spelled) -> the typed model of ``launch.spec.config``.

``resolve`` walks the model's field declarations, so unknown keys (with a did-you-mean), types,
bounds and required keys are checked generically, then applies the rules that span several keys
(below). It reports every problem at once, each with its full TOML key path, and never stops at
the first. Placement rules that need the whole GPU picture are ``launch.spec.plan``'s.

Rules beyond the field declarations:

* Known-but-unsupported keys fail with a specific message instead of "unknown key":
  ``judges.X.engine`` / ``backend = "vllm"`` (independent vLLM allocations), credential keys of
  judges, custom rubric files, separate evaluation pools and cross-node serving TP.
* Double scaling: ``context_extension`` is the only way to scale RoPE.
* Credentials never enter a spec: an env table entry whose name or value looks like a
  credential is refused (specs are copied to the shared filesystem as ``spec.json``).
* ``ray.extra_args`` may not set flags the agent owns (GPUs, ports, addresses, temp dir).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch.spec import keys, miles, names, slurm_directives
from launch.spec.config import (
    MAX_BINDINGS,
    MAX_JUDGES,
    MAX_NAME,
    MAX_POOLS,
    MAX_RUBRICS,
    REQUIRED,
    Binding,
    InferenceConfig,
    JudgeConfig,
    PoolConfig,
    RayConfig,
    RubricConfig,
    RunConfig,
    _frozen,
    default_of,
    key_info,
    section_info,
    spelled,
)
from launch.spec.errors import Problem, SpecError
from launch.spec.keypath import format_key
from launch.spec.load import ResolvedSpec

Path_ = tuple[str, ...]

VLLM = "independent vLLM allocations are not supported; managed judges run SGLang or the reference judge"
CREDENTIALS = "credentialed judges are not supported; use an unauthenticated endpoint and remove this key"
RUBRIC_FILES = 'custom rubric files are not supported; choose profile = "general-quality" or "general-quality-ref"'
EVAL_POOLS = "separate evaluation GPU pools are not supported; evaluation uses the rollout engines"
CROSS_NODE_TP = "cross-node serving tensor parallelism is not supported; an engine must fit within one node"

CREDENTIAL_KEYS = ("api_key", "api_key_env", "headers", "token", "password", "auth", "bearer_token", "username")
RUBRIC_FILE_KEYS = ("file", "path", "rubric_file", "template_file", "text", "prompt")
SCALING_KEYS = ("rope_scaling", "json_model_override_args")
# Flags ray start gets from the plan, from [ray] or from the agent (addresses, ports, temp dir):
# letting extra_args override them would make the readiness gate check another cluster.
AGENT_OWNED_RAY_FLAGS = (
    "--num-gpus",
    "--num-cpus",
    "--resources",
    "--object-store-memory",
    "--address",
    "--head",
    "--block",
    "--port",
    "--node-ip-address",
    "--temp-dir",
    "--node-manager-port",
    "--object-manager-port",
    "--gcs-server-port",
    "--min-worker-port",
    "--max-worker-port",
    "--worker-port-list",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
    "--ray-client-server-port",
    "--plasma-directory",
)
RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "accelerator_type")

# Credential-looking environment: a name with one of these words, or a value with a known token prefix.
CREDENTIAL_WORDS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "AUTH", "PAT"}
)
CREDENTIAL_VALUE = re.compile(
    r"^(sk-|sk_|hf_|ghp_|gho_|ghs_|github_pat_|glpat-|xox[abpr]-|AKIA[0-9A-Z]{12}|AIza|ya29\.|eyJ[\w-]+\.eyJ)"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
RUNTIME_PREFIX = "runtime:"


def looks_like_credential(name: str, value: Any) -> bool:
    words = set(re.split(r"[^A-Z0-9]+", name.upper()))
    if words & CREDENTIAL_WORDS:
        return True
    return isinstance(value, str) and bool(CREDENTIAL_VALUE.search(value))


def unknown_key_message(path: Path_, key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {format_key((*path, close[0]))}?"
    listing = ", ".join(sorted(known)) or "none"
    return f"unknown key (known keys here: {listing})"


class Checker:
    """Collects problems while walking the spec."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: Path_, message: str) -> None:
        key = format_key(path)
        if any(p.key == key for p in self.problems):
            return  # one problem per key: the first says what to change
        self.problems.append(Problem(key, message))

    def mark(self) -> int:
        return len(self.problems)

    def clean_since(self, mark: int) -> bool:
        return len(self.problems) == mark


def _where(path: Path_) -> str:
    return f"[{format_key(path)}]" if path else "the top level"


def _declared(cls: type) -> dict[str, dataclasses.Field]:
    """TOML key -> field, for the fields a user may write."""
    return {spelled(f): f for f in dataclasses.fields(cls) if key_info(f) or section_info(f)}


def _required_keys(cls: type) -> list[str]:
    return [k for k, f in _declared(cls).items() if key_info(f) and default_of(f) is REQUIRED]


def walk(
    c: Checker,
    cls: type,
    raw: Mapping[str, Any],
    path: Path_,
    *,
    mode: str | None = None,
    unsupported: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Check ``raw`` against ``cls``'s declared keys; return its constructor arguments, or None
    when this table (or one below it) has a problem. With a ``mode``, keys that mode does not accept
    must be in ``unsupported`` (with their message) or they are reported as unknown."""
    start = c.mark()
    fields = _declared(cls)
    unsupported = unsupported or {}
    # A judge's keys depend on its mode; without a (valid) mode every key a judge may carry is accepted.
    accepted = {
        k
        for k, f in fields.items()
        if mode is None or not (key_info(f) and key_info(f).modes) or mode in key_info(f).modes
    }
    for k in raw:
        if k in unsupported:
            c.add((*path, k), unsupported[k])
        elif k not in accepted:
            c.add((*path, k), unknown_key_message(path, k, sorted(accepted)))
    kwargs: dict[str, Any] = {}
    for k, f in fields.items():
        if k not in accepted or k in unsupported:
            continue
        info = key_info(f)
        if info is not None:
            if k not in raw:
                if default_of(f) is REQUIRED:
                    c.add((*path, k), f"is required; add it to {_where(path)}")
                continue
            msg = info.type.check(raw[k])
            if msg:
                c.add((*path, k), msg)
            else:
                kwargs[f.name] = _frozen(raw[k])
            continue
        sub = raw.get(k, {})
        if not isinstance(sub, dict):
            c.add((*path, k), f"must be a table ([{format_key((*path, k))}]), not {keys.describe(sub)}")
            continue
        sub_cls = f.metadata["cls"]
        if section_info(f).named:
            kwargs[f.name] = _named(c, sub_cls, sub, (*path, k))
            continue
        required = _required_keys(sub_cls)
        if k not in raw and required:
            c.add((*path, k), f"is required: add [{format_key((*path, k))}] with {', '.join(required)}")
            continue
        built = walk(c, sub_cls, sub, (*path, k), unsupported=UNSUPPORTED.get(sub_cls))
        if built is not None:
            kwargs[f.name] = sub_cls(**built)
    return kwargs if c.clean_since(start) else None


def _named(c: Checker, cls: type, table: Mapping[str, Any], path: Path_) -> Mapping[str, Any]:
    """A ``[section.NAME]`` table: names become file names; entries are checked by their kind."""
    limit = NAMED_LIMITS[cls]
    if len(table) > limit:
        c.add(path, f"has {len(table)} entries; at most {limit} are supported")
        return {}
    out: dict[str, Any] = {}
    for name, entry in table.items():
        p = (*path, name)
        if not names.is_file_name(name) or len(name) > MAX_NAME:
            what = path[-1].rstrip("s") if path[-1] != "bindings" else "verifier"
            c.add(p, f"{what} names end up in file names: use {names.FILE_NAME_RULE}, at most {MAX_NAME} characters")
        if not isinstance(entry, dict):
            c.add(p, f"must be a table ([{format_key(p)}]), not {keys.describe(entry)}")
            continue
        built = (
            _judge(c, name, entry, p)
            if cls is JudgeConfig
            else walk(c, cls, entry, p, unsupported=UNSUPPORTED.get(cls))
        )
        if built is not None:
            key_field = "verifier" if cls is Binding else "name"
            out[name] = cls(**{key_field: name, **built})
    return _frozen(out)


NAMED_LIMITS = {JudgeConfig: MAX_JUDGES, RubricConfig: MAX_RUBRICS, Binding: MAX_BINDINGS, PoolConfig: MAX_POOLS}


def _judge(c: Checker, name: str, t: Mapping[str, Any], p: Path_) -> dict[str, Any] | None:
    start = c.mark()
    mode = t.get("mode")
    unsupported: dict[str, str] = dict.fromkeys(CREDENTIAL_KEYS, CREDENTIALS)
    unsupported["engine"] = VLLM
    unsupported["nnodes"] = CROSS_NODE_TP
    if mode not in names.JUDGE_MODES:
        c.add(
            (*p, "mode"),
            'is required: mode = "managed" (started by the agent) or "external" (endpoint)'
            if mode is None
            else f'must be "managed" or "external", not {keys.describe(mode)}',
        )
        mode = None
    if mode == "external":
        for k, f in _declared(JudgeConfig).items():
            if key_info(f).modes == ("managed",):
                unsupported[k] = (
                    "is not allowed for an external judge: its serving configuration and placement are "
                    "owned by the endpoint; remove it"
                )
        unsupported["cuda_graphs"] = (
            "external endpoints reject cuda_graphs, even when false: their serving configuration is "
            "externally owned; remove the key"
        )
        for k in SCALING_KEYS:
            unsupported[k] = "is not allowed for an external judge; remove it"
        built = walk(c, JudgeConfig, t, p, mode="external", unsupported=unsupported)
        if "endpoint" not in t:
            c.add((*p, "endpoint"), "is required for an external judge; add it to " + _where(p))
        return built if c.clean_since(start) else None
    unsupported["endpoint"] = 'is only for mode = "external"; a managed judge gets its endpoint at run time'
    for k in SCALING_KEYS:
        unsupported[k] = (
            "would scale RoPE twice: context_extension already applies YaRN; remove this key"
            if "context_extension" in t
            else 'is not supported; long context is set with context_extension = "qwen3-yarn-128k"'
        )
    backend = t.get("backend", "sglang")
    if backend == "vllm":
        unsupported["backend"] = VLLM
    built = walk(c, JudgeConfig, t, p, mode="managed" if mode else None, unsupported=unsupported)
    if mode is None:
        return None
    required = []
    if backend != "reference":
        # A real server needs immutable, pre-staged weights; the reference judge has none.
        required += ["revision", "prepared_dir"]
    for k in required:
        if k not in t:
            c.add(
                (*p, k),
                f"is required for a managed {backend if isinstance(backend, str) else ''} judge; "
                f"add it to {_where(p)}".replace("  ", " "),
            )
    gpus, tp = t.get("gpus"), t.get("tensor_parallel_size")
    if keys.is_int(gpus) and keys.is_int(tp) and gpus != tp:
        c.add((*p, "tensor_parallel_size"), f"must equal gpus ({gpus}): one server spans its GPUs, not {tp}")
    ext = t.get("context_extension")
    if isinstance(ext, str) and ext in names.CONTEXT_EXTENSIONS:
        model, limit = names.CONTEXT_EXTENSIONS[ext]
        if t.get("model") != model:
            c.add((*p, "context_extension"), f'"{ext}" is only supported for model "{model}"; remove it')
        mcl = t.get("max_context_length")
        if keys.is_int(mcl) and mcl > limit:
            c.add((*p, "max_context_length"), f'must be at most {limit} with context_extension "{ext}"')
    return built if c.clean_since(start) else None


RAY_NODE_POOL = (
    "is singular, but a Ray cluster spans pools: write node_pools = [...] (a list; [] starts a "
    "single-node cluster on the driver's node)"
)


# Known-but-unsupported keys per table, with what to do instead (reported instead of "unknown key").
UNSUPPORTED: dict[type, Mapping[str, str]] = {
    RubricConfig: dict.fromkeys(RUBRIC_FILE_KEYS, RUBRIC_FILES),
    InferenceConfig: {"eval_gpus": EVAL_POOLS, "eval_tensor_parallel_size": EVAL_POOLS, "nnodes": CROSS_NODE_TP},
    RayConfig: {"node_pool": RAY_NODE_POOL},
}


# --- rules across keys ------------------------------------------------------------------------


def check_env(c: Checker, env: Any, path: Path_) -> None:
    """An environment table: valid names, string values, nothing the agent sets, no credentials."""
    if not isinstance(env, dict):
        return
    for k, value in env.items():
        p = (*path, k)
        if not names.ENV_NAME.fullmatch(k):
            c.add(p, "is not a valid environment variable name")
        elif k == "CUDA_VISIBLE_DEVICES":
            c.add(p, "is set by the agent from the plan; remove it")
        elif looks_like_credential(k, value) and not (isinstance(value, str) and value.startswith(RUNTIME_PREFIX)):
            c.add(
                p,
                "looks like a credential, and a spec is copied to the shared filesystem (spec.json); remove it "
                "and pass it through the scheduler's secrets or the agent's own environment, which reaches the "
                "driver without being recorded",
            )
        if not isinstance(value, str):
            c.add(p, f"must be a string (quote it), not {keys.describe(value)}")
        elif value.startswith(RUNTIME_PREFIX) and not names.ENV_NAME.fullmatch(value[len(RUNTIME_PREFIX) :]):
            c.add(p, f'"{RUNTIME_PREFIX}VAR" must name an environment variable, not {value!r}')


def _cross_checks(c: Checker, d: Mapping[str, Any]) -> None:
    """Rules that relate keys of different tables. Only reads values whose own checks passed."""

    def table(*path: str) -> Mapping[str, Any]:
        node: Any = d
        for part in path:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}

    launch = table("launch")
    hosts = launch.get("hostnames")
    if isinstance(hosts, list) and len(set(map(str, hosts))) != len(hosts):
        c.add(("launch", "hostnames"), "lists a host more than once; remove the duplicates")
    node_gpus = launch.get("node_gpus", 8)
    if launch.get("backend") == "beaker" and keys.is_int(node_gpus) and node_gpus != 8:
        c.add(("launch", "node_gpus"), "Beaker replica groups need full eight-GPU nodes; set node_gpus = 8")
    coord = table("launch", "coordination")
    hb_i, hb_t = coord.get("heartbeat_interval", 2.0), coord.get("heartbeat_timeout", 120)
    if keys.is_number(hb_i) and keys.is_number(hb_t) and hb_i > 0 and hb_t < 3 * hb_i:
        c.add(
            ("launch", "coordination", "heartbeat_interval"),
            f"must be smaller than heartbeat_timeout / 3 ({hb_t / 3:g}): a peer must miss three heartbeats "
            "before it is called silent, else every pause looks like a death",
        )

    per_replica = launch.get("gpus_per_replica", 8)
    pools = table("pools")
    cpu_pools = [n for n, p in pools.items() if isinstance(p, dict) and p.get("gpus_per_node") == 0]
    for pname, pool in pools.items():
        gpn = pool.get("gpus_per_node") if isinstance(pool, dict) else None
        # One allocation has one node size; gpus_per_replica is that size (0: a CPU pool).
        if keys.is_int(gpn) and keys.is_int(per_replica) and gpn not in (0, per_replica):
            c.add(
                ("pools", pname, "gpus_per_node"),
                f"is {gpn} but launch.gpus_per_replica is {per_replica}: pools share one allocation, "
                "so every pool and the replica size must agree (or be 0: a CPU pool)",
            )
    if cpu_pools and len(cpu_pools) != len(pools):
        # One allocation has one node shape: a job mixing GPU and CPU nodes would be a heterogeneous job.
        c.add(
            ("pools", cpu_pools[0], "gpus_per_node"),
            "is 0 (a CPU pool) but other pools have GPUs: one allocation has one node shape; make every pool "
            "a CPU pool or give this one launch.gpus_per_replica GPUs",
        )
    trainer, inference = table("trainer"), table("inference")
    no_trainer = trainer.get("nodes") == 0
    if no_trainer and not pools:
        c.add(("trainer", "nodes"), "is 0 (a judge-only job) but no [pools.NAME] states the job's nodes; declare one")
    if no_trainer and keys.is_int(inference.get("gpus")) and inference.get("gpus") != 0:
        c.add(("inference", "gpus"), "must be 0 when trainer.nodes = 0: a judge-only job has no rollout")
    if cpu_pools and len(cpu_pools) == len(pools):
        if not no_trainer:
            c.add(("trainer", "nodes"), "must be 0 when every pool is a CPU pool (gpus_per_node = 0): no GPU work")
        for jname, j in table("judges").items():
            if isinstance(j, dict) and j.get("mode") == "managed" and _is_bound(jname, table("judging", "bindings")):
                c.add(
                    ("judges", jname, "mode"),
                    "is managed but every pool is a CPU pool: a managed judge needs GPUs; use an external judge",
                )

    directives = table("launch", "slurm").get("directives")
    if isinstance(directives, list) and all(isinstance(d, str) for d in directives):
        for i, msg in slurm_directives.problems(directives):
            c.add(("launch", "slurm", "directives", str(i)), msg)

    check_env(c, table("driver").get("env"), ("driver", "env"))
    check_env(c, launch.get("env"), ("launch", "env"))
    secrets = launch.get("secrets")
    if isinstance(secrets, dict):
        for k in secrets:
            if not names.ENV_NAME.fullmatch(k):
                c.add(("launch", "secrets", k), "is not a valid environment variable name")
            elif isinstance(launch.get("env"), dict) and k in launch["env"]:
                c.add(("launch", "secrets", k), "is also in launch.env; a variable is either plain or a secret")

    judges = table("judges")
    for jname, j in judges.items():
        if not isinstance(j, dict) or "node_pool" not in j or j.get("mode") == "external":
            continue
        pool = j.get("node_pool")
        if not isinstance(pool, str) or pool not in pools:
            declared = ", ".join(pools) or "none declared"
            c.add(
                ("judges", jname, "node_pool"), f"must name a [pools.NAME] table (declared: {declared}), not {pool!r}"
            )

    rubrics = table("rubrics")
    reported: set[tuple[str, str]] = set()
    for verifier, b in table("judging", "bindings").items():
        if not isinstance(b, dict):
            continue
        p: Path_ = ("judging", "bindings", verifier)
        judge, rubric = b.get("judge"), b.get("rubric")
        if isinstance(judge, str) and judge not in judges:
            c.add((*p, "judge"), f"names no [judges.{judge}]; declared judges: {_listing(judges)}")
        if isinstance(rubric, str) and rubric not in rubrics:
            c.add((*p, "rubric"), f"names no [rubrics.{rubric}]; declared rubrics: {_listing(rubrics)}")
        j = judges.get(judge) if isinstance(judge, str) else None
        r = rubrics.get(rubric) if isinstance(rubric, str) else None
        if isinstance(j, dict) and isinstance(r, dict) and (judge, rubric) not in reported:
            context, reserve = j.get("max_context_length"), r.get("max_output_tokens")
            if keys.is_int(context) and keys.is_int(reserve) and reserve >= context:
                reported.add((judge, rubric))
                c.add(
                    ("rubrics", str(rubric), "max_output_tokens"),
                    f"({reserve}) must be smaller than judges.{judge}.max_context_length ({context}), "
                    f"which judges it through judging.bindings.{format_key((verifier,))}",
                )

    ray = table("ray")
    extra = ray.get("extra_args")
    if isinstance(extra, list):
        owned = [a for a in extra if isinstance(a, str) and a.split("=", 1)[0] in AGENT_OWNED_RAY_FLAGS]
        if owned:
            c.add(
                ("ray", "extra_args"),
                f"must not set {', '.join(owned)}: the agent owns GPUs, ports, addresses and temp dirs of "
                "ray start (the readiness gate checks the cluster it planned)",
            )
    spanned = ray.get("node_pools")
    if isinstance(spanned, list):
        for i, pool in enumerate(spanned):
            if isinstance(pool, str) and pool not in pools:
                c.add(("ray", "node_pools"), f"names no [pools.{pool}]; declared pools: {', '.join(pools) or 'none'}")
            elif pool in spanned[:i]:
                c.add(("ray", "node_pools"), f"lists pool {pool} twice")
    for pool, res in table("ray", "resources").items():
        rp: Path_ = ("ray", "resources", pool)
        if pool not in pools:
            c.add(rp, f"names no [pools.{pool}]; declared pools: {', '.join(pools) or 'none'}")
        elif isinstance(spanned, list) and pool not in spanned:
            c.add(rp, f"pool {pool} is not in ray.node_pools ({', '.join(map(str, spanned)) or 'empty'}): add it there")
        if not isinstance(res, dict):
            c.add(rp, f"must be a table of resource = amount, not {keys.describe(res)}")
            continue
        for name, amount in res.items():
            if name in RAY_BUILTIN_RESOURCES:
                c.add((*rp, name), "is a built-in Ray resource set from the plan; use a custom name")
            elif not keys.is_number(amount) or not 0 <= amount <= 1e12:
                c.add((*rp, name), f"must be a non-negative number, not {keys.describe(amount)}")


def _is_bound(judge: str, bindings: Mapping[str, Any]) -> bool:
    return any(isinstance(b, dict) and b.get("judge") == judge for b in bindings.values())


def _listing(table: Mapping[str, Any]) -> str:
    return ", ".join(sorted(table)) or "none"


def _check_spelled(data: Mapping[str, Any]) -> tuple[list[Problem], dict[str, Any] | None]:
    c = Checker()
    built = walk(c, RunConfig, data, ())
    _cross_checks(c, data)
    return c.problems, (built if not c.problems else None)


@dataclass(frozen=True)
class Checked:
    """The outcome of checking a spec's data: problems in the user's spelling, or the model's arguments."""

    problems: list[Problem]
    built: dict[str, Any] | None
    translation: miles.Translation | None = None

    def user_problems(self, problems: list[Problem]) -> list[Problem]:
        """``problems`` (found on this project's spelling) as the user spelled the keys."""
        return [self.translation.user_problem(p) for p in problems] if self.translation else problems


def check(data: Mapping[str, Any], overrides: tuple[str, ...] = ()) -> Checked:
    """Every key-level problem of ``data`` in either spelling, and the model's arguments when there is none."""
    if not isinstance(data, Mapping):
        return Checked([Problem("spec", f"must be a table, not {keys.describe(data)}")], None)
    if miles.detect(data) != miles.FORMAT_MILES:
        return Checked(*_check_spelled(data))
    translation = miles.translate(data, overrides)
    problems, built = _check_spelled(translation.data)
    out = Checked([*translation.problems], None, translation)
    # A key the translation already refused (and dropped) is not reported a second time as missing.
    seen = {p.key for p in translation.problems}
    out.problems.extend(p for p in out.user_problems(problems) if p.key not in seen)
    if built is not None and not out.problems:
        built.update(source_format=miles.FORMAT_MILES, trainer_sections=translation.trainer_sections)
        return Checked(out.problems, built, translation)
    return out


def check_spec(data: Mapping[str, Any]) -> list[Problem]:
    """Every key-level problem of a spec's data (types, bounds, names, references, unsupported keys)."""
    return check(data).problems


def resolve(resolved: ResolvedSpec) -> RunConfig:
    """The typed model of ``resolved``. Raises SpecError with every key-level problem."""
    checked = check(resolved.data, resolved.overrides)
    if checked.problems or checked.built is None:
        raise SpecError(checked.problems)
    return RunConfig(spec=resolved, **checked.built)
