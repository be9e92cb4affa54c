"""A NeMo Gym submission config (seed 001's system) read as it is written.

A YAML file whose top level has ``compute`` and ``services`` is NeMo Gym's ``gym eval submit``
config. ``translate`` maps it onto this project's spelling key by key, as ``_seed_layout`` lists
them: every key is carried to its meaning or refused naming its path and why; problems the
resolver finds on our spelling are reported at the NeMo Gym path that produced them. Facts from
NeMo Gym 0.7.0's config types (which keys exist, which are required, their defaults), not its code.

The run is an evaluation: no trainer, no rollout engines; the service ``driver.policy_model``
names is the policy, every other ``type: vllm`` service a judge the agents start (NeMo Gym
starts every service it declares), a ``type: ray`` service the job's Ray cluster.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launch.spec import _seed_layout as layout
from launch.spec._miles import Translation
from launch.spec.errors import Problem
from launch.spec.keypath import format_key
from schemas import DriverEnv

__all__ = ["translate"]

TOP_LEVEL = ("compute", "services", "driver", "job", "otel")
REQUIRED_TOP = ("compute", "services", "driver", "job")
COMPUTE_KEYS = ("type", "account", "hostname", "walltime", "node_pools", "extra_args")
POOL_KEYS = ("partition", "nodes", "ntasks_per_node", "gpus_per_node", "extra_args")
BASE_KEYS = ("type", "container", "placement", "node_pool", "health_check", "env", "mounts", "pre_command")
VLLM_KEYS = (
    *BASE_KEYS,
    *("model", "port", "served_model_name", "tensor_parallel_size", "pipeline_parallel_size"),
    *("trust_remote_code", "number_of_instances", "use_ray_serve", "extra_args", "data_parallel_rpc_port"),
    # gym-agent extensions (_seed_layout.EXTENSIONS)
    *("revision", "prepared_dir", "backend"),
)
RAY_KEYS = (*BASE_KEYS, "node_pools", "port", "resources", "num_cpus", "num_gpus", "extra_args")
HEALTH_KEYS = ("path", "port", "timeout_seconds")
DRIVER_KEYS = (
    *("container", "gym_install", "policy_model", "policy_host", "policy_model_type", "benchmarks", "env"),
    "mounts",
)
BENCHMARK_KEYS = ("prepare", "run", "command", "resumable")
DEFAULT_VLLM_PORT = 8000  # NeMo Gym's default for a model service
DEFAULT_HEALTH_TIMEOUT = 60  # NeMo Gym's default health_check.timeout_seconds
DEFAULT_MODEL_TYPE = "openai_model"
POLICY_KEYS = ("policy_base_url", "policy_model_name", "policy_api_key")  # what policy_model injects
# The policy needs no key; clients that insist on the header get a placeholder (as NeMo Gym gives them).
PLACEHOLDER_KEY = "dummy"
# Where a gym eval run writes its rollouts: beside the run's own records.
ROLLOUTS = f"${DriverEnv.RUN_DIR}/nemo-gym/rollouts.jsonl"


@dataclass(frozen=True)
class _Draft:
    out: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    renames: dict[str, str] = field(default_factory=dict)  # our key path -> NeMo Gym key path

    def problem(self, path: Sequence[str], message: str) -> None:
        self.problems.append(Problem(format_key(path), message))

    def refuse(self, path: Sequence[str], why: str) -> None:
        self.problem(path, layout.REFUSED[why])

    def put(self, ours: str, value: Any, theirs: Sequence[str]) -> None:
        node = self.out
        parts = ours.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        self.renames[ours] = format_key(theirs)

    def unknown(self, table: Mapping[str, Any], known: Sequence[str], path: Sequence[str]) -> None:
        import difflib  # only for a mistake

        for key in table:
            if key not in known:
                close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.75)
                hint = f"did you mean {close[0]}?" if close else "known keys: " + ", ".join(known)
                self.problem([*path, str(key)], f"is not a key of a NeMo Gym 0.7.0 config; {hint}")


def _table(draft: _Draft, value: Any, path: Sequence[str]) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    draft.problem(path, f"must be a mapping, not {type(value).__name__}")
    return {}


def translate(data: Mapping[str, Any], overrides: Sequence[str] = ()) -> Translation:
    """This project's spelling of a NeMo Gym config's data (after ``--set`` overrides)."""
    del overrides  # a NeMo Gym config carries nothing to a trainer
    draft = _Draft()
    draft.unknown(data, (*TOP_LEVEL, *("launch",)), [])
    for key in REQUIRED_TOP:
        if key not in data:
            draft.problem([key], "is required by NeMo Gym's config")
    draft.put("trainer.nodes", 0, ["driver"])
    draft.put("trainer.gpus_per_node", 1, ["driver"])
    draft.put("inference.gpus", 0, ["driver"])
    draft.put("driver.trains", False, ["driver"])
    cluster, pools = _compute(draft, data.get("compute"))
    driver = _table(draft, data.get("driver", {}), ["driver"])
    draft.unknown(driver, DRIVER_KEYS, ["driver"])
    policy_name = driver.get("policy_model")
    services = _table(draft, data.get("services", {}), ["services"])
    if policy_name is not None and policy_name not in services:
        names = ", ".join(map(str, services)) or "none"
        draft.problem(["driver", "policy_model"], f"names no service; services: {names}")
    elif policy_name is not None and _table(draft, services[policy_name], []).get("type") != "vllm":
        draft.problem(["driver", "policy_model"], f"names {policy_name}, which is not a type: vllm service")
    ray_seen = False
    for name, svc in services.items():
        path = ["services", str(name)]
        svc = _table(draft, svc, path)
        kind = svc.get("type")
        if kind == "ray":
            if ray_seen:
                draft.refuse(path, "services.NAME (two ray services)")
            ray_seen = True
            _ray(draft, str(name), svc, path)
        elif kind == "vllm":
            _vllm(draft, str(name), svc, path, policy=name == policy_name)
        elif kind == "vllm_pd":
            draft.refuse([*path, "type"], "services.NAME.type = vllm_pd")
        else:
            draft.problem([*path, "type"], f'must be "vllm" or "ray" (NeMo Gym\'s types), not {kind!r}')
        if svc.get("placement") not in (None, cluster):
            draft.problem([*path, "placement"], f"names no compute resource; the config's is {cluster!r}")
    _driver(draft, driver, services.get(policy_name) if policy_name is not None else None)
    _job_otel(draft, data)
    _launch_extension(draft, data.get("launch"))
    _allocation(draft, pools)
    return Translation(draft.out, tuple(draft.problems), draft.renames, warnings=tuple(draft.warnings))


def _compute(draft: _Draft, value: Any) -> tuple[str | None, Mapping[str, Any]]:
    """compute.CLUSTER: one Slurm resource; its pools become [pools.NAME] in declaration order."""
    resources = _table(draft, value, ["compute"])
    if len(resources) != 1:
        draft.problem(["compute"], f"must declare exactly one compute resource, not {len(resources)}")
        return None, {}
    cname, raw = next(iter(resources.items()))
    base = ["compute", str(cname)]
    cluster = _table(draft, raw, base)
    draft.unknown(cluster, COMPUTE_KEYS, base)
    if cluster.get("type") != "slurm":
        draft.problem(
            [*base, "type"], f'must be "slurm" (NeMo Gym 0.7.0\'s one compute type), not {cluster.get("type")!r}'
        )
    else:
        draft.put("launch.backend", "slurm", [*base, "type"])
    if "account" in cluster:
        draft.put("launch.slurm.account", cluster["account"], [*base, "account"])
    else:
        draft.problem([*base, "account"], "is required by NeMo Gym's config (the account to charge)")
    if "hostname" in cluster:
        draft.refuse([*base, "hostname"], "compute.CLUSTER.hostname")
    if cluster.get("walltime") is not None:
        draft.put("launch.slurm.time", cluster["walltime"], [*base, "walltime"])
    extra = _table(draft, cluster.get("extra_args", {}), [*base, "extra_args"])
    if extra:
        draft.put("launch.slurm.directives", [f"--{k}={v}" for k, v in extra.items()], [*base, "extra_args"])
    pools = _table(draft, cluster.get("node_pools", {}), [*base, "node_pools"])
    if not pools:
        draft.problem([*base, "node_pools"], "declare at least one node pool: the job is their nodes")
    for pname, praw in pools.items():
        ppath = [*base, "node_pools", str(pname)]
        pool = _table(draft, praw, ppath)
        draft.unknown(pool, POOL_KEYS, ppath)
        ours = f"pools.{pname}"
        draft.put(f"{ours}.nodes", pool.get("nodes", 1), [*ppath, "nodes"])
        gpus = pool.get("gpus_per_node")
        draft.put(f"{ours}.gpus_per_node", 0 if gpus is None else gpus, [*ppath, "gpus_per_node"])
        if "partition" in pool:
            draft.put(f"{ours}.partition", pool["partition"], [*ppath, "partition"])
        else:
            draft.problem([*ppath, "partition"], "is required by NeMo Gym's config")
        if "ntasks_per_node" in pool:
            draft.put(f"{ours}.tasks_per_node", pool["ntasks_per_node"], [*ppath, "ntasks_per_node"])
        if pool.get("extra_args"):
            draft.refuse([*ppath, "extra_args"], "compute.CLUSTER.node_pools.NAME.extra_args")
        draft.renames[ours] = format_key(ppath)
    return str(cname), pools


def _allocation(draft: _Draft, pools: Mapping[str, Any]) -> None:
    """Our replicas are nodes of the widest pool (GPU indices of a CPU pool: none)."""
    widest = max((p.get("gpus_per_node") or 0 for p in pools.values() if isinstance(p, Mapping)), default=0)
    per_node = widest if isinstance(widest, int) and widest > 0 else 1
    launch = draft.out.setdefault("launch", {})
    launch.setdefault("gpus_per_replica", per_node)
    launch.setdefault("node_gpus", per_node)


def _env(draft: _Draft, env: Any, path: list[str], refusal: str) -> dict[str, str]:
    """NeMo Gym's prefixed values in our spelling: lit:X is X, runtime:VAR stays."""
    out: dict[str, str] = {}
    for k, v in _table(draft, env, path).items():
        if isinstance(v, str) and v.startswith("lit:"):
            out[str(k)] = v[len("lit:") :]
        elif isinstance(v, str) and v.startswith("runtime:"):
            out[str(k)] = v
        elif isinstance(v, str) and v.startswith("host:"):
            draft.refuse([*path, str(k)], refusal)
        else:
            draft.problem([*path, str(k)], f"must start with lit:, runtime: or host: (NeMo Gym's prefixes), not {v!r}")
    return out


def _service_common(draft: _Draft, ours: str, svc: Mapping[str, Any], path: list[str], *, ray: bool) -> None:
    """container, mounts, pre_command, env and the health check: each service's own (nemo-placement keys)."""
    if "container" in svc:  # absent (NeMo Gym requires it): the service runs in the job's own environment
        draft.put(f"{ours}.container", svc["container"], [*path, "container"])
    mounts = svc.get("mounts", [])
    if isinstance(mounts, list) and mounts:
        spelled = [m if not isinstance(m, str) or ":" in m else f"{m}:{m}" for m in mounts]
        draft.put(f"{ours}.container_mounts", spelled, [*path, "mounts"])
    elif not isinstance(mounts, list):
        draft.problem([*path, "mounts"], f"must be a list of SRC[:DST[:FLAGS]], not {type(mounts).__name__}")
    if svc.get("pre_command"):
        draft.put(f"{ours}.pre_command", svc["pre_command"], [*path, "pre_command"])
    env = _env(draft, svc.get("env", {}), [*path, "env"], "services.NAME.env host:VAR")
    if env:
        draft.put(f"{ours}.env", env, [*path, "env"])
    health = svc.get("health_check")
    if ray:
        if health is not None:
            draft.refuse([*path, "health_check"], "services.NAME.health_check (ray)")
        return
    hc = _table(draft, health or {}, [*path, "health_check"])
    draft.unknown(hc, HEALTH_KEYS, [*path, "health_check"])
    if hc.get("port") is not None and hc.get("port") != svc.get("port", DEFAULT_VLLM_PORT):
        draft.refuse([*path, "health_check", "port"], "services.NAME.health_check.port")
    draft.put(f"{ours}.health_path", hc.get("path", "/health"), [*path, "health_check", "path"])
    timeout = hc.get("timeout_seconds", DEFAULT_HEALTH_TIMEOUT)
    draft.put(f"{ours}.health_timeout", timeout, [*path, "health_check", "timeout_seconds"])


def _vllm(draft: _Draft, name: str, svc: Mapping[str, Any], path: list[str], *, policy: bool) -> None:
    """A model service: the policy ([policy]) or a judge ([judges.NAME]) the agents start."""
    draft.unknown(svc, VLLM_KEYS, path)
    ours = "policy" if policy else f"judges.{name}"
    draft.renames[ours] = format_key(path)
    draft.put(f"{ours}.mode", "managed", [*path, "type"])
    backend = svc.get("backend", "vllm")
    if policy and "backend" in svc:
        draft.problem([*path, "backend"], "is for a judge's server; the policy is served by vLLM: remove it")
    draft.put(f"{ours}.backend", backend, [*path, "backend"])
    model = svc.get("model")
    if model is None:
        draft.problem([*path, "model"], "is required by NeMo Gym's config (the weights vLLM serves)")
    served = svc.get("served_model_name", model)
    if served is not None:
        draft.put(f"{ours}.model", served, [*path, "served_model_name" if "served_model_name" in svc else "model"])
    _weights(draft, ours, svc, path, engine=backend != "reference")
    tp = svc.get("tensor_parallel_size", 1)
    if policy:
        draft.put("policy.tensor_parallel_size", tp, [*path, "tensor_parallel_size"])
        draft.put("policy.port", svc.get("port", DEFAULT_VLLM_PORT), [*path, "port"])
    else:
        draft.put(f"{ours}.gpus", tp, [*path, "tensor_parallel_size"])
        if backend != "reference":
            draft.put(f"{ours}.tensor_parallel_size", tp, [*path, "tensor_parallel_size"])
    if svc.get("node_pool") is not None:
        draft.put(f"{ours}.node_pool", svc["node_pool"], [*path, "node_pool"])
    extra = _split_args(draft, svc.get("extra_args", ""), [*path, "extra_args"])
    if svc.get("trust_remote_code") is True:
        extra.append("--trust-remote-code")
    if extra:
        draft.put(f"{ours}.extra_args", extra, [*path, "extra_args"])
    if svc.get("number_of_instances", 1) != 1:
        draft.refuse([*path, "number_of_instances"], "services.NAME.number_of_instances")
    if svc.get("use_ray_serve", False) is not False:
        draft.refuse([*path, "use_ray_serve"], "services.NAME.use_ray_serve")
    if svc.get("pipeline_parallel_size", 1) != 1:
        draft.refuse([*path, "pipeline_parallel_size"], "services.NAME.pipeline_parallel_size")
    if "data_parallel_rpc_port" in svc:
        draft.refuse([*path, "data_parallel_rpc_port"], "services.NAME.data_parallel_rpc_port")
    if backend != "reference":  # the reference judge is this project's CPU server: no image, no vLLM probe
        _service_common(draft, ours, svc, path, ray=False)


def _weights(draft: _Draft, ours: str, svc: Mapping[str, Any], path: list[str], *, engine: bool) -> None:
    """What vLLM loads: staged weights (prepared_dir, or a model that is an absolute path), else
    ``model`` as given (``weights``), as NeMo Gym runs it; unpinned without a revision (a warning)."""
    model = svc.get("model")
    staged = svc.get("prepared_dir")
    if staged is None and isinstance(model, str) and model.startswith("/"):
        staged = model
    if "prepared_dir" in svc:
        draft.put(f"{ours}.prepared_dir", staged, [*path, "prepared_dir"])
    elif staged is not None:
        draft.put(f"{ours}.prepared_dir", staged, [*path, "model"])
    elif engine and model is not None:
        draft.put(f"{ours}.weights", model, [*path, "model"])
    if "revision" in svc:
        draft.put(f"{ours}.revision", svc["revision"], [*path, "revision"])
    elif engine and model is not None:
        draft.warnings.append(Problem(format_key([*path, "model"]), _unpinned(model, staged)))


def _unpinned(model: Any, staged: Any) -> str:
    """Why a service's weights may differ between attempts and nodes, and the keys that pin them."""
    if staged is not None:
        return (
            f"the weights are not pinned: vLLM loads the files in {staged} as they are when it starts, which may "
            "differ between attempts and nodes; to pin them add revision: COMMIT (40 hex digits), which every "
            "node then checks the directory holds (a gym-agent extension)"
        )
    return (
        f"the weights are not pinned: vLLM downloads {model} as it starts, and what the hub serves under that "
        "name may change between attempts and nodes; to pin them add revision: COMMIT (40 hex digits), and "
        "prepared_dir: DIR to serve weights staged before the job (gym-agent extensions)"
    )


def _ray(draft: _Draft, name: str, svc: Mapping[str, Any], path: list[str]) -> None:
    draft.unknown(svc, RAY_KEYS, path)
    draft.renames["ray"] = format_key(path)
    draft.put("ray.enabled", True, path)  # the spec as spelled has no [ray] table to say so
    draft.put("ray.name", name, path)
    if svc.get("node_pool") is not None:
        draft.refuse([*path, "node_pool"], "services.NAME.node_pool (ray)")
    draft.put("ray.node_pools", svc.get("node_pools", []), [*path, "node_pools"])
    if svc.get("resources"):
        draft.put("ray.resources", svc["resources"], [*path, "resources"])
    if svc.get("num_cpus") is not None:
        draft.put("ray.num_cpus", svc["num_cpus"], [*path, "num_cpus"])
    if "port" in svc:
        draft.refuse([*path, "port"], "services.NAME.port (ray)")
    if svc.get("num_gpus") is not None:
        draft.refuse([*path, "num_gpus"], "services.NAME.num_gpus (ray)")
    extra = _split_args(draft, svc.get("extra_args", ""), [*path, "extra_args"])
    if extra:
        draft.put("ray.extra_args", extra, [*path, "extra_args"])
    _service_common(draft, "ray", svc, path, ray=True)


def _split_args(draft: _Draft, value: Any, path: list[str]) -> list[str]:
    """NeMo Gym's extra_args is one string appended to the command: split as the shell would."""
    if not isinstance(value, str):
        draft.problem(path, f"must be a string of flags, not {type(value).__name__}")
        return []
    try:
        return shlex.split(value)
    except ValueError as exc:
        draft.problem(path, f"cannot be split as the shell would: {exc}")
        return []


def _driver(draft: _Draft, driver: Mapping[str, Any], policy: Any) -> None:
    """The one benchmark becomes the driver's command: gym eval run, or the benchmark's own command."""
    for key in ("container", "mounts", "gym_install"):
        if key in driver:
            draft.refuse(["driver", key], f"driver.{key}")
    if driver.get("policy_host", "localhost") != "localhost":
        draft.refuse(["driver", "policy_host"], "driver.policy_host")
    env = _env(draft, driver.get("env", {}), ["driver", "env"], "driver.env host:VAR")
    if env:
        draft.put("driver.env", env, ["driver", "env"])
    benchmarks = _table(draft, driver.get("benchmarks"), ["driver", "benchmarks"]) if "benchmarks" in driver else {}
    if "benchmarks" not in driver:
        draft.problem(["driver", "benchmarks"], "is required by NeMo Gym's config (the benchmark to run)")
    if len(benchmarks) > 1:
        draft.refuse(["driver", "benchmarks"], "driver.benchmarks (more than one)")
    if len(benchmarks) != 1:
        draft.put("driver.command", "true", ["driver", "benchmarks"])
        return
    bname, braw = next(iter(benchmarks.items()))
    path = ["driver", "benchmarks", str(bname)]
    bench = _table(draft, braw, path)
    draft.unknown(bench, BENCHMARK_KEYS, path)
    draft.put("name", f"gym-{bname}", path)
    if bench.get("prepare"):
        draft.refuse([*path, "prepare"], "driver.benchmarks.NAME.prepare")
    if bench.get("resumable", False) is not False:
        draft.refuse([*path, "resumable"], "driver.benchmarks.NAME.resumable")
    served = None
    if isinstance(policy, Mapping):
        served = policy.get("served_model_name", policy.get("model"))
    if bench.get("command") is not None and bench.get("run"):
        draft.problem(path, "sets both command and run; command replaces gym eval run: drop one (NeMo Gym's rule)")
    if bench.get("command") is not None:
        draft.put("driver.command", _command_benchmark(bench["command"], served), [*path, "command"])
        return
    run = dict(_table(draft, bench.get("run", {}), [*path, "run"]))
    if served is not None:
        for key in POLICY_KEYS:
            if key in run:
                draft.problem([*path, "run", key], "is injected from driver.policy_model; set one of the two")
        run |= {"policy_base_url": f"${DriverEnv.POLICY_URL}", "policy_model_name": served}
        run["policy_api_key"] = PLACEHOLDER_KEY
    run.setdefault("require_complete", True)
    model_type = driver.get("policy_model_type", DEFAULT_MODEL_TYPE)
    argv = ["gym", "eval", "run", f"+output_jsonl_fpath={ROLLOUTS}"]
    if served is not None and model_type:
        argv += ["--model-type", str(model_type)]
    argv += _overrides(run)
    draft.put("driver.command", _shell(argv), [*path, "run"])


def _command_benchmark(command: Any, served: Any) -> Any:
    """A benchmark's own script, with what NeMo Gym exports to it."""
    if not isinstance(command, str):
        return command
    exports = [f'NEMO_GYM_BENCH_DIR="${DriverEnv.RUN_DIR}"']
    if served is not None:
        # Not NEMO_GYM_POLICY_API_KEY: the policy takes no key, and a key-named value on a command line is
        # refused as a credential (resolve.check_argv).
        exports += [f'NEMO_GYM_POLICY_BASE_URL="${DriverEnv.POLICY_URL}"']
        exports += [f"NEMO_GYM_POLICY_MODEL_NAME={shlex.quote(str(served))}"]
    return f"export {' '.join(exports)}\n{command}"


def _overrides(run: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Hydra overrides ``+a.b=value`` for every leaf of ``run`` (lists as [x,y]), as gym eval run takes them."""
    out: list[str] = []
    for key, value in run.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out += _overrides(value, dotted)
        elif isinstance(value, list):
            out.append(f"+{dotted}=[{','.join(str(v) for v in value)}]")
        else:
            out.append(f"+{dotted}={value}")
    return out


def _shell(argv: Sequence[str]) -> str:
    """One shell line; the job's variables ($GYM_...) expand on the driver's node, nothing else does."""
    return " ".join(_expanding(w) if "$GYM_" in w else shlex.quote(w) for w in argv)


def _expanding(word: str) -> str:
    """``word`` in double quotes: ``$GYM_...`` expands; every other ``$``, quote and backslash is literal."""
    escaped = "".join(
        "\\" + ch if ch in '"\\`' or (ch == "$" and not word[i:].startswith("$GYM_")) else ch
        for i, ch in enumerate(word)
    )
    return f'"{escaped}"'


def _job_otel(draft: _Draft, data: Mapping[str, Any]) -> None:
    job = _table(draft, data.get("job", {}), ["job"])
    draft.unknown(job, ("output_path",), ["job"])
    if "output_path" in job:
        draft.put("output.root", job["output_path"], ["job", "output_path"])
    elif "job" in data:
        draft.problem(["job", "output_path"], "is required by NeMo Gym's config (where runs go)")
    otel = data.get("otel")
    if otel is not None and not (isinstance(otel, Mapping) and otel.get("enabled") is False):
        draft.refuse(["otel"], "otel")


def _launch_extension(draft: _Draft, launch: Any) -> None:
    """Our [launch] keys (coordination, preflight, ...) beside what compute.CLUSTER set; once each."""
    if launch is None:
        return
    if not isinstance(launch, Mapping):
        draft.problem(["launch"], f"must be a mapping, not {type(launch).__name__}")
        return
    placed = draft.out.setdefault("launch", {})
    for key, value in launch.items():
        if isinstance(value, Mapping) and isinstance(placed.get(key), dict):
            for sub, v in value.items():
                if sub in placed[key]:
                    draft.problem(
                        ["launch", key, sub], f"is also set by {draft.renames.get(f'launch.{key}.{sub}')}; set it once"
                    )
                placed[key][sub] = v
        elif key in placed:
            draft.problem(["launch", key], f"is also set by {draft.renames.get(f'launch.{key}')}; set it once")
        else:
            placed[key] = value
        draft.renames.setdefault(f"launch.{key}", f"launch.{key}")
