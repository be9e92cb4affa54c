"""The shared vocabularies of the run directory: phases, states, outcomes, failure kinds, writers,
and the environment the agent gives a driver. Writers and the audit both use these; a test ties
every enum here to the matching enum in the JSON Schemas, so the two cannot drift apart.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = [
    "AgentState",
    "CheckStatus",
    "DriverEnv",
    "FailureKind",
    "FsCondition",
    "GatewayOutcome",
    "GradeOutcome",
    "JobEnv",
    "LauncherEnv",
    "PHASE_INIT",
    "PHASE_UNKNOWN",
    "Phase",
    "PhaseOutcome",
    "PreflightCheck",
    "ProgressSource",
    "ResumeEnv",
    "RunOutcome",
    "STATE_TRANSITIONS",
    "StackMethod",
    "StackReason",
    "WriterKind",
]


class Phase(enum.StrEnum):
    """Lifecycle phases in the order a replica runs them (each node runs the ones that apply)."""

    RENDEZVOUS = "rendezvous"  # address records exchanged through the run directory
    PLAN_AGREEMENT = "plan_agreement"  # every replica resolved the same spec fingerprint
    DATA_CHECK = "data_check"  # every judge-graded verifier in [data] has a binding
    DEVICES = "devices"  # this node sees the GPUs the plan gives a replica
    PREFLIGHT = "preflight"  # GPUs, /dev/shm, network, disk, limits checked (preflight-RANK.json)
    PLACEMENT = "placement"  # placement-RANK.json written (judge devices kept out of Ray's)
    JUDGES_START = "judges_start"  # managed judges started in their own process groups
    RAY_START = "ray_start"  # head on the driver's node, workers on the other nodes of the spanned pools
    JUDGE_HEALTH = "judge_health"  # managed judges answer /health
    READINESS = "readiness"  # head: Ray's live nodes equal the plan, per address (ray-layout.json)
    REGISTRY = "registry"  # registry.json: judges, rubrics, bindings
    CANARIES = "canaries"  # known-good scores above known-bad through every binding
    DRIVER = "driver"  # the training driver runs (on one node); the others supervise
    COMPLETE = "complete"  # driver node writes complete.json; the others read it
    ACKNOWLEDGE = "acknowledge"  # every replica acknowledged before Ray is torn down
    TEARDOWN = "teardown"  # every process group stopped; cleanup-RANK.json


# Where a failure happened before the first phase began, or when the reaper never heard one.
PHASE_INIT = "init"
PHASE_UNKNOWN = "unknown"


class AgentState(enum.StrEnum):
    """What the agent is doing overall (printed with every phase line, kept in phases-RANK.json)."""

    INIT = "INIT"  # parsing arguments, resolving identity
    STARTING = "STARTING"  # inside the single startup deadline
    RUNNING = "RUNNING"  # the driver runs
    STOPPING = "STOPPING"  # tearing down after success or failure
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


# The only allowed state changes. A failure may stop the agent from any non-final state;
# success is reached only through RUNNING -> STOPPING.
STATE_TRANSITIONS: Mapping[AgentState, frozenset[AgentState]] = {
    AgentState.INIT: frozenset({AgentState.STARTING, AgentState.STOPPING}),
    AgentState.STARTING: frozenset({AgentState.RUNNING, AgentState.STOPPING}),
    AgentState.RUNNING: frozenset({AgentState.STOPPING}),
    AgentState.STOPPING: frozenset({AgentState.SUCCEEDED, AgentState.FAILED}),
    AgentState.SUCCEEDED: frozenset(),
    AgentState.FAILED: frozenset(),
}


class PhaseOutcome(enum.StrEnum):
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"


class RunOutcome(enum.StrEnum):
    """How a replica's run ended (ack and cleanup records)."""

    SUCCESS = "success"
    FAILURE = "failure"


class WriterKind(enum.StrEnum):
    AGENT = "agent"
    REAPER = "reaper"
    LAUNCHER = "launcher"
    DRIVER = "driver"


class FailureKind(enum.StrEnum):
    """Why a replica failed (failure-RANK.json `kind`)."""

    CHILD_EXIT = "child_exit"  # a supervised child (Ray) exited
    DRIVER_EXIT = "driver_exit"  # the driver exited non-zero
    JUDGE_HEALTH = "judge_health"  # a healthy judge stopped answering /health
    JUDGE = "judge"  # a managed judge exited
    CANARY = "canary"  # a binding scored known-bad at or above known-good
    JUDGE_DEGRADED = "judge_degraded"  # too many of a binding's last judge replies were invalid or truncated
    SIGNAL = "signal"  # SIGTERM / SIGINT
    PEER_FAILURE = "peer_failure"  # a peer wrote a failure record
    PEER_SILENT = "peer_silent"  # a watched peer's heartbeat stopped changing
    STARTUP_TIMEOUT = "startup_timeout"  # the single startup deadline passed
    ACK_TIMEOUT = "ack_timeout"  # not every replica acknowledged within ack_timeout
    PLAN_MISMATCH = "plan_mismatch"  # replicas resolved different specs, or the wrong count
    ADDRESS_CONFLICT = "address_conflict"  # two replicas on one address
    LAYOUT = "layout"  # Ray's live nodes differ from the plan
    PLACEMENT = "placement"  # GPUs seen differ from the plan
    DATA = "data"  # a judge-graded verifier without a binding
    RUN_DIR = "run_dir"  # the run directory refused an operation (symlink, owner, reuse)
    FS_STALL = "fs_stall"  # the shared filesystem did not answer for longer than fs_stall_timeout
    PORTS = "ports"  # no free port (block) could be allocated
    # A variable the spec takes from the job's environment (${runtime:NAME}, "runtime:NAME") is not set.
    ENVIRONMENT = "environment"
    AGENT_DIED = "agent_died"  # written by the reaper: the agent was killed
    INTERNAL = "internal"  # an agent bug
    PREFLIGHT = "preflight"  # a check of this node before Ray and the judges failed (preflight-RANK.json)
    # The scheduler ended the job (named by the audit from the scheduler's own words: audit/_scheduler_ending.py).
    TIME_LIMIT = "time_limit"  # the job's walltime ran out
    CANCELLED = "cancelled"  # someone cancelled the job (scancel, beaker job cancel)
    NODE_FAILURE = "node_failure"  # a node of the job failed or was set down
    PREEMPTED = "preempted"  # a higher-priority job took the allocation
    # The driver made no progress for [driver] progress_timeout (first_progress_timeout before its first).
    HANG = "hang"


class ProgressSource(enum.StrEnum):
    """What the driver's node watched for the driver's progress (a hang's `source`), in order of
    authority: the first that exists is the one that counts (agent/lifecycle/_progress_watch.py)."""

    PROGRESS = "progress"  # agent.driver_api.progress() calls
    EVIDENCE = "evidence"  # the declared training evidence ([driver.evidence])
    GRADES = "grades"  # grades recorded in grades-RANK.jsonl
    OUTPUT = "output"  # new bytes of driver output (only when none of the above exists)


class StackMethod(enum.StrEnum):
    """How a process's stacks were taken (stacks-RANK.json `method`)."""

    PY_SPY = "py-spy"  # py-spy dump (ptrace), without local variables
    FAULTHANDLER = "faulthandler"  # the signal handler the driver API arms (agent.driver_api imported)
    NONE = "none"  # not taken: the record says why (not Python, no permission, timed out, gone)


class StackReason(enum.StrEnum):
    """Why an agent took its processes' stacks (stacks-RANK.json `reason`)."""

    HANG = "hang"  # the run hangs: before the teardown, on every node
    WALLTIME = "walltime"  # the scheduler's walltime warning came while the driver made no progress
    REQUEST = "request"  # gym-launch stacks asked, while the run goes


class PreflightCheck(enum.StrEnum):
    """The checks of a node's preflight (preflight-RANK.json), in the order they run; each is a key
    of [launch.preflight] set to "fail", "warn" or "off"."""

    GPUS = "gpus"
    SHM = "shm"
    NETWORK = "network"
    DISK = "disk"
    LIMITS = "limits"


class CheckStatus(enum.StrEnum):
    """How one preflight check ended."""

    OK = "ok"
    FAILED = "failed"  # a problem, and the check's mode is "fail": the run fails
    WARNED = "warned"  # a problem, and the check's mode is "warn"
    SKIPPED = "skipped"  # nothing to check here (no NVML, no GPU planned on this node)
    OFF = "off"  # the check's mode is "off"


class GradeOutcome(enum.StrEnum):
    """How one grade through the judge client library ended (grades-RANK.jsonl `outcome`)."""

    GRADED = "graded"  # a valid score
    INVALID = "invalid"  # the judge replied, but without a valid score (unparseable, out of scale, empty)
    TRUNCATED = "truncated"  # the judge's reply was cut off (finish_reason other than "stop")
    OVERFLOW = "overflow"  # the request plus its output reservation does not fit the judge's context
    UNAVAILABLE = "unavailable"  # transport errors or retryable statuses outlasted every retry
    REFUSED = "refused"  # the judge answered the request with a non-retryable HTTP error

    @property
    def replied(self) -> bool:
        """The judge answered with an HTTP 200 chat completion (what a server's own log counts)."""
        return self in (GradeOutcome.GRADED, GradeOutcome.INVALID, GradeOutcome.TRUNCATED)

    @property
    def bad_reply(self) -> bool:
        """A reply the degraded-judge alarm counts against its binding."""
        return self in (GradeOutcome.INVALID, GradeOutcome.TRUNCATED)


class GatewayOutcome(enum.StrEnum):
    """How one request through a judge's gateway ended (judge-gateway-NAME.jsonl `outcome`)."""

    REPLIED = "replied"  # the judge answered 2xx and the caller got all of it
    HTTP_ERROR = "http_error"  # the judge answered with an error status (passed on as it was)
    UNAVAILABLE = "unavailable"  # no whole answer: the judge refused or dropped the connection
    TIMEOUT = "timeout"  # the judge did not answer within its timeout (the caller got 504)
    NOT_READY = "not_ready"  # the judge is not healthy yet: the gateway answered 503 itself
    CLIENT_GONE = "client_gone"  # the caller left before its reply was delivered
    BAD_REQUEST = "bad_request"  # the caller's request could not be read (or was too large)


class FsCondition(enum.StrEnum):
    """Why the run directory refused a record (failure-RANK.json `fs_condition`)."""

    FULL = "full"  # ENOSPC, EDQUOT: free space and the kept records land
    UNWRITABLE = "unwritable"  # EROFS, EIO, EACCES, ...: the filesystem itself is broken


class DriverEnv:
    """The environment variables the agent sets for the driver (agent/driver_api.py reads them)."""

    RAY_ADDRESS = "RAY_ADDRESS"
    # The Ray cluster's head host:port, named after the service (GYM_RAY_ADDRESS_<SERVICE>, [ray] name).
    RAY_ADDRESS_CLUSTER = "GYM_RAY_ADDRESS_CLUSTER"

    @staticmethod
    def ray_address(service: str) -> str:
        """GYM_RAY_ADDRESS_<SERVICE>: the head's host:port of the Ray service named ``service``."""
        return f"GYM_RAY_ADDRESS_{service.upper().replace('-', '_')}"

    @staticmethod
    def judge_url(judge: str) -> str:
        """GYM_JUDGE_URL_<NAME>: judge's OpenAI base URL (``.../v1``), its gateway's."""
        return f"GYM_JUDGE_URL_{judge.upper().replace('-', '_')}"

    # The policy service's OpenAI base URL (http://HOST:PORT/v1), on its first node: the driver's (seed 001).
    POLICY_URL = "GYM_POLICY_URL"
    RUN_DIR = "GYM_RUN_DIR"
    RANK = "GYM_RANK"
    NODE_INDEX = "GYM_NODE_INDEX"
    NODE_ADDRESS = "GYM_NODE_ADDRESS"
    FINGERPRINT = "GYM_FINGERPRINT"
    INCARNATION = "GYM_INCARNATION"
    PLAN = "GYM_PLAN"
    DRIVER_RESULT = "GYM_DRIVER_RESULT"
    REGISTRY = "GYM_REGISTRY"
    REGISTRY_FILE = "GYM_REGISTRY_FILE"
    RUN_FILE = "GYM_RUN_FILE"  # the user's run file, byte for byte (a MILES trainer reads it)
    ATTEMPT = "GYM_ATTEMPT"  # 1 for a new run, N on the (N-1)-th resume
    CHECKPOINT_DIR = "GYM_CHECKPOINT_DIR"  # RUN_DIR/checkpoints: the same directory in every attempt
    # RUN_DIR/driver-stop.json: once it exists, checkpoint and exit within [driver] checkpoint_grace.
    STOP_FILE = "GYM_STOP_FILE"
    # What open-instruct's MILES launcher sets for its trainer, set alike (launch/spec/miles_handoff.py):
    # the judge registry in the trainer's format (also in every node's `ray start` environment, so
    # Ray actors inherit it), the replica's rank and count, and this node's address for Ray.
    MILES_JUDGE_REGISTRY = "OI_MILES_JUDGE_REGISTRY"
    MILES_REPLICA_RANK = "OI_MILES_REPLICA_RANK"
    MILES_REPLICA_COUNT = "OI_MILES_REPLICA_COUNT"
    RAY_NODE_IP_ADDRESS = "RAY_NODE_IP_ADDRESS"
    # Node-local (never the shared filesystem): the progress board agent.driver_api.progress() writes,
    # and the folder where a process that imported agent.driver_api keeps its faulthandler dump file.
    PROGRESS_FILE = "GYM_PROGRESS_FILE"
    STACK_DUMP_DIR = "GYM_STACK_DUMP_DIR"
    # [driver] collective_trace: set (to 1) where a process that imports agent.driver_api answers for
    # its Flight Recorder on a hang (agent/proc/collective_hook.py), in STACK_DUMP_DIR.
    COLLECTIVE_TRACE = "GYM_COLLECTIVE_TRACE"
    # host:port a trainer's torch.distributed rendezvous may use: the driver's node and the spare port
    # of its Ray port block (held by the agent, never bound by Ray).
    TRAINER_RENDEZVOUS = "GYM_TRAINER_RENDEZVOUS"


class ResumeEnv:
    """How a scheduler restart asks for a new attempt without changing the job's command.

    GYM_RESUME=1 is `--resume`: join the attempt of this launch's token, or start the next attempt
    once the current one (of any launch) has ended. GYM_RESUME=restart is a launch the scheduler
    restarts under one token (a rendered Beaker or SkyPilot task always carries it): its first start claims
    attempt 1; a start that finds its own launch's attempt ended, or its own rank already in it
    (a restart: a replica never runs twice in one attempt), claims the next one under the restart
    caps (never after its driver succeeded: complete.json); a run another launch started is refused
    unless `--resume` is given too.

    GYM_ATTEMPT_TOKEN names one launch of the run: replicas that carry the same token join the same
    attempt, another token started at once is refused. When unset the agent derives it from the
    scheduler: SkyPilot's SKYPILOT_TASK_ID (one for every node, kept across a managed job's recoveries,
    hence restart mode), Slurm's job id and SLURM_RESTART_COUNT (each requeue is a new launch), Beaker's
    BEAKER_WORKLOAD_ID (else BEAKER_EXPERIMENT_ID): one for every replica of the task and for all of
    Beaker's retries of it, whose replicas are new jobs (BEAKER_JOB_ID differs per replica and
    retry, and no variable counts retries), hence restart mode."""

    RESUME = "GYM_RESUME"
    RESTART = "restart"  # the value of RESUME for restart mode
    TOKEN = "GYM_ATTEMPT_TOKEN"


class LauncherEnv:
    """What the launcher (gym-launch) reads from its own environment."""

    # The reader placement: srun arguments of the CPU placement heavy readers run on, e.g.
    # "-p cpu -q cpu-normal". gym-launch regrade takes a CPU judge job's partition and QOS from it.
    READER_SRUN = "GYM_READER_SRUN"


class JobEnv:
    """What a rendered job script exports to every node (and so to the agents and the driver)."""

    NODES = "GYM_NODES"  # the allocation's hostnames in the agents' node order, comma-separated
    DRIVER_RANK = "GYM_DRIVER_RANK"  # the rank whose agent runs the driver (driver.placement)
    DRIVER_HOST = "GYM_DRIVER_HOST"  # the hostname of that node
    # Set per step, not exported job-wide: the [pools.NAME] this node's step runs (its address record's
    # `pool`; the agents order nodes by pool, then address: schemas/order.owners_in_pools).
    POOL = "GYM_POOL"

    @staticmethod
    def pool_nodes(pool: str) -> str:
        """GYM_POOL_<POOL>_NODES: that pool's hostnames, comma-separated."""
        return f"GYM_POOL_{pool.upper().replace('-', '_')}_NODES"

    @staticmethod
    def ray_workers(service: str, pool: str) -> str:
        """GYM_RAY_<SERVICE>_<POOL>_WORKERS: the hostnames of that pool's nodes that join the Ray service
        ``service`` as workers (the head's node left out), comma-separated (seed 001)."""
        return f"GYM_RAY_{_env_word(service)}_{_env_word(pool)}_WORKERS"

    @staticmethod
    def container_step(service: str) -> str:
        """GYM_CONTAINER_STEP_<SERVICE>: the srun words (Pyxis image and mounts) that start the service
        ``service`` ("policy", "judges.NAME", "ray") in its container on one node; the agent adds its node
        and the command. Only for a service with a container."""
        return f"GYM_CONTAINER_STEP_{_env_word(service)}"


def _env_word(name: str) -> str:
    """A name as part of an environment variable's name: upper case, anything not a letter or digit _."""
    return "".join(c if c.isalnum() else "_" for c in name.upper())
