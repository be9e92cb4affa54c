"""Every table of the TOML run spec: one frozen dataclass per section, every key declared once.

Each key is a field declared with ``key(...)`` (``launch.spec._fields``), which carries its value type
(``launch.spec._keys``), its default (or REQUIRED), what it means and which rule it comes from.
Three things are generated from these declarations, so they cannot drift apart: validation
(``launch.spec.resolve``), the JSON Schema printed by ``gym-launch schema`` and docs/spec.md
(``launch.spec.reference``). The resolved run spec that holds these tables (and the top-level
keys) is ``launch.spec.config.RunConfig``; together the two modules are the only place a default
lives.

Why plain frozen dataclasses with one resolver rather than pydantic or msgspec: the resolver must
report every problem at once with the full TOML key path and a did-you-mean, keep an omitted key
distinct from an explicit default (``cuda_graphs``), and apply defaults that depend on other keys
(a judge's ``tensor_parallel_size`` is its ``gpus``). Those are the parts a validation library
does not give; the rest (types, bounds) is a few small classes. No new dependency reaches the
agent's process or the user's training image.

Bounds: every count has an upper bound (``MAX_*``) so any input plans in well under a second.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from launch.spec import _keys as keys
from launch.spec import names
from launch.spec._fields import key, key_info, section

__all__ = [
    "ABSOLUTE",
    "BeakerConfig",
    "Binding",
    "CANARY_RULE",
    "CHECK_MODES",
    "Coordination",
    "DURATION",
    "DURATION_RULE",
    "DataConfig",
    "DriverConfig",
    "EVIDENCE_PRESETS",
    "EVIDENCE_REFRESH",
    "EXTERNAL",
    "EvidenceConfig",
    "LedgerConfig",
    "GRADES_RULE",
    "HANG_RULE",
    "InferenceConfig",
    "JudgeConfig",
    "JudgingConfig",
    "LaunchConfig",
    "MANAGED",
    "MAX_ARGS",
    "MAX_BINDINGS",
    "MAX_CONCURRENCY",
    "MAX_CONTEXT",
    "MAX_ENV",
    "MAX_GPUS",
    "MAX_JUDGES",
    "MAX_NAME",
    "MAX_NODES",
    "MAX_NODE_GPUS",
    "MAX_POOLS",
    "MAX_RUBRICS",
    "MAX_TASKS_PER_NODE",
    "OutputConfig",
    "PREFLIGHT_RULE",
    "PolicyConfig",
    "PoolConfig",
    "PreflightConfig",
    "REFRESH_NONE",
    "RayConfig",
    "RubricConfig",
    "SAFETY",
    "SEED_DRIVER",
    "SEED_EVIDENCE",
    "SEED_JUDGES",
    "SEED_LIFECYCLE",
    "SEED_PLACEMENT",
    "SEED_POOLS",
    "SEED_SERVICES",
    "SEED_SPEC",
    "SkyPilotConfig",
    "SkyPilotMount",
    "SlurmConfig",
    "TrainerConfig",
    "check_mode",
]

# --- bounds -----------------------------------------------------------------------------------

MAX_NODES = 4096  # replicas of one run; also the largest pool
MAX_NODE_GPUS = 64  # GPUs of one node (today's nodes have 4-16)
MAX_GPUS = MAX_NODES * MAX_NODE_GPUS
MAX_NAME = names.MAX_NAME
MAX_JUDGES = 32
MAX_RUBRICS = 64
MAX_BINDINGS = 256
MAX_POOLS = 32
MAX_ENV = 256
MAX_ARGS = 256
MAX_CONTEXT = 1 << 21  # tokens
MAX_CONCURRENCY = 4096


SEED_SPEC = "seed 000 (run spec)"
SEED_PLACEMENT = "seed 000 (GPU ownership)"
SEED_JUDGES = "seed 000 (named services)"
SEED_LIFECYCLE = "seed 000 (lifecycle)"
SEED_POOLS = "seed 001 (node pools and Ray)"
SEED_DRIVER = "seed 004 (driver placement)"
SAFETY = "gym-agent (safety)"
GRADES_RULE = "gym-agent (grades log and judge alarm)"
HANG_RULE = "gym-agent (hang detection)"
CANARY_RULE = "gym-agent (canaries during the run)"

# --- sections ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class OutputConfig:
    root: str = key(keys.Text(), "output", doc="where run directories go: ROOT/cluster/UUID")
    dir_mode: int = key(
        keys.DirMode(), 0o750, doc="permission mode of the run directory", rule="coordination records decide what runs"
    )


@dataclass(frozen=True, kw_only=True)
class Coordination:
    """Seconds. ``startup_timeout`` is one deadline measured from agent start."""

    startup_timeout: float = key(
        keys.Seconds(1, 7 * 86400),
        1200,
        doc="one deadline for the whole startup, from agent start",
        rule=SEED_LIFECYCLE,
    )
    heartbeat_timeout: float = key(
        keys.Seconds(1, 86400),
        120,
        doc="a peer whose heartbeat has not changed for this long has failed; at least 3 heartbeat intervals",
        rule=SEED_LIFECYCLE,
    )
    heartbeat_interval: float = key(keys.Seconds(0.05, 60), 2.0, doc="how often each agent writes its heartbeat")
    poll_interval: float = key(
        keys.Seconds(0.01, 1),
        1.0,
        doc="how often failure records are listed: a peer's failure reaches every agent within it",
    )
    teardown_grace: float = key(
        keys.Seconds(0.1, 600), 10.0, doc="seconds between SIGTERM and SIGKILL of a process group"
    )
    ack_timeout: float = key(
        keys.Seconds(1, 3600), 60.0, doc="how long the driver's node waits for every replica's acknowledgement"
    )
    progress_interval: float = key(
        keys.Seconds(0.1, 3600),
        30.0,
        doc="during a long wait (rendezvous, Ray nodes joining, a judge loading) one progress line this often",
    )
    fs_stall_timeout: float = key(
        keys.Seconds(1, 86400),
        300.0,
        doc="a shared-filesystem stall (this agent's own reads and writes of the run directory not "
        "answering) is ridden out this long; past it the run fails with fs_stall",
    )
    doorbell: bool = key(
        keys.Bool(),
        True,
        doc="each agent listens on a UDP port of its address and rings its peers with a failure, so they stop "
        "without waiting for the shared filesystem to show the record (false: files only)",
    )
    beacon_timeout: float = key(
        keys.SecondsOrOff(1, 86400),
        30.0,
        doc="a watched peer whose doorbell beacons have stopped and whose heartbeat file has not changed for this "
        "long has failed (peer_silent): a frozen node is known in seconds; either signal alone keeps it alive, "
        "and heartbeat_timeout stays the backstop (0: files only)",
        rule=HANG_RULE,
    )
    stack_dump_timeout: float = key(
        keys.Seconds(1, 600),
        30.0,
        doc="on a hang (and for gym-launch stacks) each agent records the stacks of every process it supervises "
        "(py-spy) within this many seconds in all, before its teardown",
        rule=HANG_RULE,
    )


DURATION = r"\d+(\.\d+)?\s*(ns|us|ms|s|m|h|d)(\s*\d+(\.\d+)?\s*(ns|us|ms|s|m|h|d))*"
DURATION_RULE = 'a duration such as "90m", "3h" or "1h30m"'


@dataclass(frozen=True, kw_only=True)
class BeakerConfig:
    image: str | None = key(keys.Text(), None, doc="the Beaker image every replica runs")
    cluster: str | tuple[str, ...] | None = key(
        keys.TextOrList(64), None, doc="cluster(s); exclusive with launch.hostnames"
    )
    workspace: str | None = key(keys.Text(), None, doc="Beaker workspace")
    budget: str | None = key(keys.Text(), None, doc="Beaker budget account")
    priority: str | None = key(keys.Choice(names.BEAKER_PRIORITIES), None, doc="job priority")
    preemptible: bool | None = key(keys.Bool(), None, doc="whether the replica group may be preempted")
    min_runtime: str | None = key(keys.Text(64, DURATION, DURATION_RULE), None, doc="Beaker minRuntime")
    timeout: str | None = key(keys.Text(64, DURATION, DURATION_RULE), None, doc="Beaker task timeout")
    auto_resume: bool | None = key(keys.Bool(), None, doc="Beaker autoResume: restart the task after preemption")
    max_retries: int | None = key(
        keys.Int(-1, 10000), None, doc="the Beaker spelling of launch.max_retries (both set must agree)"
    )
    shared_memory: str | None = key(keys.Text(64), None, doc='Beaker sharedMemory, e.g. "200 GiB"')


@dataclass(frozen=True, kw_only=True)
class SlurmConfig:
    partition: str | None = key(keys.Text(), None, doc="partition (absent: the cluster's default)")
    account: str | None = key(keys.Text(), None, doc="account to charge")
    qos: str | None = key(keys.Text(), None, doc="quality of service")
    time: str | None = key(
        keys.Text(pattern=r"(\d+-)?\d+(:\d{1,2}){0,2}", rule='a Slurm time such as "04:00:00" or "1-00:00:00"'),
        None,
        doc="walltime of the job",
    )
    directives: tuple[str, ...] = key(
        keys.TextList(64, keys.Text(255)),
        (),
        doc='extra #SBATCH directives in long form, e.g. ["--exclusive", "--mem=0"]; ones the renderer '
        "writes (nodes, tasks, GPUs, output, job name, ...) or that a key above sets are refused",
    )
    agent: str = key(
        keys.Text(4096),
        "gym-agent",
        doc="the command that runs gym-agent on every node (a name on the nodes' PATH or an absolute path)",
    )
    explicit_address: bool = key(
        keys.Bool(),
        False,
        doc="pass each node's `hostname --ip-address` to gym-agent as an explicit --address; this lets a "
        "loopback address through, so it is for single-machine test clusters only (off: a node whose "
        "hostname resolves to loopback is refused)",
        rule=SAFETY,
    )


ABSOLUTE = keys.Text(pattern="/.*", rule="an absolute path")


@dataclass(frozen=True, kw_only=True)
class SkyPilotMount:
    """The run directory's shared filesystem on every node of a SkyPilot task: exactly one of
    ``volume`` (a SkyPilot volume) or ``host_path`` (a directory of the nodes' own shared filesystem)."""

    path: str | None = key(
        ABSOLUTE,
        None,
        doc="where the filesystem is mounted on every node (the task's volumes key); output.root must be inside "
        "it; required with volume or host_path",
    )
    volume: str | None = key(
        keys.Text(253),
        None,
        doc="a SkyPilot volume (`sky volumes apply`) that every node mounts read-write: a Kubernetes PVC with "
        "access_mode ReadWriteMany (NFS, Lustre, Weka, CephFS behind it), a k8s-hostpath or RunPod network volume; "
        "rendered as volumes: {path: volume}",
    )
    host_path: str | None = key(
        ABSOLUTE,
        None,
        doc="a directory of a shared POSIX filesystem the nodes already mount (Slurm infra only, as SkyPilot "
        "allows); rendered as volumes: {path: {host_path, mode: rw}}",
    )


@dataclass(frozen=True, kw_only=True)
class SkyPilotConfig:
    """One SkyPilot task: num_nodes = the plan's replicas, one gym-agent per node."""

    infra: str | None = key(
        keys.Text(255),
        None,
        doc='where the task runs (resources.infra): a cloud ("aws", "gcp/us-central1"), a Kubernetes context '
        '("k8s/my-context", "kubernetes") or a Slurm cluster ("slurm/my-cluster"); absent: any infra SkyPilot '
        "has enabled",
    )
    accelerators: str | None = key(
        keys.Text(64, r"[A-Za-z0-9][A-Za-z0-9_.-]*(:\d+)?", 'an accelerator name such as "H100" or "H100:8"'),
        None,
        doc="the GPU type of every node (resources.accelerators NAME:COUNT, COUNT = the plan's GPUs per node); "
        "required when the plan has GPUs",
    )
    image: str | None = key(
        keys.Text(), None, doc="the container image every node runs (resources.image_id docker:IMAGE)"
    )
    cpus: str | None = key(keys.Text(64), None, doc='vCPUs per node (resources.cpus), e.g. "32+"')
    memory: str | None = key(keys.Text(64), None, doc='memory per node in GB (resources.memory), e.g. "256+"')
    use_spot: bool | None = key(keys.Bool(), None, doc="spot/preemptible nodes (resources.use_spot)")
    managed: bool = key(
        keys.Bool(),
        True,
        doc="submit as a managed job (sky.jobs.launch: SkyPilot recovers preempted nodes and restarts failed "
        "ones, each restart a new attempt of the run); false: sky.launch on a cluster of its own",
    )
    recovery: str | None = key(
        keys.Choice(names.SKYPILOT_RECOVERY),
        None,
        doc="managed jobs' recovery strategy after a preemption (resources.job_recovery.strategy)",
    )
    cluster: str | None = key(
        keys.Text(63, r"[a-z]([-a-z0-9]*[a-z0-9])?", "a SkyPilot cluster name (lower case, digits, '-')"),
        None,
        doc="sky.launch's cluster name (managed = false only; absent: the run's name and uuid)",
    )
    setup: str | None = key(keys.Text(16384), None, doc="commands run once on every node before the agent (task setup)")
    agent: str = key(
        keys.Text(4096),
        "gym-agent",
        doc="the command that runs gym-agent on every node (a name on the image's PATH or an absolute path)",
    )
    mount: SkyPilotMount = section(
        SkyPilotMount,
        doc="the shared filesystem of the run directory (required for more than one node); bucket, source and "
        "store are refused: an object-store mount has no atomic rename",
    )


PREFLIGHT_RULE = "gym-agent (node preflight, issue 36)"
CHECK_MODES = ("fail", "warn", "off")


def check_mode(default: str, doc: str) -> Any:
    """A [launch.preflight] check's mode: "fail", "warn" or "off"."""
    return key(keys.Choice(CHECK_MODES), default, doc=doc, rule=PREFLIGHT_RULE)


@dataclass(frozen=True, kw_only=True)
class PreflightConfig:
    """What each node checks after plan agreement, before Ray and the judges start (agent/preflight/).
    Each check is "fail" (a problem fails the run, kind preflight), "warn" (recorded and audited as a
    warning) or "off"."""

    gpus: str = check_mode(
        "fail",
        "through NVML: the planned GPUs exist, carry no process of another job, have min_free_gpu_memory "
        "free and no uncorrectable ECC error or pending page retirement; without NVML: skipped, never failed",
    )
    shm: str = check_mode(
        "warn",
        "/dev/shm has min_free_shm free; earlier jobs' segments (NCCL, torch, vLLM, SGLang) are reported",
    )
    network: str = check_mode(
        "fail",
        "NCCL_/GLOO_/TP_SOCKET_IFNAME name an interface here, the one this node's address is on; every "
        "peer's address answers a probe (on its doorbell port)",
    )
    disk: str = check_mode(
        "fail",
        "the output root and the checkpoint directory have min_free_disk free",
    )
    limits: str = check_mode(
        "warn",
        "open files (soft limit) at least min_open_files; locked memory at least min_locked_memory on a node "
        "with RDMA devices",
    )
    min_free_gpu_memory: float = key(
        keys.Number(0, 1), 0.95, doc="fraction of each planned GPU's memory that must be free", rule=PREFLIGHT_RULE
    )
    min_free_shm: str | int = key(keys.Size(), "1GiB", doc="free space /dev/shm must have", rule=PREFLIGHT_RULE)
    min_free_disk: str | int = key(
        keys.Size(),
        "10GiB",
        doc="free space the output root and the checkpoint directory must have",
        rule=PREFLIGHT_RULE,
    )
    clean_shm: bool = key(
        keys.Bool(),
        False,
        doc="remove the leftover /dev/shm segments found (only this user's, only those older than this job)",
        rule=PREFLIGHT_RULE,
    )
    gpu_release_timeout: float = key(
        keys.Seconds(0.1, 3600),
        30.0,
        doc="at teardown, how long each planned GPU's used memory may take to fall back to what the preflight "
        "saw; past it cleanup-RANK.json names the processes still holding it (NVML only)",
        rule=PREFLIGHT_RULE,
    )
    min_open_files: int = key(
        keys.Int(0, 1 << 30), 65536, doc="the open-files soft limit (ulimit -n) a node must give", rule=PREFLIGHT_RULE
    )
    min_locked_memory: str | int = key(
        keys.Size(unlimited=True),
        "unlimited",
        doc="the locked-memory soft limit (ulimit -l) a node with RDMA devices must give (RDMA pins its buffers)",
        rule=PREFLIGHT_RULE,
    )

    @property
    def min_free_shm_bytes(self) -> int:
        return keys.parse_size(self.min_free_shm) or 0

    @property
    def min_free_disk_bytes(self) -> int:
        return keys.parse_size(self.min_free_disk) or 0

    @property
    def min_locked_memory_bytes(self) -> int | None:
        """None: unlimited."""
        return None if self.min_locked_memory == keys.UNLIMITED else keys.parse_size(self.min_locked_memory)

    def mode(self, check: str) -> str:
        return str(getattr(self, check))


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    gpus_per_replica: int = key(
        keys.Int(1, MAX_NODE_GPUS), 8, doc="physical GPUs allocated to each replica", rule=SEED_PLACEMENT
    )
    node_gpus: int = key(
        keys.Int(1, MAX_NODE_GPUS),
        8,
        doc="physical GPUs of one node; multi-node replicas must be whole nodes",
        rule=SEED_PLACEMENT,
    )
    hostnames: tuple[str, ...] = key(
        keys.TextList(MAX_NODES, keys.Text(255)),
        (),
        doc="the one shared hostname allowlist: an agent refuses to run on a host not listed (empty: any host)",
        rule="seed 000 (scheduling)",
    )
    backend: str = key(keys.Choice(names.LAUNCH_BACKENDS), "local", doc="default --backend of render and submit")
    env: Mapping[str, str] = key(
        keys.Table(keys.Text(), MAX_ENV),
        {},
        doc="environment of every replica's job (not secret: no credentials)",
        rule=SAFETY,
    )
    secrets: Mapping[str, str] = key(
        keys.Table(keys.Text(255), MAX_ENV),
        {},
        doc="environment variable -> name of a scheduler secret (Beaker secret); never a value",
        rule=SAFETY,
    )
    weka_mounts: tuple[Mapping[str, str], ...] = key(
        keys.Mounts(64),
        (),
        doc="[[launch.weka_mounts]] weka = FILESYSTEM, mount_path = ABSOLUTE PATH: shared filesystems of the job",
    )
    max_retries: int | None = key(
        keys.Int(-1, 10000),
        None,
        doc="restarts of the run allowed after its first attempt, counted from its attempts/ on every backend "
        "(absent or -1: no cap); a restart past it is refused with exit 2",
    )
    max_no_progress_attempts: int | None = key(
        keys.Int(1, 1000),
        3,
        doc="stop after this many attempts in a row that wrote no new checkpoint (a run that never checkpoints: "
        "that failed the same way)",
    )
    coordination: Coordination = section(Coordination, doc="timeouts of the agents' coordination")
    preflight: PreflightConfig = section(
        PreflightConfig,
        doc="what every node checks before Ray and the judges start (GPUs, /dev/shm, network, disk, limits)",
    )
    beaker: BeakerConfig = section(BeakerConfig, doc="Beaker replica group settings")
    slurm: SlurmConfig = section(SlurmConfig, doc="Slurm job settings")
    skypilot: SkyPilotConfig = section(
        SkyPilotConfig,
        doc="SkyPilot task settings. SkyPilot's own fields that gym-launch writes (num_nodes, run, envs, secrets, "
        "volumes, file_mounts, workdir, job_recovery, max_restarts_on_errors, cloud, region, zone, image_id) are "
        "refused by name, saying which key sets them",
    )


@dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    nodes: int = key(
        keys.Int(0, MAX_NODES),
        1,
        doc="trainer nodes; 0 = no trainer, which trains nothing: an evaluation run (rollout engines and judges "
        "for a benchmark driver, inference.gpus > 0; the driver goes to the last rollout node) or a judge-only "
        "job (gym-launch regrade: no rollout, its nodes are its [pools])",
        rule=SEED_PLACEMENT,
    )
    gpus_per_node: int = key(keys.Int(1, MAX_NODE_GPUS), doc="trainer GPUs on each trainer node", rule=SEED_PLACEMENT)
    node_pool: str | None = key(
        keys.Text(MAX_NAME),
        None,
        doc="a [pools.NAME] the trainer runs on, sized against it (absent: the pools no service is pinned to)",
        rule=SEED_POOLS,
    )

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True)
class InferenceConfig:
    gpus: int = key(keys.Int(0, MAX_GPUS), doc="rollout GPUs in all (0 for none)", rule=SEED_PLACEMENT)
    tensor_parallel_size: int = key(
        keys.Int(1, MAX_NODE_GPUS),
        1,
        doc="GPUs of one rollout engine; must divide gpus_per_replica",
        rule=SEED_PLACEMENT,
    )
    placement_mode: str = key(
        keys.Choice(names.PLACEMENT_MODES),
        "disaggregated",
        doc='"colocated" shares the trainer\'s GPUs and is single-node only',
        rule=SEED_PLACEMENT,
    )
    node_pool: str | None = key(
        keys.Text(MAX_NAME),
        None,
        doc="a [pools.NAME] the rollout engines run on, sized against it (absent: the pools no service is pinned to)",
        rule=SEED_POOLS,
    )


EVIDENCE_PRESETS = ("miles",)
SEED_EVIDENCE = "seed 000 (process exit alone is insufficient)"
# `[driver.evidence] refresh`: "none" says the trainer has no separate policy refresh.
REFRESH_NONE = "none"
EVIDENCE_REFRESH = (REFRESH_NONE,)


@dataclass(frozen=True, kw_only=True)
class LedgerConfig:
    """The dataset order the sample ledger (agent.driver_api.ledger) is checked against."""

    order: str | None = key(
        keys.Text(),
        None,
        doc="a file of the dataset's sample ids, one a line, relative to the spec file's folder: the order every "
        "epoch yields them (epoch E of ledger(step, ids, epoch=E) is the E-th pass over this file, in its "
        "order, or in the shuffle shuffle_seed states). The audit checks the stream of ids the driver "
        "recorded, across every attempt of the run, against it: data.skipped, data.repeated; absent: the "
        "ledger is summarised, not checked",
    )
    shuffle_seed: int | None = key(
        keys.Int(0, 2**63 - 1),
        None,
        doc="the sampler reshuffles every epoch by the one rule the audit can recompute: epoch E yields the "
        "order's lines in agent.driver_api.epoch_order(N, shuffle_seed, E) (a keyed splitmix64 of each line "
        "number, sorted); absent: every epoch in the file's own order",
    )

    def order_path(self, base_dir: str | None) -> str | None:
        """``order`` as a path: a relative one resolves from the spec file's folder (like [data])."""
        if self.order is None or os.path.isabs(self.order) or base_dir is None:
            return self.order
        return os.path.join(base_dir, self.order)


@dataclass(frozen=True, kw_only=True)
class EvidenceConfig:
    """What the driver itself leaves behind that shows it trained, for a driver that writes no
    driver-result.json (a real trainer). Every path is inside the run directory: the audit reads
    nothing outside it."""

    preset: str | None = key(
        keys.Choice(EVIDENCE_PRESETS),
        None,
        doc='"miles": the MILES trainer\'s own records in save_dir: training_contract_rank*.jsonl '
        '(`event = "optimizer"` lines with `step` 1..N) and publication.jsonl (policy refreshes); '
        "the default of a MILES run file",
        rule=SEED_EVIDENCE,
    )
    save_dir: str = key(
        keys.RunPath(),
        "checkpoints",
        doc="the trainer's save directory, relative to the run directory (checkpoints = $GYM_CHECKPOINT_DIR: "
        "point the trainer's save path there)",
    )
    metrics: str | None = key(
        keys.RunPath(),
        None,
        doc="a JSONL of the trainer's metrics, relative to the run directory: one object per line, a line "
        "with a number in step_field is one optimizer step",
        rule=SEED_EVIDENCE,
    )
    rollouts: str | None = key(
        keys.RunPath(),
        None,
        doc="a directory of the trainer's rollout dumps, relative to the run directory: its *.jsonl files, one "
        "sample per line; the audit validates and summarises each sample's metadata.verifier_diagnostics per "
        "binding (status, failed attempts). Absent, or never written: not read, no finding",
        rule=SEED_EVIDENCE,
    )
    step_field: str = key(keys.Text(MAX_NAME), "step", doc="metrics: the key of the step number")
    loss_field: str | None = key(
        keys.Text(MAX_NAME), None, doc="metrics: the key of the loss, which must be finite wherever it is present"
    )
    refresh_field: str | None = key(
        keys.Text(MAX_NAME),
        None,
        doc="metrics: the key of the policy version (or refresh count) rollouts use; some line must show >= 1 "
        '(absent: another source must show the refresh, or refresh = "none")',
    )
    log_step_pattern: str | None = key(
        keys.Regex(1024),
        None,
        doc="a regular expression over the driver's log (driver-RANK.log): every matching line is one optimizer "
        "step; a named group `loss` must be a finite number",
        rule=SEED_EVIDENCE,
    )
    log_refresh_pattern: str | None = key(
        keys.Regex(1024),
        None,
        doc="a regular expression over the driver's log: every matching line is one policy refresh",
    )
    refresh: str | None = key(
        keys.Choice(EVIDENCE_REFRESH),
        None,
        doc='"none": the trainer has no separate policy refresh (a colocated single-node run updates in place the '
        "weights its rollouts use), so no evidence can show one; the audit reports this choice; refused where "
        "rollout has GPUs of its own (disaggregated). Absent: the "
        "evidence must prove a refresh (the preset, refresh_field or log_refresh_pattern)",
        rule=SEED_EVIDENCE,
    )

    @property
    def declared(self) -> bool:
        """Whether any evidence is declared at all (a default table declares none)."""
        return self.preset is not None or self.metrics is not None or self.log_step_pattern is not None

    @property
    def refresh_none(self) -> bool:
        return self.refresh == REFRESH_NONE

    def _source_key(self) -> str:
        return "metrics" if self.metrics is not None else "log_step_pattern"

    def _shows_losses(self) -> bool:
        if self.preset is not None or (self.metrics is not None and self.loss_field is not None):
            return True
        try:
            return "loss" in re.compile(self.log_step_pattern or "").groupindex
        except re.error:
            return True  # an invalid pattern is refused by its own key's rule

    def problems(self) -> list[tuple[str, str]]:
        """(key, what to change) for keys that mean nothing without the key they refine."""
        out = []
        for name in ("loss_field", "refresh_field"):
            if getattr(self, name) is not None and self.metrics is None:
                out.append((name, "refines metrics, which is not set: set metrics = PATH of the JSONL it is in"))
        if self.log_refresh_pattern is not None and not self.declared:
            out.append(
                (
                    "log_refresh_pattern",
                    "shows refreshes, not steps: declare the steps too (preset, metrics or log_step_pattern)",
                )
            )
        # Seed 000: a successful run shows finite optimizer steps and a policy refresh; a declared source
        # that could show neither would let a run pass on its exit alone.
        proves_refresh = any(v is not None for v in (self.preset, self.refresh_field, self.log_refresh_pattern))
        if self.refresh_none and (self.refresh_field is not None or self.log_refresh_pattern is not None):
            out.append(
                (
                    "refresh",
                    '"none" says the trainer has no separate policy refresh, yet refresh_field or '
                    "log_refresh_pattern declares one: keep one of them",
                )
            )
        lacking = []
        if self.declared and not proves_refresh and not self.refresh_none:
            lacking.append(
                "proves no policy refresh (seed 000: a successful run shows one): declare refresh_field (metrics) "
                'or log_refresh_pattern, or say refresh = "none" when the trainer really has no separate refresh '
                "(a colocated single-node run)"
            )
        if self.declared and not self._shows_losses():
            lacking.append(
                "shows no loss, so nothing proves the losses finite (seed 000): declare loss_field (metrics) or a "
                "named group (?P<loss>...) in log_step_pattern"
            )
        if lacking:
            out.append((self._source_key(), "; and it ".join(lacking)))
        return out


@dataclass(frozen=True, kw_only=True)
class DriverConfig:
    """``command`` is an argv tuple, or one string to run through the shell."""

    command: tuple[str, ...] | str = key(
        keys.TextOrList(MAX_ARGS),
        doc="the training driver: an array of arguments, or one shell string; no credentials: "
        '"${runtime:NAME}" passes one by reference (see Credentials on a command line)',
    )
    env: Mapping[str, str] = key(
        keys.Table(keys.Text(), MAX_ENV),
        {},
        doc='environment of the driver; "runtime:VAR" takes VAR from the job\'s environment; no credentials',
        rule=SAFETY,
    )
    placement: str = key(
        keys.Choice(names.DRIVER_PLACEMENTS),
        "trainer",
        doc='"trainer" = trainer rank 0; "inference" = the last node holding rollout GPUs (no effect without any); '
        "a run without a trainer puts its driver on its policy's first node whatever this says",
        rule=SEED_DRIVER,
    )
    checkpoint_grace: float | None = key(
        keys.Seconds(1, 3600),
        None,
        doc="on a peer failure, a signal or the scheduler's walltime warning, the driver is asked to checkpoint "
        "(GYM_STOP_FILE appears) and given this long to exit before the teardown; absent: immediate teardown",
    )
    progress_timeout: float = key(
        keys.SecondsOrOff(1, 7 * 86400),
        1800.0,
        doc="the driver's node ends the run as `hang` when the driver made no progress for this long after its "
        "first: agent.driver_api.progress() calls, else [driver.evidence], else grades in grades-RANK.jsonl, "
        "else (only when none of those exists) new driver output (0: hang detection off)",
        rule=HANG_RULE,
    )
    first_progress_timeout: float = key(
        keys.SecondsOrOff(1, 7 * 86400),
        3600.0,
        doc="the same, from the driver's start until its first progress (loading weights, compiling); 0: no "
        "bound on the first progress (progress_timeout = 0 turns both off)",
        rule=HANG_RULE,
    )
    collective_trace: bool | None = key(
        keys.Bool(),
        None,
        doc="arm PyTorch's Flight Recorder for the driver and its Ray workers (TORCH_FR_BUFFER_SIZE) and, on a "
        "hang, keep each torch.distributed process's collectives (collectives-RANK.json; the process must have "
        "imported agent.driver_api); absent: on when torch is importable by the agent's Python",
        derived="on when torch is importable",
    )
    trains: bool = key(
        keys.Bool(),
        True,
        doc="false: the driver trains nothing (a benchmark, an evaluation, a coordination test), so exit 0 is "
        "success and the audit requires no evidence of training; a run without a trainer (trainer.nodes = 0) "
        "trains nothing either",
        rule=SEED_EVIDENCE,
    )
    evidence: EvidenceConfig = section(
        EvidenceConfig,
        doc="evidence of training the driver leaves itself, accepted instead of driver-result.json",
    )
    ledger: LedgerConfig = section(
        LedgerConfig,
        doc="the sample ledger's dataset order (agent.driver_api.ledger, checkpoint; docs/guides/sample-ledger.md)",
    )


MANAGED = ("managed",)
EXTERNAL = ("external",)

# --- a service's own process (seed 001): container, mounts, pre_command, env, health check ------------

SEED_SERVICES = "seed 001 (services: container, env, health check)"
IMAGE_RULE = "a container image reference without spaces or commas"
# Pyxis takes one comma-separated --container-mounts: no comma or space inside an entry.
MOUNT_RULE = "SRC:DST or SRC:DST:FLAGS, both absolute paths, without spaces or commas"
MOUNT_PATTERN = r"/[^,:\s]*:/[^,:\s]*(:[^,:\s]+)?"
HEALTH_PATH_RULE = "an HTTP path starting with /, without spaces"


def container_key(what: str, modes: tuple[str, ...] = ()) -> Any:
    return key(
        keys.Text(512, r"[^,\s]+", IMAGE_RULE),
        None,
        doc=f"a container image {what} runs in (Slurm with Pyxis: its step is srun --container-image=IMAGE); "
        "absent: the agent's own environment. Refused where the scheduler has no per-step container "
        "(gym-launch local, Beaker, SkyPilot)",
        rule=SEED_SERVICES,
        modes=modes,
    )


def container_mounts_key(modes: tuple[str, ...] = ()) -> Any:
    return key(
        keys.TextList(64, keys.Text(1024, MOUNT_PATTERN, MOUNT_RULE)),
        (),
        doc='bind mounts of the container: ["SRC:DST", "SRC:DST:ro"] (srun --container-mounts); needs container',
        rule=SEED_SERVICES,
        modes=modes,
    )


def pre_command_key(what: str, modes: tuple[str, ...] = ()) -> Any:
    return key(
        keys.Text(16384),
        None,
        doc=f"shell text run (bash) in {what}'s own process, in its container if any, just before it starts, in "
        "the same shell (exports reach it); a failure (non-zero exit) fails the service; no credentials",
        rule=SEED_SERVICES,
        modes=modes,
    )


def service_env_key(what: str, modes: tuple[str, ...] = ()) -> Any:
    return key(
        keys.Table(keys.Text(), MAX_ENV),
        {},
        doc=f"environment of {what} (on top of the agent's); \"runtime:VAR\" takes VAR from the job's "
        "environment when it starts (never written resolved); no credentials",
        rule=SEED_SERVICES,
        modes=modes,
    )


def health_path_key(modes: tuple[str, ...] = ()) -> Any:
    return key(
        keys.Text(512, r"/\S*", HEALTH_PATH_RULE),
        "/health",
        doc="the health check: an HTTP GET of this path on the server's own port, on its first node, until it "
        "answers 2xx (then /v1/models must list the model); a check that never answers fails the run naming "
        "the service, the node and what the check got last",
        rule=SEED_SERVICES,
        modes=modes,
    )


def health_timeout_key(modes: tuple[str, ...] = ()) -> Any:
    return key(
        keys.Seconds(1, 7 * 86400),
        None,
        doc="seconds the health check may take from the server's start (absent: the run's startup deadline, "
        "launch.coordination.startup_timeout)",
        rule=SEED_SERVICES,
        modes=modes,
    )


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    """A named judge service. Placement fields are None/0 for external judges."""

    name: str
    mode: str = key(
        keys.Choice(names.JUDGE_MODES), doc='"managed" (the agent starts it) or "external"', rule=SEED_JUDGES
    )
    backend: str | None = key(
        keys.Choice(names.JUDGE_BACKENDS),
        None,
        doc='"sglang", "vllm", or "reference" (the project\'s small CPU judge, for tests and demos)',
        modes=MANAGED,
        derived='"sglang" for a managed judge',
    )
    model: str = key(keys.Text(), doc="served model name (what /v1/models lists)", rule=SEED_JUDGES)
    revision: str | None = key(
        keys.Text(pattern="[0-9a-f]{40}", rule="an immutable commit: 40 lowercase hex digits"),
        None,
        doc="pinned model revision; the prepared directory must prove it (required for sglang and vllm)",
        rule=SEED_JUDGES,
        modes=MANAGED,
    )
    prepared_dir: str | None = key(
        keys.AbsolutePath(),
        None,
        doc="weights prepared before GPU allocation (required for sglang and vllm)",
        rule=SEED_JUDGES,
        modes=MANAGED,
    )
    weights: str | None = key(
        keys.Text(),
        None,
        doc="what the engine loads as given, without prepared_dir: a NeMo Gym config's services.NAME.model "
        "(a hub id, at revision when set; unpinned without). Only a NeMo Gym config sets it: a TOML spec "
        "serves pinned, staged weights (revision, prepared_dir)",
        rule=SEED_POOLS,
        modes=MANAGED,
    )
    gpus: int = key(keys.Int(1, MAX_NODE_GPUS), 1, doc="GPUs of the server", modes=MANAGED)
    tensor_parallel_size: int | None = key(
        keys.Int(1, MAX_NODE_GPUS),
        None,
        doc="must equal gpus: one server spans its GPUs",
        modes=MANAGED,
        derived="gpus",
    )
    chat_template: str | None = key(
        keys.Choice(names.CHAT_TEMPLATES),
        None,
        doc="chat template passed to the server",
        rule=SEED_JUDGES,
        modes=MANAGED,
        derived=f'"{names.DEFAULT_CHAT_TEMPLATE}" for a managed judge',
    )
    max_context_length: int = key(
        keys.Int(1, MAX_CONTEXT),
        40960,
        doc="the judge's context in tokens: the client rejects a request plus output reservation above it",
        rule=SEED_JUDGES,
    )
    context_check: str | None = key(
        keys.Choice(names.CONTEXT_CHECKS),
        None,
        doc='"tokenize": the client counts every grading request with the judge\'s /tokenize and refuses one '
        'whose prompt plus output reservation exceeds max_context_length (never truncating); "none": the '
        "service enforces its own context",
        rule=SEED_JUDGES,
        derived='"tokenize" for a managed judge, "none" for an external one',
    )
    max_concurrent_calls: int = key(
        keys.Int(1, MAX_CONCURRENCY),
        16,
        doc="concurrent grading calls; the managed server's running-request limit",
        rule=SEED_JUDGES,
    )
    timeout: int = key(
        keys.Int(1, 86400),
        600,
        doc="seconds per HTTP request (not a total budget across retries)",
        rule=SEED_JUDGES,
    )
    canary_interval: int = key(
        keys.Int(0, 30 * 86400),
        1800,
        doc="seconds between canaries during the run: known-good and known-bad graded again through every "
        "binding of this judge (through its gateway, marked as canaries); known-bad at or above known-good, or "
        "no valid grade, fails the run as judge_degraded. 0: only the canaries before training",
        rule=CANARY_RULE,
    )
    canary: bool = key(
        keys.Bool(),
        True,
        doc="false: no canaries for this judge's bindings, before or during the run (a judge that cannot tell "
        "right from wrong, such as a test's random weights, would fail them); its grades are then unchecked, "
        "and the run's console says so",
        rule=CANARY_RULE,
    )
    # None = key absent (eager); kept distinct from False, as in the fingerprint.
    cuda_graphs: bool | None = key(
        keys.Bool(), None, doc="CUDA graphs for decode and prefill (absent: eager)", rule=SEED_JUDGES, modes=MANAGED
    )
    context_extension: str | None = key(
        keys.Choice(tuple(names.CONTEXT_EXTENSIONS)),
        None,
        doc='"qwen3-yarn-128k": YaRN factor 4 over 32768, Qwen/Qwen3-32B only, max_context_length <= 131072',
        rule=SEED_JUDGES,
        modes=MANAGED,
    )
    extra_args: tuple[str, ...] = key(
        keys.TextList(64),
        (),
        doc="appended to the server's command line (sglang, vllm); flags the agent sets from the spec (model, "
        "ports, host, parallelism, context, template) are refused; no credentials",
        modes=MANAGED,
    )
    endpoint: str | None = key(
        keys.Url(), None, doc="the external service's URL (required for external judges)", modes=EXTERNAL
    )
    node_pool: str | None = key(
        keys.Text(MAX_NAME),
        None,
        doc="a [pools.NAME] the judge runs on, sized against it",
        rule=SEED_POOLS,
        modes=MANAGED,
    )
    container: str | None = container_key("the judge's server", MANAGED)
    container_mounts: tuple[str, ...] = container_mounts_key(MANAGED)
    pre_command: str | None = pre_command_key("the judge's server", MANAGED)
    env: Mapping[str, str] = service_env_key("the judge's server", MANAGED)
    health_path: str = health_path_key(MANAGED)
    health_timeout: float | None = health_timeout_key(MANAGED)

    def __post_init__(self) -> None:
        # Mode-dependent defaults, applied here and nowhere else.
        if self.context_check is None:
            object.__setattr__(self, "context_check", "tokenize" if self.mode == "managed" else "none")
        if self.mode == "managed":
            if self.backend is None:
                object.__setattr__(self, "backend", "sglang")
            if self.tensor_parallel_size is None:
                object.__setattr__(self, "tensor_parallel_size", self.gpus)
            if self.chat_template is None:
                object.__setattr__(self, "chat_template", names.DEFAULT_CHAT_TEMPLATE)
        else:
            # An external judge's serving is owned by its endpoint: it takes no GPU here.
            object.__setattr__(self, "gpus", 0)
            object.__setattr__(self, "tensor_parallel_size", 0)

    @property
    def managed(self) -> bool:
        return self.mode == "managed"


def _as_judge(name: str, default: Any, doc: str = "") -> Any:
    """A [policy] key that means what the judge's key ``name`` means: the judge's value type, rule
    and words (``doc`` replaces the words where they speak of judges), declared once, there."""
    info = next(key_info(f) for f in fields(JudgeConfig) if f.name == name)
    assert info is not None
    return key(info.type, default, doc=doc or info.doc, rule=info.rule)


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """The policy service (seed 001): a managed OpenAI-compatible server for the policy, pinned to a
    pool like any service; the driver runs on its first node and gets GYM_POLICY_URL. Absent
    (``mode`` unset): no policy service. Its keys are a judge's where they mean the same."""

    mode: str | None = _as_judge(
        "mode", None, '"managed": the agents start, gate and stop the policy server (absent: no policy service)'
    )
    backend: str | None = key(
        keys.Choice(names.POLICY_BACKENDS),
        None,
        doc='the engine serving the policy: "vllm" or "sglang" (required with mode)',
        rule=SEED_POOLS,
    )
    model: str | None = _as_judge("model", None, "served model name (what /v1/models lists; required with mode)")
    revision: str | None = _as_judge("revision", None, "pinned model revision; the prepared directory must prove it")
    prepared_dir: str | None = _as_judge("prepared_dir", None, "weights prepared before GPU allocation")
    weights: str | None = _as_judge("weights", None)
    tensor_parallel_size: int = key(
        keys.Int(1, MAX_GPUS),
        1,
        doc="GPUs of the server; more than a node's: whole nodes of its pool, one engine across them "
        "(the engine's own multi-node flags)",
        rule=SEED_POOLS,
    )
    port: int = key(
        keys.Int(1024, 9998),
        names.POLICY_PORT,
        doc="the server's HTTP port on its first node (the engine may bind the next one too); below the "
        "agents' port blocks (10000 and up), so judges and Ray never collide with it",
        rule=SEED_POOLS,
    )
    node_pool: str | None = _as_judge(
        "node_pool", None, "a [pools.NAME] the policy runs on, sized against it; the driver runs on its first node"
    )
    extra_args: tuple[str, ...] = _as_judge("extra_args", ())
    container: str | None = container_key("the policy's server")
    container_mounts: tuple[str, ...] = container_mounts_key()
    pre_command: str | None = pre_command_key("the policy's server")
    env: Mapping[str, str] = service_env_key("the policy's server")
    health_path: str = health_path_key()
    health_timeout: float | None = health_timeout_key()

    @property
    def managed(self) -> bool:
        return self.mode == "managed"


@dataclass(frozen=True, kw_only=True)
class RubricConfig:
    """A built-in ``profile`` or the user's own text (``template_file`` pinned by ``template_sha256``)."""

    name: str
    profile: str | None = key(
        keys.Choice(names.RUBRIC_PROFILES),
        None,
        doc="a built-in grading rubric; omit it when template_file names your own text (one of the two is "
        'required). The "open-instruct/..." profiles grade with open-instruct\'s own template, read at run time '
        "from the installed open_instruct package (as the MILES trainer grades) and checked against its pinned "
        "sha256; where the package is missing, install it or give the text as template_file",
        rule=SEED_JUDGES,
    )
    template_file: str | None = key(
        keys.Text(),
        None,
        doc="your own rubric text (a Python format string as open-instruct's judge templates: {input} the question, "
        "{output} the extracted answer, {label} the reference, {{ and }} literal braces; any other field is refused), "
        "relative to the spec file's folder; sent as the one user message, unchanged",
        rule=SEED_JUDGES,
    )
    template_sha256: str | None = key(
        keys.Text(pattern="[0-9a-f]{64}", rule="a sha256 digest: 64 lowercase hex digits"),
        None,
        doc="the sha256 of template_file's bytes (`sha256sum FILE`), required with it; checked at validate and "
        "again when the run writes registry.json",
        rule=SEED_JUDGES,
    )
    max_output_tokens: int = key(
        keys.Int(1, MAX_CONTEXT),
        2048,
        doc="the judge's output reservation; smaller than the judge's context",
        rule=SEED_JUDGES,
    )
    temperature: float = key(
        keys.Number(0, 2),
        1.0,
        doc="sampling temperature of grading calls (the trainer grades with it too)",
        rule=SEED_JUDGES,
    )
    reply_format: str | None = key(
        keys.Choice(names.REPLY_FORMATS),
        None,
        doc='how the judge is asked to reply: "score_line" (a last `SCORE: N` line), "json" '
        '(`{"REASONING": ..., "SCORE": N}` as open-instruct\'s judges reply; read as open-instruct reads it: the '
        'JSON object, else a `"SCORE": N` inside prose, else exactly one `SCORE: N` line) or "decision" '
        "(exactly one distinct `Final Decision: yes|no`: 1.0 or 0.0 whatever score_scale says); anything else is "
        "an invalid grade. A template_file asks in its own words: this only says how its reply is read",
        rule=SEED_JUDGES,
        derived='"score_line"; an open-instruct profile\'s own ("json", "decision" for the web-instruct verifier)',
    )
    invalid_reply_attempts: int = key(
        keys.Int(1, 10),
        3,
        doc="grading requests per sample while the judge's reply is invalid or cut off, 1 s then 2 s (doubling) "
        "apart, as the MILES trainer's client makes them; only then is it an invalid grade (never a zero). A "
        "context overflow is never retried",
        rule=SEED_JUDGES,
    )
    score_scale: tuple[int, int] = key(
        keys.Scale(100),
        (0, 10),
        doc="the scale the judge scores on; the reward is SCORE / MAX (open-instruct's 1-10 judges: [1, 10]); "
        "a score outside it is an invalid grade",
        rule=SEED_JUDGES,
    )
    extract_answer: bool = key(
        keys.Bool(),
        True,
        doc="grade the final answer only: the first <answer> block, else the text after the first </think> "
        "(open-instruct's rule); false sends the response as written",
        rule=SEED_JUDGES,
    )

    def __post_init__(self) -> None:
        # The reply format's default depends on the profile: applied here and nowhere else.
        if self.reply_format is None:
            fmt = names.OPEN_INSTRUCT_REPLY_FORMATS.get(self.profile or "", "score_line")
            object.__setattr__(self, "reply_format", fmt)

    def template_path(self, base_dir: str | None) -> str | None:
        """``template_file`` as a path: a relative one resolves from the spec file's folder (like [data])."""
        if self.template_file is None:
            return None
        if os.path.isabs(self.template_file) or base_dir is None:
            return self.template_file
        return os.path.join(base_dir, self.template_file)

    def table(self, base_dir: str | None) -> dict[str, Any]:
        """This rubric as the judge library reads it (agent.judges.rubrics.rubric_from_spec)."""
        source: dict[str, Any] = (
            {"template_file": self.template_path(base_dir), "template_sha256": self.template_sha256}
            if self.template_file is not None
            else {"profile": self.profile}
        )
        return {
            **source,
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "reply_format": self.reply_format,
            "score_scale": list(self.score_scale),
            "extract_answer": self.extract_answer,
            "invalid_reply_attempts": self.invalid_reply_attempts,
        }


@dataclass(frozen=True, kw_only=True)
class Binding:
    verifier: str
    judge: str = key(keys.Text(MAX_NAME), doc="a [judges.NAME]", rule=SEED_JUDGES)
    rubric: str = key(keys.Text(MAX_NAME), doc="a [rubrics.NAME]", rule=SEED_JUDGES)


@dataclass(frozen=True, kw_only=True)
class JudgingConfig:
    """How drivers' grades are kept and watched (the judge client library applies these keys in
    the driver; registry.json carries them there)."""

    bindings: Mapping[str, Binding] = section(
        Binding,
        named=True,
        limit=MAX_BINDINGS,
        doc='[judging.bindings."VERIFIER"]: which judge and rubric grade a verifier',
    )
    grades_max_bytes: int = key(
        keys.Int(1 << 20, 1 << 36),
        64 * 1024 * 1024,
        doc="size of one segment of grades-RANK.jsonl (every grade a driver makes, one JSON line each): "
        "a full segment is renamed grades-RANK.1.jsonl (older segments move up: .2, .3, ...)",
        rule=GRADES_RULE,
    )
    grades_keep: int = key(
        keys.Int(0, 1000),
        3,
        doc="rotated segments of grades-RANK.jsonl kept besides the one being written (the oldest is "
        "removed); at most (grades_keep + 1) x grades_max_bytes per rank",
        rule=GRADES_RULE,
    )
    degraded_window: int = key(
        keys.Int(1, 1_000_000),
        100,
        doc="the degraded-judge alarm counts each binding's last this many judge replies (graded, invalid "
        "or truncated; errors without a reply do not count)",
        rule=GRADES_RULE,
    )
    degraded_max_share: float = key(
        keys.Number(0, 1),
        0.05,
        doc="the run fails as judge_degraded when more than this share of degraded_window replies of a "
        "binding are invalid or truncated: bad > degraded_max_share x degraded_window (defaults: the 6th "
        "bad reply among the last 100 trips, 5 do not); a run's first replies count against the same "
        "allowance; 1 turns the alarm off, 0 trips on the first bad reply",
        rule=GRADES_RULE,
    )


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    train: str | tuple[str, ...] | None = key(
        keys.TextOrList(64), None, doc="training data (JSONL files), relative to the spec file's folder"
    )
    eval: str | tuple[str, ...] | None = key(
        keys.TextOrList(64), None, doc="held-out data (JSONL files), relative to the spec file's folder"
    )


MAX_TASKS_PER_NODE = 1024


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    name: str
    nodes: int = key(keys.Int(1, MAX_NODES), doc="nodes of the pool", rule=SEED_POOLS)
    gpus_per_node: int = key(
        keys.Int(0, MAX_NODE_GPUS),
        doc="GPUs of each of the pool's nodes: launch.gpus_per_replica; another size (at most launch.node_gpus) "
        "for a pool that holds only what is pinned to it; 0 for a CPU pool, whose agents run coordination only "
        "(no trainer, rollout, managed judge, nor Ray unless ray.node_pools names it). Pools of different "
        "shapes (GPUs, partition) are one Slurm heterogeneous job",
        rule=SEED_POOLS,
    )
    partition: str | None = key(
        keys.Text(),
        None,
        doc="Slurm partition of the pool (absent: launch.slurm.partition, else the first a pool names); pools "
        "on different partitions are one heterogeneous job",
        rule=SEED_POOLS,
    )
    qos: str | None = key(
        keys.Text(),
        None,
        doc="Slurm QOS of the pool's partition (a judge-only job queued there takes it: gym-launch regrade)",
        rule=SEED_POOLS,
    )
    tasks_per_node: int = key(
        keys.Int(1, MAX_TASKS_PER_NODE),
        1,
        doc="Slurm tasks per node of the pool's allocation (--ntasks-per-node of its job component): the task "
        "slots the driver's own srun steps may use (srun --overlap); the agents still run one per node. Pools "
        "that differ in it are separate components of one heterogeneous job",
        rule=SEED_POOLS,
    )

    @property
    def cpu_only(self) -> bool:
        return self.gpus_per_node == 0


@dataclass(frozen=True, kw_only=True)
class RayConfig:
    """``enabled = false`` runs coordination only (no Ray): benchmarks and drivers that need none.
    Absent, Ray starts only where something needs it (seed 001): the trainer, rollout engines, or a
    declared ``[ray]`` table (a Ray service for a benchmark that places its own devices)."""

    # None = key absent; RunConfig decides it (see RAY_NEEDED) and nothing downstream sees None.
    enabled: bool | None = key(
        keys.Bool(),
        None,
        doc="start Ray (false: coordination only)",
        derived="true when the trainer runs (trainer.nodes > 0), rollout engines are planned (inference.gpus > 0) "
        "or the spec has a [ray] table; false otherwise (an evaluation run with no [ray] starts no Ray)",
        rule=SEED_POOLS,
    )
    name: str = key(
        keys.Text(MAX_NAME, names.RAY_NAME.pattern, names.RAY_NAME_RULE),
        "cluster",
        doc="the Ray service's name: its head's host:port is GYM_RAY_ADDRESS_<NAME> (in the environment of the "
        "driver and of every Ray node; a Slurm job exports it to every node), and each pool's agents run in a "
        "Slurm step named <name>_<pool>_workers",
        rule=SEED_POOLS,
    )
    num_cpus: int | None = key(keys.Int(0, 65536), None, doc="CPUs each Ray node advertises (absent: Ray's count)")
    object_store_memory: int | None = key(keys.Int(1, 1 << 50), None, doc="bytes of each node's object store")
    # pool name -> {resource name -> amount}
    resources: Mapping[str, Mapping[str, float]] = key(
        keys.Table(keys.Opaque("table of resource = amount", {"type": "object"}), MAX_POOLS),
        {},
        doc="custom Ray resources per pool: {POOL = {NAME = amount}}",
        rule=SEED_POOLS,
    )
    # None = key absent: every node joins (the cluster spans the whole allocation).
    node_pools: tuple[str, ...] | None = key(
        keys.TextList(MAX_POOLS, keys.Text(MAX_NAME)),
        None,
        doc="[pools.NAME]s the Ray cluster spans: the head starts on the driver's node and every node of "
        "these pools joins it; [] = a single-node cluster on the driver's node (absent: every node of a GPU "
        "pool; a CPU pool joins only when named here)",
        rule=SEED_POOLS,
    )
    extra_args: tuple[str, ...] = key(
        keys.TextList(64),
        (),
        doc="appended to ray start on every node; flags the agent owns (ports, addresses, GPUs) are refused; "
        'no credentials ("${runtime:NAME}" passes one by reference)',
        rule=SEED_POOLS,
    )
    container: str | None = container_key("every node's ray start")
    container_mounts: tuple[str, ...] = container_mounts_key()
    pre_command: str | None = pre_command_key("every node's ray start")
    env: Mapping[str, str] = service_env_key("every node's ray start (and so its workers)")
    dashboard: bool = key(
        keys.Bool(),
        False,
        doc="serve Ray's dashboard from the head (its URL is printed on the console); off by default: "
        "it costs a process and a port",
    )
    session_log_bytes: int = key(
        keys.Int(0, 1 << 34),
        16 * 1024 * 1024,
        doc="bytes of Ray's own session logs (raylet, GCS, workers) each node copies into "
        "ray-session-RANK/ at teardown, newest bytes of each file first; 0 keeps none",
    )
    large_cluster_nodes: int = key(
        keys.Int(1, MAX_NODES),
        64,
        doc="a Ray cluster of more nodes than this gets the GCS and raylet settings large clusters need "
        "(longer registration and connection timeouts, a slower health check; agent/ray/_large_cluster.py) and "
        "its workers join with a jittered backoff; ray-head.json records the settings used",
        rule="gym-agent (Ray at scale, issue 36)",
    )
