"""The batch script of a run (seeds 000, 001, 004), rendered purely from the resolved model and its
plan; submit.py hands it to ``sbatch``.

One allocation of ``plan.replicas`` nodes, one agent task per node (a pool's ``tasks_per_node`` gives
its component more task slots for the driver's own steps), ``gpus_per_replica`` GPUs per node;
every ``srun`` step runs with ``--kill-on-bad-exit=1`` (an srun option: sbatch refuses it); the
job's output goes into the run directory. Every node runs
``gym-agent --uuid U --config SPEC --rank R --replicas N``.

The rank is the node's position in the agents' node order: the agents give planned node i to the
replica whose address sorts i-th lowest (schemas.order), so the script lists the allocation's
hosts in that order (``GYM_NODES``) and each task takes its own position in it. Rank R then runs
planned node R, pools take contiguous ranges of that same order in declaration order, and the
driver's rank (``GYM_DRIVER_RANK``) is the plan's driver node, known when rendering.

With ``[pools.NAME]`` each pool's agents run as their own ``srun`` step on that pool's hosts,
named ``<ray name>_<pool>_workers`` when its nodes join Ray (seed 001), else after the pool
(``squeue -s`` shows them), and ``GYM_POOL_<POOL>_NODES`` is exported to every node. A failing
task ends its own step (``--kill-on-bad-exit``); the other steps' agents see its failure record
and stop within one poll interval, so the job ends either way.

Pools that differ in shape (partition, GPUs per node: a CPU pool has 0, tasks per node) are one
heterogeneous job: one component per distinct shape in declaration order, separated by ``#SBATCH hetjob``,
job-wide options on the first. ``SLURM_JOB_NODELIST`` is then the first component's only, so the
script reads every component's (``SLURM_JOB_NODELIST_HET_GROUP_N``), orders them all as above,
and refuses (exit 2, naming the node) an order in which a pool's range is not hosts of its own
component; each pool's step runs with ``--het-group``, a CPU component's without the batch
shell's ``CUDA_VISIBLE_DEVICES``.

``launch.slurm.explicit_address`` adds ``--address "$(hostname --ip-address)"``: that lets a
loopback address through, which only a test cluster on one machine needs; without it the agent
refuses a hostname that resolves to loopback.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from launch.backends.base import Rendered, RenderRequest, agent_argv
from launch.backends.job_vars import HostList, pool_host_lists, ray_address_variable, ray_worker_lists
from launch.spec.config import RunConfig
from launch.spec.errors import Problem, SpecError
from launch.spec.plan import Plan
from launch.spec.sections import PoolConfig, SlurmConfig
from schemas import JobEnv, names, port_grid
from schemas.vocab import ResumeEnv

__all__ = [
    "WARNING_MARGIN_S",
    "Component",
    "components",
    "directive_lines",
    "container_step_words",
    "render",
    "service_step_name",
    "step_name",
    "warning_seconds",
]

FILE_SUFFIX = ".sbatch"
q = shlex.quote
# What a task's shell expands when it runs, so they are written in double quotes, not escaped.
RANK_WORD = "$rank"
ADDRESS_WORD = "$(hostname --ip-address)"
SHELL_WORDS = (RANK_WORD, ADDRESS_WORD)


def _problems(config: RunConfig, plan: Plan) -> list[Problem]:
    out: list[Problem] = []
    hosts = config.hostnames
    if hosts and len(hosts) != plan.replicas:
        out.append(
            Problem(
                "launch.hostnames",
                f"lists {len(hosts)} host(s) but the job has {plan.replicas} node(s): Slurm's --nodelist "
                f"takes every listed host, so list exactly {plan.replicas}",
            )
        )
    if config.driver.checkpoint_grace is not None:
        for d in config.launch.slurm.directives:
            if d.split("=", 1)[0] == "--signal":
                out.append(
                    Problem(
                        "launch.slurm.directives",
                        f"{d!r}: with driver.checkpoint_grace the job's walltime warning is set by gym-launch "
                        "(--signal=B:USR1@SECONDS); remove it from the directives",
                    )
                )
    if len(components(config, plan)) > 1 and hosts:
        out.append(
            Problem(
                "launch.hostnames",
                "cannot be combined with pools of different shapes (partition, GPUs per node): the job is "
                "heterogeneous and Slurm takes a node list per component; remove launch.hostnames",
            )
        )
    seen: dict[str, str] = {}
    for pool in config.pool_list:
        var = JobEnv.pool_nodes(pool.name)
        if var in seen:
            out.append(Problem(f"pools.{pool.name}", f"and pools.{seen[var]} both export {var}; rename one"))
        seen[var] = pool.name
    return out


@dataclass(frozen=True)
class Component:
    """One component of the job: nodes of one shape (partition, GPUs per node). A run whose pools
    differ in shape is a heterogeneous job, one component per shape in declaration order."""

    index: int
    partition: str | None
    gpus: int
    qos: str | None
    pools: tuple[PoolConfig, ...]
    nodes: int
    tasks: int = 1  # --ntasks-per-node of the component (pools.NAME.tasks_per_node)


def components(config: RunConfig, plan: Plan) -> list[Component]:
    slurm = config.launch.slurm
    if not config.pool_list:
        return [Component(0, slurm.partition, plan.gpus_per_replica, slurm.qos, (), plan.replicas)]
    shapes: dict[tuple[str | None, int, int], list[PoolConfig]] = {}
    # A pool that names no partition is on the job's: launch.slurm.partition, else the first a pool names.
    default = slurm.partition or next((p.partition for p in config.pool_list if p.partition), None)
    for pool in config.pool_list:
        shapes.setdefault((pool.partition or default, pool.gpus_per_node, pool.tasks_per_node), []).append(pool)
    if len(shapes) == 1:
        # One shape: an ordinary job (a pool's partition, when one names it, is the job's).
        ((partition, gpus, tasks), pools) = next(iter(shapes.items()))
        return [Component(0, partition, gpus, slurm.qos, tuple(pools), plan.replicas, tasks)]
    return [
        Component(
            i,
            partition,
            gpus,
            next((p.qos for p in pools if p.qos), None) or slurm.qos,
            tuple(pools),
            sum(p.nodes for p in pools),
            tasks,
        )
        for i, ((partition, gpus, tasks), pools) in enumerate(shapes.items())
    ]


def _component_lines(request: RenderRequest, run_dir: str, c: Component) -> list[str]:
    """A component's directives; the first also carries the job-wide ones (Slurm applies them to
    every component of a heterogeneous job)."""
    config = request.config
    slurm: SlurmConfig = config.launch.slurm
    first = c.index == 0
    lines = [f"--job-name={config.name}"] if first else []
    # The allocation's task slots per node; each pool's agent step still runs one task per node.
    lines += [f"--nodes={c.nodes}", f"--ntasks-per-node={c.tasks}"]
    if c.gpus:
        # A CPU component (gpus_per_node = 0) asks for no GPUs: a CPU partition has none.
        lines.append(f"--gpus-per-node={c.gpus}")
    if first:
        # A requeued job (a node failure, the walltime warning's requeue) keeps its earlier
        # attempts' output: the scheduler's words about how each ended are evidence.
        lines += [f"--output={run_dir}/{names.SLURM_OUTPUT}", "--open-mode=append"]
        if request.workdir:
            lines.append(f"--chdir={request.workdir}")
    for flag, value, here in (
        ("--partition", c.partition, True),
        ("--account", slurm.account, first),
        ("--qos", c.qos, True),
        ("--time", slurm.time, first),
    ):
        if value is not None and here:
            lines.append(f"{flag}={value}")
    if first and config.hostnames:
        lines.append(f"--nodelist={','.join(config.hostnames)}")
    warn = warning_seconds(config)
    if first and warn is not None:
        # To the batch shell only (B:): its trap tells the agents; SIGUSR1 would end a driver
        # that does not handle it.
        lines.append(f"--signal=B:USR1@{warn}")
    lines.extend(slurm.directives)
    # A directive must stay one shell word: sbatch reads #SBATCH lines word by word.
    return [f"#SBATCH {d}" if d == q(d) else f"#SBATCH {q(d)}" for d in lines]


def _directives(request: RenderRequest, run_dir: str) -> list[str]:
    """The job's #SBATCH lines: one block per component, separated by Slurm's `#SBATCH hetjob`."""
    out: list[str] = []
    for c in components(request.config, request.plan):
        out += ([HETJOB] if c.index else []) + _component_lines(request, run_dir, c)
    return out


HETJOB = "#SBATCH hetjob"


def _agent_task(request: RenderRequest) -> str:
    """What each task runs: find its rank in GYM_NODES, then exec the agent."""
    config, plan = request.config, request.plan
    argv = agent_argv(
        (config.launch.slurm.agent,),
        request.uuid,
        request.output_root,
        config=request.spec_path,
        overrides=request.overrides,
        rank=RANK_WORD,
        replicas=plan.replicas,
        address=ADDRESS_WORD if config.launch.slurm.explicit_address else None,
    )
    agent = " ".join(f'"{a}"' if a in SHELL_WORDS else q(a) for a in argv)
    return "\n".join(
        [
            "set -eu",
            "rank=-1 i=0",
            f'for h in ${{{JobEnv.NODES}//,/ }}; do [ "$h" = "$SLURMD_NODENAME" ] && rank=$i; i=$((i + 1)); done',
            f'if [ "$rank" -lt 0 ]; then echo "gym: node $SLURMD_NODENAME is not in {JobEnv.NODES}" >&2; exit 2; fi',
            f"exec {agent}",
        ]
    )


NODE_ORDER = r"""# The agents' node order: hosts by numeric IPv4 address (schemas.order), names as Slurm knows them.
gym_hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
gym_ordered=$(for h in $gym_hosts; do
  a=$(getent ahostsv4 "$h" | awk 'NR == 1 { print $1 }')
  echo "${a:?gym: $h has no IPv4 address} $h"
done | sort -t . -k1,1n -k2,2n -k3,3n -k4,4n | awk '{ print $2 }')
mapfile -t gym_node < <(printf '%s\n' "$gym_ordered")
"""


# After the warning: the agents notice it within a poll, the driver checkpoints within its grace,
# the teardown takes up to teardown_grace; this much more is left for everything else.
WARNING_MARGIN_S = 30


def warning_seconds(config: RunConfig) -> int | None:
    """How long before the time limit the job asks to be warned; None without a checkpoint grace."""
    grace = config.driver.checkpoint_grace
    if grace is None:
        return None
    return math.ceil(grace + config.coordination.teardown_grace + config.coordination.poll_interval) + WARNING_MARGIN_S


def _warning_trap(run_dir: str) -> list[str]:
    """The batch shell's SIGUSR1 (the walltime warning) becomes a line in failures/, which every
    agent watches; the steps run in the background so that the trap runs at once (bash runs a
    trap only between commands, and `wait` returns early for it)."""
    target = f"{run_dir}/{names.WALLTIME_WARNING}"
    return [
        "# The walltime warning (--signal=B:USR1): every agent stops, the driver after a checkpoint.",
        "gym_trapped=0 gym_was_warned=0",
        "gym_warned() { gym_trapped=1 gym_was_warned=1; "
        f'echo "SIGUSR1 at $(date -u +%Y-%m-%dT%H:%M:%SZ)" > {q(target)}; }}',
        "trap gym_warned USR1",
        "# Wait for a step through interruptions by the trap (bash keeps an ended step's status); its",
        "# exit code in gym_rc.",
        'gym_wait() { while :; do gym_trapped=0; if wait "$1"; then gym_rc=0; else gym_rc=$?; fi; '
        '[ "$gym_trapped" = 1 ] || return 0; done; }',
    ]


REQUEUE = [
    "# Warned of its time limit (in this run of the script), the job has checkpointed and stopped: requeue",
    "# it to resume from the checkpoint. Whether it may run again is the agents' to decide, from the run's",
    "# attempts ([launch] max_retries, max_no_progress_attempts).",
    'if [ "$gym_was_warned" = 1 ]; then',
    '  echo "gym: warned of the time limit: requeueing job $SLURM_JOB_ID to resume from its checkpoint" >&2',
    '  scontrol requeue "$SLURM_JOB_ID" || echo "gym: scontrol requeue failed: the job ends here" >&2',
    "fi",
]


def _join(start: int, count: int) -> str:
    return f'$(IFS=,; echo "${{gym_node[*]:{start}:{count}}}")'


def _hosts(hosts: HostList) -> str:
    """A host list (job_vars) as the script writes it. Pools' ranges are contiguous, and so are a
    pool's Ray workers (all of its range, or all but the head's first node)."""
    first, count = hosts.nodes[0], len(hosts.nodes)
    if hosts.nodes == tuple(range(first, first + count)):
        return _join(first, count)
    return '"' + ",".join(f"${{gym_node[{i}]}}" for i in hosts.nodes) + '"'


def _srun(
    count: int, name: str, nodelist: str | None, group: int | None = None, gpus: bool = True, pool: str | None = None
) -> str:
    parts = [
        "srun",
        "--kill-on-bad-exit=1",
        *([f"--het-group={group}"] if group is not None else []),
        f"--nodes={count}",
        f"--ntasks={count}",
        "--ntasks-per-node=1",
        f"--job-name={q(name)}",
    ]
    if nodelist:
        parts.append(f'--nodelist="${nodelist}"')
    # A CPU component's step inherits the batch shell's CUDA_VISIBLE_DEVICES (the first component's
    # GPUs) unless told otherwise: its agents must see none.
    env = [] if gpus else ["-u", "CUDA_VISIBLE_DEVICES"]
    if pool is not None:  # the agents order nodes by pool, then address (schemas/order.py)
        env.append(f"{JobEnv.POOL}={q(pool)}")
    run = ("env " + " ".join(env) + " " if env else "") + 'bash -c "$gym_task"'
    return " ".join(parts) + " " + run


def step_name(config: RunConfig, plan: Plan, pool: str) -> str:
    """A pool's step: ``<ray name>_<pool>_workers`` when its nodes join Ray (seed 001), else the pool."""
    ray_nodes = set(plan.ray_nodes)
    if any(n.index in ray_nodes for n in plan.nodes if n.pool == pool):
        return f"{config.ray.name}_{pool}_workers"
    return pool


def _steps(config: RunConfig, plan: Plan, warned: bool) -> list[str]:
    if not config.pool_list:
        step = _srun(plan.replicas, config.name, None)
        lines = ["# One step: every node's agent; a task that fails ends the step, and with it the job."]
        if not warned:
            return [*lines, step]
        return [*lines, step + " &", 'gym_wait "$!"', *REQUEUE, 'exit "$gym_rc"']
    lines = [
        "# One step per pool (squeue -s): <ray name>_<pool>_workers for a pool whose nodes join Ray, else",
        "# the pool's name, on that pool's hosts. A failed task ends its step; the other pools' agents see",
        "# its failure record and stop. The job's exit code is the first non-zero one.",
        "gym_pids=()",
    ]
    comps = components(config, plan)
    het = len(comps) > 1
    for c in comps:
        for pool in c.pools:
            name = step_name(config, plan, pool.name)
            group = c.index if het else None
            srun = _srun(pool.nodes, name, JobEnv.pool_nodes(pool.name), group, bool(c.gpus), pool.name)
            lines += [srun + " &", "gym_pids+=($!)"]
    lines += [
        "gym_first=0",
        'for p in "${gym_pids[@]}"; do',
        '  gym_wait "$p"; [ "$gym_first" -ne 0 ] || gym_first=$gym_rc',
        "done",
        *(REQUEUE if warned else []),
        'exit "$gym_first"',
    ]
    if not warned:  # no trap to wait through: a plain wait
        lines.insert(-5, 'gym_wait() { if wait "$1"; then gym_rc=0; else gym_rc=$?; fi; }')
    return lines


HET_SORTED = r"""# A heterogeneous job: each component's hosts by numeric IPv4 address (schemas.order).
gym_sorted() {
  for h in $(scontrol show hostnames "$1"); do
    a=$(getent ahostsv4 "$h" | awk 'NR == 1 { print $1 }')
    echo "${a:?gym: $h has no IPv4 address} $h"
  done | sort -t . -k1,1n -k2,2n -k3,3n -k4,4n | awk '{ print $2 }'
}"""


def _het_order(config: RunConfig, comps: Sequence[Component]) -> list[str]:
    """A heterogeneous job's node order, the agents' own: pools in declaration order, each taking
    the next hosts of its component by address. Each pool's step tells its agents their pool
    (GYM_POOL), and the agents order nodes by pool, then address (schemas/order.owners_in_pools),
    so the components' addresses may interleave in any way."""
    lines = [HET_SORTED]
    for c in comps:
        var = f"SLURM_JOB_NODELIST_HET_GROUP_{c.index}"
        lines += [
            f'mapfile -t gym_c{c.index} < <(gym_sorted "${{{var}:?gym: {var} is not set: not a heterogeneous job}}")',
            f'if [ "${{#gym_c{c.index}[@]}}" -ne {c.nodes} ]; then',
            f'  echo "gym: component {c.index} has ${{#gym_c{c.index}[@]}} node(s), its pools {c.nodes}" >&2; exit 2',
            "fi",
        ]
    of = {p.name: c.index for c in comps for p in c.pools}
    taken = {c.index: 0 for c in comps}
    lines.append("gym_node=()")
    for pool in config.pool_list:
        group = of[pool.name]
        lines.append(f'gym_node+=("${{gym_c{group}[@]:{taken[group]}:{pool.nodes}}}")  # pool {pool.name}')
        taken[group] += pool.nodes
    return lines


def _ray_address(request: RenderRequest) -> list[str]:
    """Seed 001: the Ray head's host:port is exported to the job as GYM_RAY_ADDRESS_<NAME>, so every
    step on every node (a CPU pool's too), the driver and what it starts see it. The head runs on the
    driver's node, named from the job's host list; its port is fixed for the job before the head
    starts: the block of the agents' port grid the head's own choice tries first (from the run's
    uuid and its rank), which the head's agent then reserves exactly, failing rather than moving."""
    config, plan = request.config, request.plan
    var = ray_address_variable(config, plan)
    if var is None:
        return []
    driver = plan.driver_node
    port = port_grid.head_block(request.uuid, driver)
    host = f"${{gym_node[{driver}]}}"
    return [
        "# Seed 001: the Ray head's host:port, to every step of the job. The head runs on the driver's node;",
        f"# port {port} is fixed for the job, the head's agent reserves that block and checks it names the node.",
        f"gym_ray_host=$(getent ahostsv4 \"{host}\" | awk 'NR == 1 {{ print $1 }}' || true)",
        f'export {var}="${{gym_ray_host:?gym: {host} has no IPv4 address}}:{port}"',
        *_ray_workers(config, plan),
    ]


def _ray_workers(config: RunConfig, plan: Plan) -> list[str]:
    """Seed 001: GYM_RAY_<NAME>_<POOL>_WORKERS, each pool's nodes that join Ray as workers (the head's
    node left out), for every pool with one; its step is <name>_<pool>_workers (step_name)."""
    return [f"export {h.name}={_hosts(h)}" for h in ray_worker_lists(config, plan)]


def service_step_name(config: RunConfig, key: str) -> str:
    """A service's own step (its container): "policy", "judge_<NAME>", or the Ray service's name."""
    if key == "ray":
        return config.ray.name
    return "judge_" + key.removeprefix("judges.") if key.startswith("judges.") else key


def container_step_words(image: str, mounts: Sequence[str], name: str) -> list[str]:
    """The srun words that start a service in its container (Pyxis) as a step of its own on one node of
    the job; the agent adds --nodelist (its node) and the command. --overlap: the agents' steps hold the
    nodes' resources."""
    words = ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--job-name={name}", "--no-container-mount-home"]
    if mounts:
        words.append(f"--container-mounts={','.join(mounts)}")
    return [*words, f"--container-image={image}"]


def _container_steps(config: RunConfig) -> list[str]:
    """Seed 001: each service with a container gets its step's srun words exported (the agents start it)."""
    out = []
    for key, svc in config.services().items():
        if svc.container is None:
            continue
        words = container_step_words(svc.container, svc.container_mounts, service_step_name(config, key))
        out.append(f"export {JobEnv.container_step(key)}={q(shlex.join(words))}")
    if out:
        out.insert(0, "# Seed 001: services in containers of their own (Pyxis); each service's agent starts it with")
        out.insert(1, "# these srun words, its own node (--nodelist) and the command.")
    return out


def render(request: RenderRequest) -> Rendered:
    config, plan = request.config, request.plan
    problems = _problems(config, plan)
    if problems:
        raise SpecError(problems)
    run_dir = f"{request.output_root}/cluster/{request.uuid}"
    warned = warning_seconds(config) is not None  # the directive, the trap and the steps agree
    head = [
        "#!/bin/bash",
        f"# gym-launch render --backend slurm: run {config.name} ({request.uuid}), spec fingerprint "
        f"{config.fingerprint[:16]}.",
        "# The run directory must exist before the job starts (gym-launch submit creates it).",
        *_directives(request, run_dir),
        "set -euo pipefail",
        # One line per start of the job (a requeue starts it again, appending to the same output):
        # the audit tells each attempt's ending in the output apart by it.
        f'echo "{names.SLURM_START_MARKER} ${{SLURM_JOB_ID:-?}} start ${{SLURM_RESTART_COUNT:-0}} on $(hostname)"',
        "",
    ]
    env = [f"export {k}={q(v)}" for k, v in config.launch.env.items()]
    exports = [f"export {h.name}={_hosts(h)}" for h in pool_host_lists(config, plan)]
    driver = plan.driver_node
    if request.resume:
        # A new attempt of the run (and every requeue of this job is one too).
        exports.append(f"export {ResumeEnv.RESUME}=1")
    else:
        # A requeued job (scontrol requeue, a node failure with --requeue) is a new attempt of the run.
        exports.append(f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then export {ResumeEnv.RESUME}=1; fi')
    exports += [
        f"# The driver runs on planned node {driver} ({plan.driver_placement} placement): rank {driver}.",
        f"export {JobEnv.DRIVER_RANK}={driver}",
        f'export {JobEnv.DRIVER_HOST}="${{gym_node[{driver}]}}"',
        *_ray_address(request),
        *_container_steps(config),
    ]
    comps = components(config, plan)
    het = len(comps) > 1
    order = _het_order(config, comps) if het else [NODE_ORDER.rstrip("\n")]
    body = [
        *env,
        *order,
        f'if [ "${{#gym_node[@]}}" -ne {plan.replicas} ]; then',
        f'  echo "gym: the allocation has ${{#gym_node[@]}} node(s), the plan {plan.replicas}" >&2; exit 2',
        "fi",
        *exports,
        f"gym_task={q(_agent_task(request))}",
        *(_warning_trap(run_dir) if warned else []),
        *_steps(config, plan, warned),
        "",
    ]
    return Rendered(backend="slurm", text="\n".join(head + body), file_name=FILE_SUFFIX)


def directive_lines(text: str) -> Sequence[str]:
    """The ``#SBATCH`` directives of a rendered script, in order (for tests and the audit)."""
    return [line[len("#SBATCH ") :] for line in text.splitlines() if line.startswith("#SBATCH ")]
