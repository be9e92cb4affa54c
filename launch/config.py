"""Typed, immutable view of a valid run spec, with every default applied.

The resolved spec (``launch.spec``) keeps keys as spelled; this is where the
defaults of ARCHITECTURE.md's key table live. ``RunConfig.from_spec`` raises
SpecError for key-level problems; placement problems (does it fit the nodes?)
are raised by ``launch.plan.plan``, and ``launch.validate.validate`` reports both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from launch.errors import SpecError
from launch.rules import check_spec
from launch.spec import ResolvedSpec

DEFAULT_NAME = "run"
DEFAULT_OUTPUT_ROOT = "output"
DEFAULT_DIR_MODE = 0o750
DEFAULT_GPUS_PER_REPLICA = 8
DEFAULT_NODE_GPUS = 8
DEFAULT_JUDGE_TIMEOUT = 600  # seconds per HTTP request (seed 000), not a total budget
DEFAULT_CHAT_TEMPLATE = "qwen3-no-thinking"


def _frozen(value: Any) -> Any:
    """Deep read-only copy: tables become MappingProxyType, arrays tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Coordination:
    """Seconds. ``startup_timeout`` is one deadline measured from agent start."""

    startup_timeout: float = 1200
    heartbeat_timeout: float = 120
    heartbeat_interval: float = 2.0
    poll_interval: float = 1.0
    teardown_grace: float = 10.0
    ack_timeout: float = 60.0


@dataclass(frozen=True)
class TrainerConfig:
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class InferenceConfig:
    gpus: int
    tensor_parallel_size: int = 1
    placement_mode: str = "disaggregated"


@dataclass(frozen=True)
class DriverConfig:
    """``command`` is an argv tuple, or one string to run through the shell."""

    command: tuple[str, ...] | str
    env: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    placement: str = "trainer"


@dataclass(frozen=True)
class JudgeConfig:
    """A named judge service. Placement fields are None/0 for external judges."""

    name: str
    mode: str
    backend: str | None
    model: str
    revision: str | None
    prepared_dir: str | None
    gpus: int
    tensor_parallel_size: int
    chat_template: str | None
    max_context_length: int
    max_concurrent_calls: int
    timeout: int
    # None = key absent (eager); kept distinct from False, as in the fingerprint.
    cuda_graphs: bool | None
    context_extension: str | None
    endpoint: str | None
    node_pool: str | None

    @property
    def managed(self) -> bool:
        return self.mode == "managed"


@dataclass(frozen=True)
class RubricConfig:
    name: str
    profile: str
    max_output_tokens: int
    temperature: float = 0.0


@dataclass(frozen=True)
class Binding:
    verifier: str
    judge: str
    rubric: str


@dataclass(frozen=True)
class PoolConfig:
    name: str
    nodes: int
    gpus_per_node: int
    partition: str | None = None


@dataclass(frozen=True)
class RayConfig:
    """``enabled = false`` runs coordination only (no Ray): benchmarks and drivers that need none."""

    enabled: bool = True
    num_cpus: int | None = None
    object_store_memory: int | None = None
    # pool name -> {resource name -> amount}
    resources: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: EMPTY)
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataConfig:
    train: str | None = None
    eval: str | None = None


@dataclass(frozen=True)
class RunConfig:
    spec: ResolvedSpec
    name: str
    output_root: str
    dir_mode: int
    gpus_per_replica: int
    node_gpus: int
    hostnames: tuple[str, ...]
    backend: str
    coordination: Coordination
    beaker: Mapping[str, Any]
    slurm: Mapping[str, Any]
    trainer: TrainerConfig
    inference: InferenceConfig
    driver: DriverConfig
    judges: Mapping[str, JudgeConfig]  # name order
    rubrics: Mapping[str, RubricConfig]  # name order
    bindings: tuple[Binding, ...]  # verifier order
    data: DataConfig
    pools: tuple[PoolConfig, ...]  # name order (see launch.plan for why not declaration order)
    ray: RayConfig

    @property
    def fingerprint(self) -> str:
        return self.spec.fingerprint

    @property
    def bound_judges(self) -> tuple[JudgeConfig, ...]:
        """Judges referenced by at least one binding, in name order. Only these run (and use GPUs)."""
        used = {b.judge for b in self.bindings}
        return tuple(j for name, j in self.judges.items() if name in used)

    @property
    def gpu_judges(self) -> tuple[JudgeConfig, ...]:
        """Bound managed judges: the ones that take GPUs from the allocation."""
        return tuple(j for j in self.bound_judges if j.managed)

    @classmethod
    def from_spec(cls, resolved: ResolvedSpec) -> RunConfig:
        problems = check_spec(resolved.data)
        if problems:
            raise SpecError(problems)
        return _build(resolved)


def _judge(name: str, t: Mapping[str, Any]) -> JudgeConfig:
    managed = t["mode"] == "managed"
    gpus = t.get("gpus", 0) if managed else 0
    return JudgeConfig(
        name=name,
        mode=t["mode"],
        backend=t.get("backend", "sglang") if managed else None,
        model=t["model"],
        revision=t.get("revision"),
        prepared_dir=t.get("prepared_dir"),
        gpus=gpus,
        tensor_parallel_size=t.get("tensor_parallel_size", gpus) if managed else 0,
        chat_template=t.get("chat_template", DEFAULT_CHAT_TEMPLATE) if managed else None,
        max_context_length=t["max_context_length"],
        max_concurrent_calls=t["max_concurrent_calls"],
        timeout=t.get("timeout", DEFAULT_JUDGE_TIMEOUT),
        cuda_graphs=t.get("cuda_graphs"),
        context_extension=t.get("context_extension"),
        endpoint=t.get("endpoint"),
        node_pool=t.get("node_pool"),
    )


def _build(resolved: ResolvedSpec) -> RunConfig:
    d = resolved.data
    output = d.get("output", {})
    launch = d.get("launch", {})
    coord = launch.get("coordination", {})
    trainer = d["trainer"]
    inference = d["inference"]
    driver = d["driver"]
    ray = d.get("ray", {})
    data = d.get("data", {})
    command = driver["command"]
    judges = {n: _judge(n, t) for n, t in sorted(d.get("judges", {}).items())}
    rubrics = {
        n: RubricConfig(n, t["profile"], t["max_output_tokens"], float(t.get("temperature", 0.0)))
        for n, t in sorted(d.get("rubrics", {}).items())
    }
    bound = d.get("judging", {}).get("bindings", {})
    bindings = tuple(Binding(v, b["judge"], b["rubric"]) for v, b in sorted(bound.items()))
    pools = tuple(
        PoolConfig(n, p["nodes"], p["gpus_per_node"], p.get("partition")) for n, p in sorted(d.get("pools", {}).items())
    )
    return RunConfig(
        spec=resolved,
        name=d.get("name", DEFAULT_NAME),
        output_root=output.get("root", DEFAULT_OUTPUT_ROOT),
        dir_mode=output.get("dir_mode", DEFAULT_DIR_MODE),
        gpus_per_replica=launch.get("gpus_per_replica", DEFAULT_GPUS_PER_REPLICA),
        node_gpus=launch.get("node_gpus", DEFAULT_NODE_GPUS),
        hostnames=tuple(launch.get("hostnames", ())),
        backend=launch.get("backend", "local"),
        coordination=Coordination(**coord),
        beaker=_frozen(launch.get("beaker", {})),
        slurm=_frozen(launch.get("slurm", {})),
        trainer=TrainerConfig(trainer.get("nodes", 1), trainer["gpus_per_node"]),
        inference=InferenceConfig(
            inference["gpus"],
            inference.get("tensor_parallel_size", 1),
            inference.get("placement_mode", "disaggregated"),
        ),
        driver=DriverConfig(
            command=command if isinstance(command, str) else tuple(command),
            env=_frozen(driver.get("env", {})),
            placement=driver.get("placement", "trainer"),
        ),
        judges=MappingProxyType(judges),
        rubrics=MappingProxyType(rubrics),
        bindings=bindings,
        data=DataConfig(data.get("train"), data.get("eval")),
        pools=pools,
        ray=RayConfig(
            enabled=ray.get("enabled", True),
            num_cpus=ray.get("num_cpus"),
            object_store_memory=ray.get("object_store_memory"),
            resources=_frozen(ray.get("resources", {})),
            extra_args=tuple(ray.get("extra_args", ())),
        ),
    )
