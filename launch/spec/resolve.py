"""The one resolver: a spec's data (as spelled) -> the typed model of ``launch.spec.config``.

``resolve`` walks the model's field declarations, so unknown keys (with a did-you-mean), types,
bounds and required keys are checked generically, then applies the rules that span several keys
(below) to the typed sections. It reports every problem at once, each with its full TOML key path,
and never stops at the first. Placement rules that need the whole GPU picture are
``launch.spec.plan``'s.

The model is passed in (``RunConfig.from_spec`` calls ``resolve(cls, ...)``), so the model can depend
on its resolver without an import cycle; the tables it reads are ``launch.spec.sections``'.

Rules beyond the field declarations:

* Known-but-unsupported keys fail with a specific message instead of "unknown key":
  ``judges.X.engine`` / ``backend = "vllm"`` (independent vLLM allocations), credential keys of
  judges, rubric text under another key than template_file, separate evaluation pools and cross-node
  serving TP.
* A rubric is a ``profile`` or a ``template_file`` (with its ``template_sha256``), never both.
* Double scaling: ``context_extension`` is the only way to scale RoPE.
* Credentials never enter a spec: an env table entry whose name or value looks like a
  credential is refused (specs are copied to the shared filesystem as ``spec.json``).
* ``ray.extra_args`` may not set flags the agent owns (GPUs, ports, addresses, temp dir).
* Rules across keys read the typed sections (so every default is the model's): a rule runs when
  the sections it relates resolved without a problem of their own.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from launch.spec import _keys as keys
from launch.spec import _seed_layout as seed_layout
from launch.spec import _slurm_directives as slurm_directives
from launch.spec import names
from launch.spec._fields import REQUIRED, default_of, frozen, key_info, section_info, spelled
from launch.spec._formats import FORMAT_GYM, FORMAT_NEMO_GYM, source_format
from launch.spec.errors import Problem, SpecError
from launch.spec.keypath import format_key
from launch.spec.load import ResolvedSpec
from launch.spec.sections import (
    DriverConfig,
    InferenceConfig,
    JudgeConfig,
    JudgingConfig,
    LaunchConfig,
    PolicyConfig,
    PoolConfig,
    RayConfig,
    RubricConfig,
    TrainerConfig,
)
from schemas import DriverEnv
from schemas.credentials import CREDENTIAL_VALUE, CREDENTIAL_WORDS, argv_credentials, looks_like_credential

if TYPE_CHECKING:
    from launch.spec._miles import Translation

__all__ = [
    "AGENT_OWNED_RAY_FLAGS",
    "ARGV_FIX",
    "BEAKER_NODE_GPUS",
    "CREDENTIALS",
    "CREDENTIAL_KEYS",
    "CREDENTIAL_VALUE",
    "CREDENTIAL_WORDS",
    "CROSS_NODE_TP",
    "Checked",
    "Checker",
    "EVAL_POOLS",
    "JUDGES",
    "MILES_LAUNCHER_ENV",
    "Model",
    "NO_ATOMIC_RENAME",
    "Path_",
    "RAY_BUILTIN_RESOURCES",
    "RAY_NODE_POOL",
    "RUBRIC_FILES",
    "RUBRIC_FILE_KEYS",
    "RUNTIME_PREFIX",
    "SCALING_KEYS",
    "SKYPILOT_BUCKET_KEYS",
    "SKYPILOT_OWNED",
    "UNSUPPORTED",
    "VLLM",
    "Service",
    "check",
    "check_argv",
    "check_env",
    "looks_like_credential",
    "resolve",
    "service_rules",
    "unknown_key_message",
    "walk",
]

# The resolved model (launch.spec.config.RunConfig), passed in by the model itself.
Model = TypeVar("Model")

Path_ = tuple[str, ...]

VLLM = 'a judge\'s engine is its backend: backend = "vllm" (or "sglang", "reference"); remove this key'
CREDENTIALS = "credentialed judges are not supported; use an unauthenticated endpoint and remove this key"
RUBRIC_FILES = (
    'your own rubric text is named by template_file = "PATH" (with template_sha256), or choose profile = '
    '"general-quality" or "general-quality-ref"'
)
EVAL_POOLS = "separate evaluation GPU pools are not supported; evaluation uses the rollout engines"
POLICY_EXTERNAL = (
    'must be "managed": the agents start the policy server; an external one is reached through the driver\'s own '
    "configuration ([driver] env)"
)
CROSS_NODE_TP = "cross-node serving tensor parallelism is not supported; an engine must fit within one node"

CREDENTIAL_KEYS = ("api_key", "api_key_env", "headers", "token", "password", "auth", "bearer_token", "username")
RUBRIC_FILE_KEYS = ("file", "path", "rubric_file", "template", "text", "prompt")
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

RUNTIME_PREFIX = "runtime:"
ARGV_FIX = (
    "a spec is copied to the shared filesystem (spec.json, run-file.toml); "
    'remove it and pass it by reference: "${runtime:NAME}" is NAME of the job\'s environment (or of '
    "[launch] secrets), substituted only when the agent starts the process"
)


def unknown_key_message(path: Path_, key: str, known: list[str]) -> str:
    import difflib  # only for a mistake: the audit and every agent import this module

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {format_key((*path, close[0]))}?"
    listing = ", ".join(sorted(known)) or "none"
    return f"unknown key (known keys here: {listing})"


class Checker:
    """Collects problems while walking the spec. ``staged_weights``: every managed engine serves pinned,
    staged weights (revision, prepared_dir); False for a NeMo Gym config, whose vLLM loads ``model`` itself."""

    def __init__(self, *, staged_weights: bool = True) -> None:
        self.problems: list[Problem] = []
        self.staged_weights = staged_weights

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


def _declared(cls: type) -> dict[str, dataclasses.Field[Any]]:
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
    kwargs = _walk(c, cls, raw, path, mode, unsupported or {})
    return kwargs if c.clean_since(start) else None


def _walk(
    c: Checker, cls: type, raw: Mapping[str, Any], path: Path_, mode: str | None, unsupported: Mapping[str, str]
) -> dict[str, Any]:
    """``walk``'s arguments of every key and sub-table that resolved, even when another did not."""
    fields = _declared(cls)
    # A judge's keys depend on its mode; without a (valid) mode every key a judge may carry is accepted.
    accepted = {k for k, f in fields.items() if mode is None or _accepts(f, mode)}
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
                kwargs[f.name] = frozen(raw[k])
            continue
        sub = raw.get(k, {})
        if not isinstance(sub, dict):
            c.add((*path, k), f"must be a table ([{format_key((*path, k))}]), not {keys.describe(sub)}")
            continue
        sub_cls = f.metadata["cls"]
        sinfo = section_info(f)
        if sinfo is not None and sinfo.named:
            entries = _named(c, sub_cls, sub, (*path, k), sinfo.limit)
            if entries is not None:
                kwargs[f.name] = entries
            continue
        required = _required_keys(sub_cls)
        if k not in raw and required:
            c.add((*path, k), f"is required: add [{format_key((*path, k))}] with {', '.join(required)}")
            continue
        built = walk(c, sub_cls, sub, (*path, k), unsupported=UNSUPPORTED.get((*path, k)))
        if built is not None:
            kwargs[f.name] = sub_cls(**built)
    return kwargs


def _accepts(f: dataclasses.Field[Any], mode: str) -> bool:
    info = key_info(f)
    return not (info and info.modes) or mode in info.modes


def _entry_name_field(cls: type) -> str:
    """The field of a named entry that holds its name (``name``; a binding's ``verifier``)."""
    return next(f.name for f in dataclasses.fields(cls) if not key_info(f) and not section_info(f))


def _named(c: Checker, cls: type, table: Mapping[str, Any], path: Path_, limit: int) -> Mapping[str, Any] | None:
    """A ``[section.NAME]`` table: names become file names; entries are checked by their kind.
    None when an entry (or its name) has a problem."""
    start = c.mark()
    if len(table) > limit:
        c.add(path, f"has {len(table)} entries; at most {limit} are supported")
        return None
    out: dict[str, Any] = {}
    for name, entry in table.items():
        p = (*path, name)
        if not names.is_file_name(name) or len(name) > names.MAX_NAME:
            what = path[-1].rstrip("s") if path[-1] != "bindings" else "verifier"
            c.add(
                p,
                f"{what} names end up in file names: use {names.FILE_NAME_RULE}, at most {names.MAX_NAME} characters",
            )
        if not isinstance(entry, dict):
            c.add(p, f"must be a table ([{format_key(p)}]), not {keys.describe(entry)}")
            continue
        built = (
            _judge(c, cls, name, entry, p)
            if path == JUDGES
            else walk(c, cls, entry, p, unsupported=UNSUPPORTED.get((*path, "*")))
        )
        if built is not None:
            out[name] = cls(**{_entry_name_field(cls): name, **built})
    return frozen(out) if c.clean_since(start) else None


JUDGES: Path_ = ("judges",)


def _judge(c: Checker, cls: type[JudgeConfig], name: str, t: Mapping[str, Any], p: Path_) -> dict[str, Any] | None:
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
        for k, f in _declared(cls).items():
            info = key_info(f)
            if info is not None and info.modes == ("managed",):
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
        built = walk(c, cls, t, p, mode="external", unsupported=unsupported)
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
    built = walk(c, cls, t, p, mode="managed" if mode else None, unsupported=unsupported)
    if mode is None or built is None:
        return None
    check_argv(c, built.get("extra_args", ()), (*p, "extra_args"))
    judge = cls(name=name, **built)
    for k, message in _managed_judge_problems(judge, p, staged_weights=c.staged_weights):
        c.add((*p, *k.split(".")), message)
    service_rules(c, judge, p)
    return built if c.clean_since(start) else None


WEIGHTS_IN_TOML = (
    "is a NeMo Gym config's unpinned model (what vLLM downloads as it starts); a TOML spec serves pinned, "
    "staged weights: remove it and set revision and prepared_dir"
)


def _weights_problems(
    svc: JudgeConfig | PolicyConfig, what: str, p: Path_, *, staged: bool
) -> Iterator[tuple[str, str]]:
    """A managed engine's weights: pinned and staged (revision, prepared_dir) unless ``staged`` is False
    (a NeMo Gym config's service, which may name what the engine loads as given: weights)."""
    if staged:
        if svc.weights is not None:
            yield "weights", WEIGHTS_IN_TOML
        for k in ("revision", "prepared_dir"):
            if getattr(svc, k) is None:
                yield k, f"is required for {what}; add it to {_where(p)}"
    elif svc.prepared_dir is not None and svc.weights is not None:
        yield "weights", "is what the engine loads without prepared_dir; set one of the two"
    elif svc.prepared_dir is None and svc.weights is None:
        yield "weights", f"or prepared_dir is required for {what}: the weights it loads"


def _managed_judge_problems(j: JudgeConfig, p: Path_, *, staged_weights: bool) -> Iterator[tuple[str, str]]:
    """Rules across a managed judge's own keys, on its resolved (defaulted) values."""
    if j.backend != "reference":
        # A real server needs weights; a TOML spec's are immutable and pre-staged. The reference judge has none.
        yield from _weights_problems(j, f"a managed {j.backend} judge", p, staged=staged_weights)
    elif j.weights is not None:
        yield "weights", "is for an sglang or vllm server; the reference judge loads none: remove it"
    if j.backend in ("sglang", "vllm"):
        # The engines' command builders load for a spec with such a judge or a policy only.
        from launch.spec.policy_argv import owned_flags
        from launch.spec.vllm_argv import owned_flag_problems

        for i, message in owned_flag_problems(j.extra_args, owned_flags(j.backend)):
            yield f"extra_args.{i}", message
    elif j.extra_args:
        yield "extra_args", f"is for an sglang or vllm server; the {j.backend} judge takes none: remove it"
    if j.tensor_parallel_size != j.gpus:
        tp = j.tensor_parallel_size
        yield "tensor_parallel_size", f"must equal gpus ({j.gpus}): one server spans its GPUs, not {tp}"
    ext = j.context_extension
    if ext is not None:
        model, limit = names.CONTEXT_EXTENSIONS[ext]
        if j.model != model:
            yield "context_extension", f'"{ext}" is only supported for model "{model}"; remove it'
        if j.max_context_length > limit:
            yield "max_context_length", f'must be at most {limit} with context_extension "{ext}"'


RAY_HEALTH = (
    "is a server's health check; a Ray cluster's is the agents' own: the head's node waits for the cluster "
    "and workers wait for the head's GCS to answer before joining; remove it"
)
RAY_NODE_POOL = (
    "is singular, but a Ray cluster spans pools: write node_pools = [...] (a list; [] starts a "
    "single-node cluster on the driver's node)"
)


# Known-but-unsupported keys per table ("*": every entry of a named table), with what to do
# instead (reported instead of "unknown key").
# A SkyPilot task's fields that gym-launch writes itself, spelled as SkyPilot spells them, with the key
# of ours that sets each; and the bucket mounts a run directory cannot live on.
SKYPILOT_OWNED = {
    "num_nodes": "is the plan's replica count (the trainer, rollout and pool nodes); gym-launch writes it",
    "run": "is gym-agent's command, written by gym-launch; the driver's command is [driver] command",
    "envs": "is written from [launch] env (plus the run spec the agents load); set variables there",
    "secrets": "is written from [launch] secrets (a SkyPilot secret of the same name); set them there",
    "name": "is the run's name (top-level name); set it there",
    "num_gpus": "is the plan's GPUs per node; give only the type in accelerators",
    "volumes": "is the run directory's mount: use [launch.skypilot.mount] path with volume or host_path",
    "file_mounts": "would copy or bucket-mount files; the run directory is [launch.skypilot.mount] (a volume or "
    "host path): object-store mounts have no atomic rename, which every run-directory record relies on",
    "workdir": "is not synced: the image (launch.skypilot.image) or setup brings the code the driver runs",
    "max_restarts_on_errors": "is [launch] max_retries: SkyPilot restarts a failed managed job that many times "
    "and the agents count the same attempts",
    "job_recovery": "is written from [launch] max_retries (max_restarts_on_errors) and recovery (the strategy)",
    "cloud": 'is part of infra: write infra = "aws" (or "aws/REGION", "k8s/CONTEXT")',
    "region": 'is part of infra: write infra = "CLOUD/REGION"',
    "zone": 'is part of infra: write infra = "CLOUD/REGION/ZONE"',
    "image_id": 'is image: write image = "registry/name:tag" (rendered as docker:IMAGE)',
    "kubernetes_context": 'is part of infra: write infra = "k8s/CONTEXT"',
}
NO_ATOMIC_RENAME = (
    "is refused: a bucket mount (S3, GCS, R2, Azure Blob, ... through SkyPilot's MOUNT, MOUNT_CACHED or COPY) "
    "has no atomic rename, and every record of the run directory is written to a temporary name and renamed "
    "into place, which the agents' coordination relies on; mount a POSIX shared filesystem instead (volume: a "
    "ReadWriteMany PVC or a network volume; host_path on Slurm)"
)
SKYPILOT_BUCKET_KEYS = ("bucket", "source", "store")

UNSUPPORTED: dict[Path_, Mapping[str, str]] = {
    ("launch", "skypilot"): SKYPILOT_OWNED,
    ("launch", "skypilot", "mount"): dict.fromkeys(SKYPILOT_BUCKET_KEYS, NO_ATOMIC_RENAME),
    ("rubrics", "*"): dict.fromkeys(RUBRIC_FILE_KEYS, RUBRIC_FILES),
    ("inference",): {"eval_gpus": EVAL_POOLS, "eval_tensor_parallel_size": EVAL_POOLS, "nnodes": CROSS_NODE_TP},
    ("ray",): {"node_pool": RAY_NODE_POOL, **dict.fromkeys(("health_path", "health_timeout"), RAY_HEALTH)},
    ("policy",): {
        **dict.fromkeys(CREDENTIAL_KEYS, CREDENTIALS),
        "endpoint": POLICY_EXTERNAL,
        "gpus": "is tensor_parallel_size for the policy: one engine over that many GPUs",
        "nnodes": "follows from tensor_parallel_size: a policy larger than a node spans whole nodes of its pool",
    },
}


# --- rules across keys ------------------------------------------------------------------------

# Beaker's replica groups are whole nodes of eight GPUs (a fact of Beaker, not a default).
BEAKER_NODE_GPUS = 8


# What the agents hand the driver and every node's Ray as the MILES launcher would (schemas.DriverEnv).
MILES_LAUNCHER_ENV = frozenset(
    {
        DriverEnv.MILES_JUDGE_REGISTRY,
        DriverEnv.MILES_REPLICA_RANK,
        DriverEnv.MILES_REPLICA_COUNT,
        DriverEnv.RAY_NODE_IP_ADDRESS,
    }
)


def check_env(c: Checker, env: Mapping[str, Any], path: Path_) -> None:
    """An environment table: valid names, string values, nothing the agent sets, no credentials."""
    for k, value in env.items():
        p = (*path, k)
        if not names.ENV_NAME.fullmatch(k):
            c.add(p, "is not a valid environment variable name")
        elif k == "CUDA_VISIBLE_DEVICES":
            c.add(p, "is set by the agent from the plan; remove it")
        elif k in MILES_LAUNCHER_ENV:
            c.add(p, "is set by the agent, as open-instruct's MILES launcher sets it for its trainer; remove it")
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


_HOW = {
    "flag": "the value of a credential flag",
    "pair": "a credential as NAME=VALUE",
    "value": "a token",
}


class Service(Protocol):
    """A service's own process keys (seed 001): [policy], [judges.NAME] and [ray] declare them."""

    @property
    def container(self) -> str | None: ...
    @property
    def container_mounts(self) -> tuple[str, ...]: ...
    @property
    def pre_command(self) -> str | None: ...
    @property
    def env(self) -> Mapping[str, str]: ...


def service_rules(c: Checker, svc: Service, path: Path_) -> None:
    """A service's environment and pre_command hold no credential; mounts go into a container."""
    check_env(c, svc.env, (*path, "env"))
    if svc.pre_command is not None:
        for i, how in argv_credentials(_command_words(svc.pre_command)):
            c.add(
                (*path, "pre_command"),
                f"word {i + 1} is {_HOW[how]}, and a spec is copied to the shared filesystem (spec.json); remove "
                "it and read it from the job's environment in the shell text ($NAME)",
            )
    if svc.container_mounts and svc.container is None:
        c.add(
            (*path, "container_mounts"),
            'mounts into the service\'s container, and it has none: add container = "IMAGE" or remove them',
        )


def check_argv(c: Checker, argv: Sequence[str], path: Path_) -> None:
    """A command line the spec carries: no literal credential, named by its index (never its value)."""
    for i, how in argv_credentials(argv):
        c.add((*path, str(i)), f"is {_HOW[how]}, and {ARGV_FIX}")


def _command_words(command: tuple[str, ...] | str) -> tuple[str, ...]:
    """An argv as given, or a shell string's words (as the shell would split it, near enough)."""
    if not isinstance(command, str):
        return command
    try:
        return tuple(shlex.split(command))
    except ValueError:
        return tuple(command.split())


def _cross_checks(c: Checker, sections: Mapping[str, Any]) -> None:
    """Rules that relate keys of different tables, on the typed sections that resolved cleanly
    (a section with a problem of its own is left out: its rules wait until that is fixed)."""
    launch: LaunchConfig | None = sections.get("launch")
    trainer: TrainerConfig | None = sections.get("trainer")
    inference: InferenceConfig | None = sections.get("inference")
    driver: DriverConfig | None = sections.get("driver")
    judges: Mapping[str, JudgeConfig] | None = sections.get("judges")
    rubrics: Mapping[str, RubricConfig] | None = sections.get("rubrics")
    judging: JudgingConfig | None = sections.get("judging")
    pools: Mapping[str, PoolConfig] | None = sections.get("pools")
    ray: RayConfig | None = sections.get("ray")
    policy: PolicyConfig | None = sections.get("policy")

    if launch is not None:
        _launch_rules(c, launch)
    if launch is not None and pools is not None:
        _pool_size_rules(c, launch, pools, trainer, inference, judges, policy)
    if pools is not None:
        _pool_shape_rules(c, pools, trainer, inference, judges, judging, policy)
    if launch is not None:
        _slurm_directive_rules(c, launch)
    if driver is not None:
        _driver_rules(c, driver)
    if driver is not None and inference is not None:
        _refresh_rules(c, driver, inference)
    if launch is not None:
        _launch_env_rules(c, launch)
    if policy is not None:
        _policy_rules(c, policy, trainer, inference)
    if pools is not None:
        _pin_rules(c, pools, trainer, inference, judges, policy)
    if rubrics is not None:
        for rname, r in rubrics.items():
            _rubric_source_rules(c, r, ("rubrics", rname))
    if judging is not None and judges is not None and rubrics is not None:
        _binding_rules(c, judging, judges, rubrics)
    if ray is not None:
        _ray_rules(c, ray, pools)


def _slurm_directive_rules(c: Checker, launch: LaunchConfig) -> None:
    for i, msg in slurm_directives.problems(launch.slurm.directives):
        c.add(("launch", "slurm", "directives", str(i)), msg)


def _driver_rules(c: Checker, driver: DriverConfig) -> None:
    check_env(c, driver.env, ("driver", "env"))
    check_argv(c, _command_words(driver.command), ("driver", "command"))
    for k, message in driver.evidence.problems():
        c.add(("driver", "evidence", k), message)


def _refresh_rules(c: Checker, driver: DriverConfig, inference: InferenceConfig) -> None:
    """Seed 000: a successful run shows a policy refresh. Only a trainer whose rollouts use its own
    weights (colocated, or no rollout GPUs) has none; separate rollout GPUs must be sent new weights."""
    if driver.evidence.refresh_none and inference.gpus > 0 and inference.placement_mode != "colocated":
        c.add(
            ("driver", "evidence", "refresh"),
            f'"none" says the trainer has no separate policy refresh, but the plan has {inference.gpus} '
            f"rollout GPU(s) of their own (inference.placement_mode = {inference.placement_mode!r}): the trainer "
            "must send them its weights, so the evidence must show it (refresh_field, log_refresh_pattern or "
            'the preset); keep "none" for a colocated run (inference.placement_mode = "colocated")',
        )


def _launch_env_rules(c: Checker, launch: LaunchConfig) -> None:
    """The job's environment, and its secrets: each a variable name, never also a plain variable."""
    check_env(c, launch.env, ("launch", "env"))
    for k in launch.secrets:
        if not names.ENV_NAME.fullmatch(k):
            c.add(("launch", "secrets", k), "is not a valid environment variable name")
        elif k in launch.env:
            c.add(("launch", "secrets", k), "is also in launch.env; a variable is either plain or a secret")


def _launch_rules(c: Checker, launch: LaunchConfig) -> None:
    if len(set(launch.hostnames)) != len(launch.hostnames):
        c.add(("launch", "hostnames"), "lists a host more than once; remove the duplicates")
    if launch.backend == "beaker" and launch.node_gpus != BEAKER_NODE_GPUS:
        c.add(("launch", "node_gpus"), "Beaker replica groups need full eight-GPU nodes; set node_gpus = 8")
    coord = launch.coordination
    if coord.heartbeat_timeout < 3 * coord.heartbeat_interval:
        c.add(
            ("launch", "coordination", "heartbeat_interval"),
            f"must be smaller than heartbeat_timeout / 3 ({coord.heartbeat_timeout / 3:g}): a peer must miss "
            "three heartbeats before it is called silent, else every pause looks like a death",
        )


def _pool_shape_rules(
    c: Checker,
    pools: Mapping[str, PoolConfig],
    trainer: TrainerConfig | None,
    inference: InferenceConfig | None,
    judges: Mapping[str, JudgeConfig] | None,
    judging: JudgingConfig | None,
    policy: PolicyConfig | None = None,
) -> None:
    """CPU pools and judge-only jobs (a CPU pool beside GPU pools is fine: the job is heterogeneous)."""
    cpu_pools = [n for n, p in pools.items() if p.cpu_only]
    no_trainer = trainer is not None and trainer.nodes == 0
    # An evaluation run (no trainer; rollout engines or the policy service serving the policy) is placed
    # as those are; a judge-only job (neither) has nothing to place, so its pools state its nodes.
    rollout = (inference is not None and inference.gpus > 0) or (policy is not None and policy.managed)
    if no_trainer and not rollout and not pools:
        c.add(("trainer", "nodes"), "is 0 (a judge-only job) but no [pools.NAME] states the job's nodes; declare one")
    if not cpu_pools or len(cpu_pools) != len(pools):
        return
    if policy is not None and policy.managed:
        c.add(("policy", "mode"), "needs GPUs, but every pool is a CPU pool (gpus_per_node = 0): no GPU work")
    elif rollout:
        c.add(("inference", "gpus"), "needs GPUs, but every pool is a CPU pool (gpus_per_node = 0): no GPU work")
    if trainer is not None and not no_trainer:
        c.add(("trainer", "nodes"), "must be 0 when every pool is a CPU pool (gpus_per_node = 0): no GPU work")
    if judges is None or judging is None:
        return
    bound = {b.judge for b in judging.bindings.values()}
    for jname, j in judges.items():
        if j.managed and jname in bound:
            c.add(
                ("judges", jname, "mode"),
                "is managed but every pool is a CPU pool: a managed judge needs GPUs; use an external judge",
            )


def _pool_size_rules(
    c: Checker,
    launch: LaunchConfig,
    pools: Mapping[str, PoolConfig],
    trainer: TrainerConfig | None,
    inference: InferenceConfig | None,
    judges: Mapping[str, JudgeConfig] | None,
    policy: PolicyConfig | None = None,
) -> None:
    """A GPU pool has the replica's size, unless only what is pinned to it runs there: a pinned
    service is sized against its own pool (a pool on another partition may have other nodes)."""
    pinned = {j.node_pool for j in (judges or {}).values() if j.managed}
    pinned |= {policy.node_pool} if policy is not None and policy.managed else set()
    pinned |= {trainer.node_pool} if trainer is not None else set()
    pinned |= {inference.node_pool} if inference is not None else set()
    for pname, pool in pools.items():
        size = pool.gpus_per_node
        if size > launch.node_gpus:
            c.add(
                ("pools", pname, "gpus_per_node"),
                f"is {size} but a node has {launch.node_gpus} GPUs (launch.node_gpus): a pool's nodes are nodes",
            )
        elif size not in (0, launch.gpus_per_replica) and pname not in pinned:
            c.add(
                ("pools", pname, "gpus_per_node"),
                f"is {size} but launch.gpus_per_replica is {launch.gpus_per_replica}: a pool of another size holds "
                "only what is pinned to it with node_pool (sized against its own GPUs); pin a service to it, or "
                f"make it {launch.gpus_per_replica} (or 0: a CPU pool)",
            )


def _pin_rules(
    c: Checker,
    pools: Mapping[str, PoolConfig],
    trainer: TrainerConfig | None,
    inference: InferenceConfig | None,
    judges: Mapping[str, JudgeConfig] | None,
    policy: PolicyConfig | None = None,
) -> None:
    """Every node_pool names a declared pool, and one with GPUs: what is pinned there takes GPUs."""
    pins: list[tuple[Path_, str | None, str]] = []
    if policy is not None and policy.managed:
        pins.append((("policy", "node_pool"), policy.node_pool, "the policy"))
    if trainer is not None and trainer.nodes:
        pins.append((("trainer", "node_pool"), trainer.node_pool, "the trainer"))
    if inference is not None and inference.gpus:
        pins.append((("inference", "node_pool"), inference.node_pool, "the rollout engines"))
    for jname, j in (judges or {}).items():
        if j.managed:
            pins.append((("judges", jname, "node_pool"), j.node_pool, f"judge {jname}"))
    for path, pool, what in pins:
        if pool is None:
            continue
        if pool not in pools:
            declared = ", ".join(pools) or "none declared"
            c.add(path, f"must name a [pools.NAME] table (declared: {declared}), not {pool!r}")
        elif pools[pool].cpu_only:
            c.add(
                path,
                f"names pool {pool}, a CPU pool (gpus_per_node = 0) whose agents run coordination only, but "
                f"{what} needs GPUs: pin it to a GPU pool",
            )
    colocated = inference is not None and inference.placement_mode == "colocated"
    if trainer is not None and inference is not None and colocated and inference.node_pool != trainer.node_pool:
        c.add(
            ("inference", "node_pool"),
            f"is {inference.node_pool!r} but colocated rollout shares the trainer's GPUs "
            f"(trainer.node_pool is {trainer.node_pool!r}): pin both to one pool",
        )


def _policy_rules(
    c: Checker, policy: PolicyConfig, trainer: TrainerConfig | None, inference: InferenceConfig | None
) -> None:
    """A policy service is managed, names its engine and weights, and serves an evaluation run."""
    p: Path_ = ("policy",)
    if policy.mode is None:
        for k, f in _declared(PolicyConfig).items():
            if default_of(f) != getattr(policy, f.name):
                c.add((*p, k), 'is set but [policy] has no mode: add mode = "managed" or remove [policy]')
        return
    if policy.mode != "managed":
        c.add((*p, "mode"), POLICY_EXTERNAL)
        return
    for k in ("backend", "model"):
        if getattr(policy, k) is None:
            c.add((*p, k), f"is required for a managed policy; add it to {_where(p)}")
    for k, message in _weights_problems(policy, "a managed policy", p, staged=c.staged_weights):
        c.add((*p, k), message)
    if trainer is not None and trainer.nodes:
        c.add(
            (*p, "mode"),
            f"a policy service serves an evaluation run (trainer.nodes = 0), but trainer.nodes is {trainer.nodes}: "
            "a training run's rollout engines serve its policy (inference.gpus); remove [policy] or set "
            "trainer.nodes = 0",
        )
    elif inference is not None and inference.gpus:
        c.add(
            ("inference", "gpus"),
            f"is {inference.gpus}, but [policy] serves this evaluation run's policy: set inference.gpus = 0 (the "
            "rollout engines and a policy service would be two policies)",
        )
    check_argv(c, policy.extra_args, (*p, "extra_args"))
    from launch.spec.policy_argv import owned_flags
    from launch.spec.vllm_argv import owned_flag_problems

    for i, message in owned_flag_problems(policy.extra_args, owned_flags(policy.backend)):
        c.add((*p, "extra_args", str(i)), message)
    service_rules(c, policy, p)


def _rubric_source_rules(c: Checker, r: RubricConfig, p: Path_) -> None:
    """Exactly one of profile and template_file; template_sha256 with template_file only."""
    if r.profile is not None and r.template_file is not None:
        c.add(
            (*p, "profile"),
            "and template_file are both set: a rubric is a built-in profile or your template file; remove one",
        )
    elif r.profile is None and r.template_file is None:
        c.add(
            p,
            'needs profile = "general-quality" (or "general-quality-ref"), or template_file = "PATH" with '
            "template_sha256 for your own text",
        )
    if r.template_file is not None and r.template_sha256 is None:
        c.add(
            (*p, "template_sha256"),
            f"is required with template_file: set it to the sha256 of {r.template_file} (sha256sum prints it)",
        )
    if r.template_file is None and r.template_sha256 is not None:
        c.add((*p, "template_sha256"), "pins a template_file, and there is none: remove it or add template_file")


def _binding_rules(
    c: Checker, judging: JudgingConfig, judges: Mapping[str, JudgeConfig], rubrics: Mapping[str, RubricConfig]
) -> None:
    reported: set[tuple[str, str]] = set()
    for verifier, b in judging.bindings.items():
        p: Path_ = ("judging", "bindings", verifier)
        if b.judge not in judges:
            c.add((*p, "judge"), f"names no [judges.{b.judge}]; declared judges: {_listing(judges)}")
        if b.rubric not in rubrics:
            c.add((*p, "rubric"), f"names no [rubrics.{b.rubric}]; declared rubrics: {_listing(rubrics)}")
        j, r = judges.get(b.judge), rubrics.get(b.rubric)
        if j is None or r is None or (b.judge, b.rubric) in reported:
            continue
        if r.max_output_tokens >= j.max_context_length:
            reported.add((b.judge, b.rubric))
            c.add(
                ("rubrics", b.rubric, "max_output_tokens"),
                f"({r.max_output_tokens}) must be smaller than judges.{b.judge}.max_context_length "
                f"({j.max_context_length}), which judges it through judging.bindings.{format_key((verifier,))}",
            )


def _ray_rules(c: Checker, ray: RayConfig, pools: Mapping[str, PoolConfig] | None) -> None:
    check_argv(c, ray.extra_args, ("ray", "extra_args"))
    service_rules(c, ray, ("ray",))
    owned = [a for a in ray.extra_args if a.split("=", 1)[0] in AGENT_OWNED_RAY_FLAGS]
    if owned:
        c.add(
            ("ray", "extra_args"),
            f"must not set {', '.join(owned)}: the agent owns GPUs, ports, addresses and temp dirs of "
            "ray start (the readiness gate checks the cluster it planned)",
        )
    if pools is None:
        return
    spanned = ray.node_pools
    for i, pool in enumerate(spanned or ()):
        if pool not in pools:
            c.add(("ray", "node_pools"), f"names no [pools.{pool}]; declared pools: {', '.join(pools) or 'none'}")
        elif spanned is not None and pool in spanned[:i]:
            c.add(("ray", "node_pools"), f"lists pool {pool} twice")
    for pool, res in ray.resources.items():
        rp: Path_ = ("ray", "resources", pool)
        if pool not in pools:
            c.add(rp, f"names no [pools.{pool}]; declared pools: {', '.join(pools) or 'none'}")
        elif spanned is not None and pool not in spanned:
            c.add(rp, f"pool {pool} is not in ray.node_pools ({', '.join(spanned) or 'empty'}): add it there")
        elif spanned is None and pools[pool].cpu_only:
            # Seed 001: every pool named under resources is in node_pools; absent, a CPU pool never joins.
            c.add(
                rp,
                f"pool {pool} is a CPU pool (gpus_per_node = 0), which joins Ray only when ray.node_pools names it, "
                "and ray.node_pools is not set: list the pools Ray spans in ray.node_pools (with this one), or "
                "remove its resources",
            )
        if not isinstance(res, Mapping):
            c.add(rp, f"must be a table of resource = amount, not {keys.describe(res)}")
            continue
        for name, amount in res.items():
            if name in RAY_BUILTIN_RESOURCES:
                c.add((*rp, name), "is a built-in Ray resource set from the plan; use a custom name")
            elif not keys.is_number(amount) or not 0 <= amount <= 1e12:
                c.add((*rp, name), f"must be a non-negative number, not {keys.describe(amount)}")


def _listing(table: Mapping[str, Any]) -> str:
    return ", ".join(sorted(table)) or "none"


def _check_spelled(
    model: type, data: Mapping[str, Any], *, staged_weights: bool = True
) -> tuple[list[Problem], dict[str, Any] | None]:
    c = Checker(staged_weights=staged_weights)
    sections = _walk(c, model, data, (), None, seed_layout.problems(data))
    _cross_checks(c, sections)
    return c.problems, (sections if not c.problems else None)


@dataclass(frozen=True)
class Checked:
    """The outcome of checking a spec's data: problems in the user's spelling, or the model's arguments."""

    problems: list[Problem]
    built: dict[str, Any] | None
    translation: Translation | None = None

    def user_problems(self, problems: list[Problem]) -> list[Problem]:
        """``problems`` (found on this project's spelling) as the user spelled the keys."""
        return [self.translation.user_problem(p) for p in problems] if self.translation else problems


def check(model: type, data: Mapping[str, Any], overrides: tuple[str, ...] = ()) -> Checked:
    """Every key-level problem of ``data`` in either spelling, and the model's arguments when there is none."""
    if not isinstance(data, Mapping):
        return Checked([Problem("spec", f"must be a table, not {keys.describe(data)}")], None)
    spelled_in = source_format(data)
    if spelled_in == FORMAT_GYM:
        return Checked(*_check_spelled(model, data))
    # The other formats' readers load for a file in that format only (the audit's start-up: issue 51 item 9).
    if spelled_in == FORMAT_NEMO_GYM:
        from launch.spec import _nemo_gym as nemo_gym

        translation = nemo_gym.translate(data, overrides)
    else:
        from launch.spec import _miles as miles

        translation = miles.translate(data, overrides)
    # NeMo Gym's vLLM loads a service's model itself: its weights need not be staged (a warning says so).
    problems, built = _check_spelled(model, translation.data, staged_weights=spelled_in != FORMAT_NEMO_GYM)
    out = Checked([*translation.problems], None, translation)
    # A key the translation already refused (and dropped) is not reported a second time as missing.
    seen = {p.key for p in translation.problems}
    out.problems.extend(p for p in out.user_problems(problems) if p.key not in seen)
    if built is not None and not out.problems:
        built.update(
            source_format=spelled_in, trainer_sections=translation.trainer_sections, warnings=translation.warnings
        )
        return Checked(out.problems, built, translation)
    return out


def resolve(model: type[Model], resolved: ResolvedSpec) -> Model:
    """The typed ``model`` of ``resolved``. Raises SpecError with every key-level problem."""
    checked = check(model, resolved.data, resolved.overrides)
    if checked.problems or checked.built is None:
        raise SpecError(checked.problems)
    build: Callable[..., Model] = model
    return build(spec=resolved, **checked.built)
