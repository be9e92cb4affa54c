"""Judge-only re-grading of a finished run (seed 003): where the job runs, for how long, what it
starts, and the run spec of that job. Pure: reads only the resolved model of the source run and
values the caller read from the scheduler (a partition's MaxTime); ``launch._regrade_job`` does the I/O.

Two kinds of profile:

- **cpu**: the run serves nothing beside its policy (no bound managed judge; external judges are
  reached over HTTP). The job is one node of a CPU partition with no service, no Ray, no GPU.
  Partition: ``--judge-partition`` (an explicit flag wins: seed 003's function reference; its prose
  puts the saved pool first), else a saved CPU pool's (``gpus_per_node = 0``), else the reader
  placement (``GYM_READER_SRUN``'s ``-p/--partition``), else refused naming only what can still be
  given (the flag, the reader placement). A saved CPU pool of that partition lends the judge node
  its directives (QOS, tasks per node). QOS:
  ``--judge-qos``, else the saved CPU pool's, else the reader placement's (when it names this
  partition or none), else the partition's default. The run's own QOS does not follow: it belongs
  to its GPU allocation, and a GPU QOS can refuse a job without GPUs. A run that is CPU-only
  already (no trainer, rollout or managed judge; every pool a CPU pool) keeps its own compute: its
  saved pools, partition and QOS (the flags are recorded as not used).
- **served-judge**: every bound managed judge is pinned (``node_pool``) to a pool of its own (one
  holding no trainer or rollout GPUs; judges may share it). The job keeps exactly those pools
  in their saved shape and partition, no trainer, no rollout, no policy pool; it is a GPU job and
  keeps the run's job-level QOS. ``--judge-partition/--judge-qos`` name a CPU placement and are
  recorded as not used. A bound managed judge on the policy's nodes (no ``node_pool``, or a pool
  that also holds trainer or rollout GPUs) is refused.

Walltime (seed 003): the run's segment walltime ``[launch.slurm] time`` bounded by the partition's
MaxTime; MaxTime itself when the run records no segment walltime; 04:00:00 only when neither is known.
The profile says which (``walltime_source``).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch.spec import config as model
from launch.spec import sections
from launch.spec.config import RunConfig
from launch.spec.errors import UsageError
from schemas import records
from schemas.vocab import JobEnv, LauncherEnv

__all__ = [
    "CLUSTER_DEFAULT",
    "CPU",
    "CPU_PLACEMENT_UNUSED",
    "DEFAULT_WALLTIME",
    "GPU_DIRECTIVES",
    "JUDGE_POOL",
    "OWN_COMPUTE",
    "OWN_COMPUTE_UNUSED",
    "PARTITION_DEFAULT",
    "Placement",
    "PoolShape",
    "Profile",
    "READER",
    "RegradeRefused",
    "SERVED_JUDGE",
    "WALLTIME_DEFAULT",
    "WALLTIME_MAX_TIME",
    "WALLTIME_SEGMENT",
    "bound_walltime",
    "dangling_driver_env",
    "derive_profile",
    "is_cpu_only",
    "judge_job_spec",
    "kind_of",
    "reader_option",
    "reader_partition",
    "reader_qos",
    "served_judges",
    "slurm_seconds",
    "slurm_time",
    "source_record",
    "table_of",
    "target_partition",
]

CPU = "cpu"
SERVED_JUDGE = "served-judge"
DEFAULT_WALLTIME = "04:00:00"
JUDGE_POOL = "judge"  # the one pool of a CPU profile
PARTITION_DEFAULT = "the partition's default"
CLUSTER_DEFAULT = "the cluster's default partition"
OWN_COMPUTE = "the run's own compute (a CPU-only run: its saved pools)"
OWN_COMPUTE_UNUSED = (
    "--judge-partition/--judge-qos: the run is CPU-only, so its own compute is its judge execution profile; not used"
)
CPU_PLACEMENT_UNUSED = (
    "--judge-partition/--judge-qos apply to the CPU profile only (a served judge needs GPUs); not used"
)
READER = LauncherEnv.READER_SRUN
# Directives that ask for GPUs or shape the run's GPU nodes (the renderer owns --gres/--gpus*):
# a CPU partition's nodes have neither, so a CPU job drops them.
GPU_DIRECTIVES = (
    "--gpus-per-task",
    "--gpus-per-socket",
    "--gpu-bind",
    "--gpu-freq",
    "--cpus-per-gpu",
    "--mem-per-gpu",
    "--constraint",
)


class RegradeRefused(UsageError):
    """No judge-only profile exists for the run: the message says why and what would allow one."""


@dataclass(frozen=True)
class Placement:
    """What the user (and the launcher's environment) says about the judge job's placement."""

    judge_partition: str | None = None
    judge_qos: str | None = None
    reader_srun: str | None = None  # the value of GYM_READER_SRUN


@dataclass(frozen=True)
class PoolShape:
    name: str
    nodes: int
    gpus_per_node: int
    partition: str | None
    qos: str | None
    tasks_per_node: int = 1

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Profile:
    """Where and for how long a judge-only job grades the run's saved answers again, and what it starts."""

    kind: str
    partition: str | None  # None: the cluster's default partition
    partition_source: str
    qos: str | None  # None: the partition's default
    qos_source: str
    walltime: str
    walltime_bounds: tuple[str, ...]  # what set or bounded the walltime, in order
    walltime_source: str  # WALLTIME_SEGMENT, WALLTIME_MAX_TIME or WALLTIME_DEFAULT
    pools: tuple[PoolShape, ...]
    services: tuple[str, ...]  # managed judges the job starts
    external: tuple[str, ...]  # external judges it reaches over HTTP
    unused: tuple[str, ...]  # what of the run or the command line is not used, and why

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "partition": self.partition,
            "partition_source": self.partition_source,
            "qos": self.qos,
            "qos_source": self.qos_source,
            "walltime": self.walltime,
            "walltime_bounds": list(self.walltime_bounds),
            "walltime_source": self.walltime_source,
            "pools": [p.to_json() for p in self.pools],
            "services": list(self.services),
            "external_judges": list(self.external),
            "unused": list(self.unused),
        }

    def text(self) -> str:
        pools = ", ".join(f"{p.name} ({p.nodes} x {p.gpus_per_node} GPUs)" for p in self.pools)
        lines = [
            f"profile: {self.kind}",
            f"partition: {self.partition or '(default)'} ({self.partition_source})",
            f"qos: {self.qos or '(default)'} ({self.qos_source})",
            f"walltime: {self.walltime} ({'; '.join(self.walltime_bounds)})",
            f"pools: {pools}",
            f"services: {', '.join(self.services) or 'none'}",
            f"external judges: {', '.join(self.external) or 'none'}",
        ]
        lines += [f"not used: {u}" for u in self.unused]
        return "\n".join(lines)


# --- reader placement -------------------------------------------------------------------------


def reader_option(args: str | None, short: str, long: str) -> str | None:
    """The value of ``-x V``, ``-xV``, ``--long=V`` or ``--long V`` in srun arguments (last wins)."""
    if not args:
        return None
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise UsageError(f"{READER}: cannot split {args!r}: {exc}") from None
    found: str | None = None
    for i, w in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else None
        if w in (short, long):
            if nxt is None:
                raise UsageError(f"{READER}: {w} has no value in {args!r}")
            found = nxt
        elif w.startswith(long + "="):
            found = w[len(long) + 1 :]
        elif w.startswith(short) and not w.startswith("--") and len(w) > len(short):
            found = w[len(short) :]
    return found


def reader_partition(args: str | None) -> str | None:
    return reader_option(args, "-p", "--partition")


def reader_qos(args: str | None) -> str | None:
    return reader_option(args, "-q", "--qos")


# --- walltime -----------------------------------------------------------------------------------

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def slurm_seconds(text: str) -> int | None:
    """Seconds of a Slurm time ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS");
    None for UNLIMITED/INFINITE (no bound)."""
    if text.strip().upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a Slurm time (e.g. 04:00:00 or 1-00:00:00)")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(a) * 60 + int(b or 0)  # MM or MM:SS


def slurm_time(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hms = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{hms}" if days else hms


WALLTIME_SEGMENT = "segment"  # the run's launch.slurm.time (bounded by MaxTime when one is known)
WALLTIME_MAX_TIME = "max_time"  # the partition's MaxTime: the run records no segment walltime
WALLTIME_DEFAULT = "default"  # neither is known


def bound_walltime(
    segment: str | None, max_time: str | None, partition: str | None
) -> tuple[str, tuple[str, ...], str]:
    """The judge job's walltime, what set or bounded it, and its source (``WALLTIME_*``): the run's
    segment walltime bounded by the partition's MaxTime; MaxTime alone when the run records no segment
    walltime; the default only when neither is known (an UNLIMITED MaxTime bounds nothing)."""
    where = f"partition {partition}" if partition else CLUSTER_DEFAULT
    limit = slurm_seconds(max_time) if max_time is not None else None
    if segment is None:
        if limit is not None:
            return (
                slurm_time(limit),
                (f"MaxTime {max_time} of {where}: the run sets no launch.slurm.time",),
                WALLTIME_MAX_TIME,
            )
        unknown = f"MaxTime of {where} unknown" if max_time is None else f"MaxTime of {where} is {max_time}"
        return (
            DEFAULT_WALLTIME,
            (f"the default {DEFAULT_WALLTIME}: the run sets no launch.slurm.time and {unknown}",),
            WALLTIME_DEFAULT,
        )
    start, why = slurm_seconds(segment), f"the run's launch.slurm.time {segment}"
    assert start is not None  # launch.slurm.time is a duration, never UNLIMITED (its key pattern)
    if max_time is None:
        return slurm_time(start), (why, f"MaxTime of {where} unknown: not bounded"), WALLTIME_SEGMENT
    if limit is None:
        return slurm_time(start), (why, f"MaxTime of {where} is {max_time}: not bounded"), WALLTIME_SEGMENT
    if limit < start:
        return slurm_time(limit), (why, f"bounded by MaxTime {max_time} of {where}"), WALLTIME_SEGMENT
    return slurm_time(start), (why, f"within MaxTime {max_time} of {where}"), WALLTIME_SEGMENT


# --- profiles -----------------------------------------------------------------------------------


def served_judges(config: RunConfig) -> tuple[sections.JudgeConfig, ...]:
    """The bound managed judges: the services a judge-only job would have to start."""
    return config.gpu_judges


def _policy_parts(config: RunConfig, pool: str) -> list[str]:
    """What of the policy (trainer, rollout) the plan puts on ``pool``'s nodes."""
    parts = []
    if config.trainer.nodes and config.trainer.node_pool == pool:
        parts.append(f"the trainer (trainer.node_pool = {pool!r})")
    if config.inference.gpus and config.inference.node_pool == pool:
        parts.append(f"the rollout engines (inference.node_pool = {pool!r})")
    return parts


def _refuse_policy_nodes(config: RunConfig) -> None:
    """A served judge must have a pool of its own: one the policy's trainer and rollout do not share."""
    for judge in served_judges(config):
        pool = config.pools.get(judge.node_pool) if judge.node_pool else None
        if pool is None:
            raise RegradeRefused(
                f"judge {judge.name} runs on the policy's own nodes (judges.{judge.name}.node_pool is not set): "
                "a judge-only job does not start the policy's allocation; pin the judge to a node pool of its "
                f"own (a [pools.NAME] holding no trainer or rollout, named in judges.{judge.name}.node_pool) "
                "to re-grade it"
            )
        shared = _policy_parts(config, pool.name)
        if shared:
            raise RegradeRefused(
                f"judge {judge.name} runs on the policy's own nodes: its pool {pool.name} also holds "
                f"{' and '.join(shared)}, so a judge-only job would start the policy's allocation "
                f"({pool.nodes} x {pool.gpus_per_node} GPUs for a {judge.gpus}-GPU judge); give the judge a node "
                f"pool of its own (a [pools.NAME] holding no trainer or rollout, named in "
                f"judges.{judge.name}.node_pool) to re-grade it"
            )


def _shape(pool: sections.PoolConfig) -> PoolShape:
    return PoolShape(pool.name, pool.nodes, pool.gpus_per_node, pool.partition, pool.qos, pool.tasks_per_node)


def _cpu_pool(config: RunConfig) -> sections.PoolConfig | None:
    return next((p for p in config.pool_list if p.cpu_only), None)


def _lending_pool(config: RunConfig, partition: str | None) -> sections.PoolConfig | None:
    """The saved CPU pool of the judge job's partition (or of none), which lends the judge node its
    directives (seed 003); None when the run has no such pool."""
    pool = _cpu_pool(config)
    return pool if pool is not None and pool.partition in (None, partition) else None


def kind_of(config: RunConfig) -> str:
    """cpu or served-judge; raises RegradeRefused for a judge on the policy's nodes."""
    if not served_judges(config):
        return CPU
    _refuse_policy_nodes(config)
    return SERVED_JUDGE


def _kept_pools(config: RunConfig) -> tuple[sections.PoolConfig, ...]:
    pinned = {j.node_pool for j in served_judges(config)}
    return tuple(p for p in config.pool_list if p.name in pinned)


def target_partition(config: RunConfig, placement: Placement) -> tuple[str, str | None, str]:
    """(kind, partition, where its name came from): the partition whose MaxTime bounds the job."""
    kind = kind_of(config)
    if kind == SERVED_JUDGE:
        kept = _kept_pools(config)
        parts = {p.partition for p in kept if p.partition}
        if len(parts) > 1:
            raise RegradeRefused(
                f"the judges' pools {', '.join(p.name for p in kept)} are on different partitions "
                f"({', '.join(sorted(parts))}): one job queues on one partition; put them on one"
            )
        if parts:
            return kind, parts.pop(), f"the saved partition of pool(s) {', '.join(p.name for p in kept)}"
        if config.launch.slurm.partition:
            return kind, config.launch.slurm.partition, "the run's launch.slurm.partition"
        return kind, None, CLUSTER_DEFAULT
    if is_cpu_only(config):
        part = config.pool_list[0].partition or config.launch.slurm.partition
        return kind, part, (OWN_COMPUTE if part else f"{OWN_COMPUTE}; {CLUSTER_DEFAULT}")
    # Seed 003's function reference: the flag, then the saved config's CPU pool, then the reader.
    if placement.judge_partition:
        return kind, placement.judge_partition, "--judge-partition"
    pool = _cpu_pool(config)
    if pool is not None and pool.partition:
        return kind, pool.partition, f"the saved CPU pool {pool.name} (gpus_per_node = 0)"
    reader = reader_partition(placement.reader_srun)
    if reader:
        return kind, reader, f"the reader placement ({READER})"
    # Only what this run can still be given: its saved config is what it was.
    saved = (
        f"; its saved CPU pool {pool.name} names no partition"
        if pool is not None
        else "; its saved config declares no CPU pool"
    )
    raise RegradeRefused(
        "the run serves nothing beside its policy, so its judge job needs a CPU partition and none is known"
        f"{saved}: pass --judge-partition P, or set {READER} (srun arguments naming -p/--partition)"
    )


def is_cpu_only(config: RunConfig) -> bool:
    """The run already runs on CPU nodes only: no trainer, no rollout, no managed judge, every pool a
    CPU pool. Its own compute is its judge execution profile (seed 003)."""
    return (
        bool(config.pool_list)
        and config.trainer.nodes == 0
        and config.inference.gpus == 0
        and not served_judges(config)
        and all(p.cpu_only for p in config.pool_list)
    )


def _cpu_qos(config: RunConfig, placement: Placement, partition: str | None) -> tuple[str | None, str]:
    if is_cpu_only(config):
        # Its QOS is a CPU job's already: the saved pools', else the run's job-level one.
        own = next((p.qos for p in config.pool_list if p.qos), None)
        if own:
            return own, f"the saved pool {next(p.name for p in config.pool_list if p.qos)}"
        if config.launch.slurm.qos:
            return config.launch.slurm.qos, "the run's job-level launch.slurm.qos"
        return None, PARTITION_DEFAULT
    if placement.judge_qos:
        return placement.judge_qos, "--judge-qos"
    pool = _lending_pool(config, partition)
    if pool is not None and pool.qos:
        return pool.qos, f"the saved CPU pool {pool.name}"
    qos = reader_qos(placement.reader_srun)
    named = reader_partition(placement.reader_srun)
    if qos and named in (None, partition):
        return qos, f"the reader placement ({READER})"
    return None, PARTITION_DEFAULT


def _served_qos(config: RunConfig) -> tuple[str | None, str]:
    if config.launch.slurm.qos:
        return config.launch.slurm.qos, "the run's job-level launch.slurm.qos"
    for pool in _kept_pools(config):
        if pool.qos:
            return pool.qos, f"the saved pool {pool.name}"
    return None, PARTITION_DEFAULT


@dataclass(frozen=True)
class _Kept:
    """What one kind of judge job keeps of the run (pools, QOS, services) and what it leaves: the
    run's pools it drops, and the notes on what of the run it does not use."""

    pools: tuple[PoolShape, ...]
    qos: str | None
    qos_source: str
    services: tuple[str, ...]
    dropped: list[str]
    unused: list[str]


def _served_job(config: RunConfig, placement: Placement) -> _Kept:
    """A served-judge job: the judges' own pools in their saved shape, the run's job-level QOS."""
    unused: list[str] = []
    dropped = [p.name for p in config.pool_list]
    pools = tuple(_shape(p) for p in _kept_pools(config))
    qos, qos_source = _served_qos(config)
    if placement.judge_partition or placement.judge_qos:
        unused.append(CPU_PLACEMENT_UNUSED)
    services = tuple(j.name for j in served_judges(config))
    dropped = [n for n in dropped if n not in {p.name for p in pools}]
    return _Kept(pools, qos, qos_source, services, dropped, unused)


def _own_compute_job(config: RunConfig, placement: Placement, partition: str | None) -> _Kept:
    """A CPU-only run's job is its own compute: every saved pool, its own QOS."""
    unused: list[str] = []
    pools = tuple(_shape(p) for p in config.pool_list)
    qos, qos_source = _cpu_qos(config, placement, partition)
    if placement.judge_partition or placement.judge_qos:
        unused.append(OWN_COMPUTE_UNUSED)
    return _Kept(pools, qos, qos_source, (), [], unused)


def _cpu_job(config: RunConfig, placement: Placement, partition: str) -> _Kept:
    """A CPU profile's job: one node of the CPU partition; the run's GPU QOS and GPU directives do
    not follow it."""
    unused: list[str] = []
    dropped = [p.name for p in config.pool_list]
    cpu_pool = _cpu_pool(config)
    qos, qos_source = _cpu_qos(config, placement, partition)
    # Seed 003: a saved CPU pool of the partition lends its own directives to the judge node.
    lender = _lending_pool(config, partition)
    pools = (PoolShape(JUDGE_POOL, 1, 0, partition, qos, lender.tasks_per_node if lender is not None else 1),)
    if config.launch.slurm.qos and qos != config.launch.slurm.qos:
        unused.append(
            f"launch.slurm.qos {config.launch.slurm.qos}: the run's QOS belongs to its GPU allocation "
            "(a GPU QOS can refuse a job without GPUs)"
        )
    if lender is not None:
        dropped = [n for n in dropped if n != lender.name]
    elif cpu_pool is not None and cpu_pool.partition:
        unused.append(
            f"pools {cpu_pool.name}: its partition {cpu_pool.partition} is not the judge job's {partition} "
            "(--judge-partition comes first, seed 003), so it lends the judge node nothing"
        )
        dropped = [n for n in dropped if n != cpu_pool.name]
    gpu_only = [d for d in config.launch.slurm.directives if d not in _cpu_directives(config.launch.slurm.directives)]
    if gpu_only:
        unused.append(f"directives {' '.join(gpu_only)}: they ask for GPUs or GPU nodes")
    return _Kept(pools, qos, qos_source, (), dropped, unused)


def derive_profile(config: RunConfig, placement: Placement, max_time: str | None) -> Profile:
    """The profile of a judge-only job of ``config``; ``max_time`` is the MaxTime of the partition
    ``target_partition`` names (None: unknown). Raises RegradeRefused."""
    kind, partition, source = target_partition(config, placement)
    walltime, bounds, walltime_source = bound_walltime(config.launch.slurm.time, max_time, partition)
    external = tuple(j.name for j in config.bound_judges if not j.managed)
    unused: list[str] = []
    if config.launch.hostnames:
        unused.append("launch.hostnames: the run's node list (the judge job takes the nodes Slurm gives it)")
    if kind == SERVED_JUDGE:
        kept = _served_job(config, placement)
    elif is_cpu_only(config):
        kept = _own_compute_job(config, placement, partition)
    else:
        assert partition is not None  # target_partition refuses a CPU profile without one
        kept = _cpu_job(config, placement, partition)
    unused += kept.unused
    if kept.dropped:
        unused.append(f"pools {', '.join(kept.dropped)}: not the judge job's (it has no trainer, no rollout)")
    dangling = dangling_driver_env(config, {p.name for p in kept.pools})
    if dangling:
        unused.append(f"driver.env {', '.join(dangling)}: they read the node list of a pool the job does not have")
    unused.append("trainer, rollout and the policy model: a judge-only job grades saved answers")
    return Profile(
        kind,
        partition,
        source,
        kept.qos,
        kept.qos_source,
        walltime,
        bounds,
        walltime_source,
        kept.pools,
        kept.services,
        external,
        tuple(unused),
    )


def dangling_driver_env(config: RunConfig, kept_pools: set[str]) -> tuple[str, ...]:
    """``driver.env`` keys that read the node list of a pool the judge job does not have
    (``runtime:GYM_POOL_<POOL>_NODES``): the job leaves them out rather than fail on them."""
    gone = {JobEnv.pool_nodes(p.name) for p in config.pool_list if p.name not in kept_pools}
    return tuple(k for k, v in config.driver.env.items() if v.startswith("runtime:") and v[len("runtime:") :] in gone)


# --- the judge job's spec -----------------------------------------------------------------------


def _value(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return table_of(v)
    if isinstance(v, Mapping):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, tuple | list):
        return [_value(x) for x in v]
    return v


def table_of(obj: Any) -> dict[str, Any]:
    """A resolved section spelled back as its TOML table: declared keys only, None left out, and a
    judge's keys only when its mode accepts them (an external judge has no gpus)."""
    mode = getattr(obj, "mode", None)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        info, sect = model.key_info(f), model.section_info(f)
        if info is None and sect is None:
            continue  # identity fields (spec, name of a named entry)
        if info is not None and info.modes and mode not in info.modes:
            continue
        v = getattr(obj, f.name)
        if v is None:
            continue
        out[model.spelled(f)] = _value(v)
    return out


def _cpu_directives(directives: tuple[str, ...]) -> list[str]:
    return [d for d in directives if d.split("=", 1)[0] not in GPU_DIRECTIVES]


def _rubric_table(config: RunConfig, rubric: sections.RubricConfig) -> dict[str, Any]:
    """A rubric's table with its template file resolved as the run resolved it (the judge job's
    spec lives in another folder), as [data] paths are."""
    table = table_of(rubric)
    path = rubric.template_path(config.spec.base_dir)
    if path is not None:
        table["template_file"] = path
    return table


def judge_job_spec(config: RunConfig, profile: Profile, command: str) -> dict[str, Any]:
    """The run spec of the judge-only job: the run's driver env, launch env, secrets, mounts, data,
    coordination and bindings; ``command`` in place of the driver; the profile's pools, partition,
    QOS and walltime; no trainer, no rollout, no Ray."""
    launch = table_of(config.launch)
    launch.pop("hostnames", None)
    launch["backend"] = "slurm"
    slurm = launch.setdefault("slurm", {})
    for k in ("partition", "qos", "time"):
        slurm.pop(k, None)
    if profile.partition:
        slurm["partition"] = profile.partition
    if profile.qos:
        slurm["qos"] = profile.qos
    slurm["time"] = profile.walltime
    if profile.kind == CPU:
        slurm["directives"] = _cpu_directives(config.launch.slurm.directives)

    used_judges = {b.judge for b in config.bindings}
    used_rubrics = {b.rubric for b in config.bindings}
    train, evaluation = config.data_paths()
    data = {k: list(v) for k, v in (("train", train), ("eval", evaluation)) if v}
    driver = table_of(config.driver)
    driver.update(command=command, placement="trainer")
    for k in dangling_driver_env(config, {p.name for p in profile.pools}):
        del driver["env"][k]
    return {
        "name": f"{config.name}-regrade"[:100],
        "output": table_of(config.output),
        "launch": launch,
        "trainer": {"nodes": 0, "gpus_per_node": config.trainer.gpus_per_node},
        "inference": {"gpus": 0},
        "driver": driver,
        "judges": {n: table_of(j) for n, j in config.judges.items() if n in used_judges},
        "rubrics": {n: _rubric_table(config, r) for n, r in config.rubrics.items() if n in used_rubrics},
        "judging": {"bindings": {v: table_of(b) for v, b in config.judging.bindings.items()}},
        **({"data": data} if data else {}),
        "pools": {
            p.name: {
                k: v
                for k, v in (
                    ("nodes", p.nodes),
                    ("gpus_per_node", p.gpus_per_node),
                    ("partition", p.partition),
                    ("qos", p.qos),
                    ("tasks_per_node", p.tasks_per_node if p.tasks_per_node != 1 else None),
                )
                if v is not None
            }
            for p in profile.pools
        },
        "ray": {"enabled": False},
    }


def source_record(run_dir: str, uuid: str, config: RunConfig, profile: Profile, command: str) -> dict[str, Any]:
    """The body of the judge job's regrade.json: which run it grades again, and how."""
    return records.regrade_fields(
        source_run_dir=run_dir,
        source_uuid=uuid,
        source_name=config.name,
        source_fingerprint=config.fingerprint,
        command=command,
        profile=profile.to_json(),
    )
