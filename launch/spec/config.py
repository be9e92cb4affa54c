"""The resolved run spec: ``RunConfig``, the typed, frozen model of one run spec.

Its top-level keys are declared here, its tables in ``launch.spec.sections``;
``RunConfig.from_spec`` is the one way to build it (``launch.spec.resolve``).
Every default is declared once, in those two modules.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launch.spec import _keys as keys
from launch.spec import names
from launch.spec._fields import REQUIRED, default_of, key, key_info, section, section_info, spelled
from launch.spec.errors import Problem
from launch.spec.load import ResolvedSpec
from launch.spec.resolve import RUNTIME_PREFIX, Service, resolve
from launch.spec.sections import (
    MAX_JUDGES,
    MAX_POOLS,
    MAX_RUBRICS,
    Binding,
    Coordination,
    DataConfig,
    DriverConfig,
    InferenceConfig,
    JudgeConfig,
    JudgingConfig,
    LaunchConfig,
    OutputConfig,
    PolicyConfig,
    PoolConfig,
    RayConfig,
    RubricConfig,
    TrainerConfig,
)
from schemas import credentials

# The section types live in launch.spec.sections and are imported from there.
__all__ = ["REQUIRED", "RunConfig", "default_of", "key_info", "section_info", "spelled"]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """The resolved run spec. Built only by ``launch.spec.resolve.resolve``; ``spec`` is its identity."""

    spec: ResolvedSpec
    # Which spelling the spec was written in ("gym-agent" or "miles") and, for a MILES run file,
    # the sections that belong to the trainer (carried to the driver untouched).
    source_format: str = "gym-agent"
    trainer_sections: tuple[str, ...] = ()
    # What the spec is accepted with but the user should hear (its key in their spelling): the commands
    # print them, `gym-launch plan --json` lists them.
    warnings: tuple[Problem, ...] = ()
    name: str = key(
        keys.Text(
            100, names.RUN_NAME.pattern, "1-100 letters, digits, '.', '_' or '-' starting with a letter or digit"
        ),
        "run",
        doc="labels the run (job names)",
    )
    output: OutputConfig = section(OutputConfig, doc="where run directories go")
    launch: LaunchConfig = section(LaunchConfig, doc="allocation, coordination and backends")
    trainer: TrainerConfig = section(TrainerConfig, doc="the trainer's GPUs")
    inference: InferenceConfig = section(InferenceConfig, doc="rollout engines")
    driver: DriverConfig = section(DriverConfig, doc="the training driver the agent starts")
    policy: PolicyConfig = section(PolicyConfig, doc="the policy service (seed 001): served for the driver")
    judges: Mapping[str, JudgeConfig] = section(
        JudgeConfig, named=True, limit=MAX_JUDGES, doc="[judges.NAME]: judge services"
    )
    rubrics: Mapping[str, RubricConfig] = section(
        RubricConfig, named=True, limit=MAX_RUBRICS, doc="[rubrics.NAME]: grading rubrics"
    )
    judging: JudgingConfig = section(JudgingConfig, doc="verifier bindings")
    data: DataConfig = section(DataConfig, doc="prepared data, checked against the bindings at startup")
    pools: Mapping[str, PoolConfig] = section(
        PoolConfig,
        named=True,
        limit=MAX_POOLS,
        doc="[pools.NAME]: node pools, contiguous node ranges in declaration order",
    )
    ray: RayConfig = section(RayConfig, doc="the Ray cluster")

    def __post_init__(self) -> None:
        # Seed 001: Ray only where something needs it; the one place the absent ray.enabled is decided.
        if self.ray.enabled is None:
            needed = self.trainer.nodes > 0 or self.inference.gpus > 0 or "ray" in self.spec.data
            object.__setattr__(self, "ray", dataclasses.replace(self.ray, enabled=needed))

    # --- derived views (no defaults here: those are the fields above) -------------------------

    @property
    def fingerprint(self) -> str:
        return self.spec.fingerprint

    @property
    def output_root(self) -> str:
        return self.output.root

    @property
    def dir_mode(self) -> int:
        return self.output.dir_mode

    @property
    def gpus_per_replica(self) -> int:
        return self.launch.gpus_per_replica

    @property
    def node_gpus(self) -> int:
        return self.launch.node_gpus

    @property
    def hostnames(self) -> tuple[str, ...]:
        return self.launch.hostnames

    @property
    def backend(self) -> str:
        return self.launch.backend

    @property
    def coordination(self) -> Coordination:
        return self.launch.coordination

    @property
    def bindings(self) -> tuple[Binding, ...]:
        """Every binding, in verifier order."""
        return tuple(self.judging.bindings[v] for v in sorted(self.judging.bindings))

    @property
    def pool_list(self) -> tuple[PoolConfig, ...]:
        """Pools in declaration order: they take contiguous node ranges in this order."""
        return tuple(self.pools.values())

    @property
    def bound_judges(self) -> tuple[JudgeConfig, ...]:
        """Judges referenced by at least one binding, in name order. Only these run (and use GPUs).
        A NeMo Gym config has no bindings: it starts every service it declares, so every judge."""
        used = {b.judge for b in self.judging.bindings.values()}
        if self.source_format == "nemo-gym":
            used = set(self.judges)
        return tuple(self.judges[n] for n in sorted(self.judges) if n in used)

    @property
    def managed_policy(self) -> PolicyConfig | None:
        """The policy service the agents run, or None without one."""
        return self.policy if self.policy.managed else None

    @property
    def gpu_judges(self) -> tuple[JudgeConfig, ...]:
        """Bound managed judges: the ones that take GPUs from the allocation."""
        return tuple(j for j in self.bound_judges if j.managed)

    def environment_references(self) -> dict[str, str]:
        """Variable -> the first key that takes it from the job's environment (``${runtime:NAME}`` in
        an argv, ``runtime:NAME`` in [driver] env): each must be set before any process starts."""
        out: dict[str, str] = {}
        command = self.driver.command
        whole = [("driver.command", command)] if isinstance(command, str) else _keyed("driver.command", command)
        for where, arg in (
            *whole,
            *_keyed("ray.extra_args", self.ray.extra_args),
            *_keyed("policy.extra_args", self.policy.extra_args),
        ):
            for var in credentials.references([arg]):
                out.setdefault(var, where)
        envs = [("driver.env", self.driver.env), *((f"{k}.env", svc.env) for k, svc in self.services().items())]
        for where, env in envs:
            for name, value in env.items():
                if value.startswith(RUNTIME_PREFIX):
                    out.setdefault(value[len(RUNTIME_PREFIX) :], f"{where}.{name}")
        return out

    def services(self) -> dict[str, Service]:
        """Each service the agents start with its own process keys (seed 001), by key path:
        "policy", "judges.NAME" (bound managed judges), "ray" (when Ray starts)."""
        out: dict[str, Service] = {}
        if self.managed_policy is not None:
            out["policy"] = self.policy
        out.update((f"judges.{j.name}", j) for j in self.gpu_judges)
        if self.ray.enabled:
            out["ray"] = self.ray
        return out

    def data_paths(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """[data] train and eval files; relative ones resolve from the spec file's folder."""

        def paths(value: str | tuple[str, ...] | None) -> tuple[str, ...]:
            items = (value,) if isinstance(value, str) else (value or ())
            base = self.spec.base_dir
            return tuple(p if os.path.isabs(p) or base is None else os.path.join(base, p) for p in items)

        return paths(self.data.train), paths(self.data.eval)

    @classmethod
    def from_spec(cls, resolved: ResolvedSpec) -> RunConfig:
        """The model of ``resolved``; raises SpecError with every problem of its keys."""
        return resolve(cls, resolved)


def _keyed(key: str, argv: Sequence[str]) -> list[tuple[str, str]]:
    """Each argument of an argv with its key (``driver.command.3``)."""
    return [(f"{key}.{i}", arg) for i, arg in enumerate(argv)]
