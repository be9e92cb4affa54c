"""Seed 001's layout (NeMo Gym's ``compute:`` / ``services:``): the one table of both spellings.

A NeMo Gym submission config (a ``.yaml``/``.yml`` file whose top level has ``compute`` and
``services``) is read as it is: ``launch.spec._nemo_gym`` maps each key to its meaning here.
``MAPPING`` lists the keys carried (NeMo Gym key, ours, a note), ``REFUSED`` the keys refused and
why; the translator takes its refusal messages from ``REFUSED``, so the messages and the table
(docs/guides/nemo-gym.md, docs/spec.md; ``launch.spec.reference``) cannot disagree. A TOML spec
that has only one of the two keys still gets one problem per key naming our tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas import DriverEnv

__all__ = ["EXTENSIONS", "MAPPING", "REFUSED", "TOP_LEVEL", "mapping_table", "problems", "refused_table"]

# (NeMo Gym key, our key, a note). NAME: a pool or service name; CLUSTER: the one compute resource.
MAPPING: tuple[tuple[str, str, str], ...] = (
    ("compute.CLUSTER", "[launch]", "exactly one compute resource, of any name"),
    ("compute.CLUSTER.type", "launch.backend", '"slurm"; gym-launch local and --backend still choose another'),
    ("compute.CLUSTER.account", "launch.slurm.account", ""),
    ("compute.CLUSTER.walltime", "launch.slurm.time", "absent: no time limit (the partition's)"),
    ("compute.CLUSTER.extra_args", "launch.slurm.directives", '{KEY: VALUE} -> "--KEY=VALUE"'),
    ("compute.CLUSTER.node_pools.NAME", "[pools.NAME]", "contiguous node ranges in declaration order"),
    ("compute.CLUSTER.node_pools.NAME.nodes", "pools.NAME.nodes", "default 1"),
    ("compute.CLUSTER.node_pools.NAME.gpus_per_node", "pools.NAME.gpus_per_node", "absent or 0: a CPU pool"),
    ("compute.CLUSTER.node_pools.NAME.partition", "pools.NAME.partition", "pools of other shapes: a hetjob"),
    ("compute.CLUSTER.node_pools.NAME.ntasks_per_node", "pools.NAME.tasks_per_node", ""),
    ("services.NAME (type vllm, driver.policy_model)", "[policy]", 'mode = "managed", backend = "vllm"'),
    ("services.NAME (type vllm, any other)", "[judges.NAME]", 'mode = "managed", backend = "vllm"; started'),
    (
        "services.NAME.model",
        "policy/judges.NAME.weights",
        "loaded as given; unpinned without revision (a warning); an absolute path: prepared_dir",
    ),
    ("services.NAME.served_model_name", "policy/judges.NAME.model", "absent: model (what /v1/models lists)"),
    ("services.NAME.tensor_parallel_size", "policy.tensor_parallel_size, judges.NAME.gpus", "default 1"),
    ("services.NAME.port (policy)", "policy.port", "default 8000"),
    (
        "services.NAME.port (judge)",
        "(the agents' port grid)",
        f"the driver reaches it at {DriverEnv.judge_url('NAME')}",
    ),
    ("services.NAME.node_pool", "policy/judges.NAME.node_pool", "the driver runs on the policy pool's first node"),
    ("services.NAME.extra_args (vllm)", "policy/judges.NAME.extra_args", "split as the shell would"),
    ("services.NAME.trust_remote_code", "extra_args --trust-remote-code", ""),
    ("services.NAME.placement", "(the one compute resource)", "must name it"),
    ("services.NAME.container", "policy/judges.NAME.container, ray.container", "Pyxis; absent: the job's environment"),
    ("services.NAME.mounts", "*.container_mounts", '"SRC" alone is "SRC:SRC"'),
    ("services.NAME.pre_command", "*.pre_command", ""),
    ("services.NAME.env", "*.env", '"lit:X" -> "X", "runtime:VAR" -> "runtime:VAR"'),
    ("services.NAME.health_check.path", "*.health_path", 'default "/health"'),
    ("services.NAME.health_check.timeout_seconds", "*.health_timeout", "default 60, as NeMo Gym's"),
    ("services.NAME (type ray)", "[ray]", "name = NAME (GYM_RAY_ADDRESS_<NAME>); no ray service: no Ray"),
    ("services.NAME.node_pools (ray)", "ray.node_pools", "a list; [] = the driver's node alone"),
    ("services.NAME.resources (ray)", "ray.resources", "{POOL: {RESOURCE: amount}}"),
    ("services.NAME.num_cpus (ray)", "ray.num_cpus", ""),
    ("services.NAME.extra_args (ray)", "ray.extra_args", "head-only flags are dropped from workers"),
    ("driver.policy_model", DriverEnv.POLICY_URL, "the policy's http://HOST:PORT/v1, injected as policy_base_url"),
    ("driver.policy_model_type", "driver.command", "gym eval run --model-type (default openai_model)"),
    ("driver.benchmarks.NAME", "name, driver.command", "one benchmark per config; the run is named gym-NAME"),
    ("driver.benchmarks.NAME.run", "driver.command", "gym eval run +KEY=VALUE ... on the driver's node"),
    (
        "driver.benchmarks.NAME.command",
        "driver.command",
        "NEMO_GYM_BENCH_DIR, NEMO_GYM_POLICY_BASE_URL and _MODEL_NAME exported (no _API_KEY)",
    ),
    ("driver.env", "driver.env", '"lit:X" -> "X", "runtime:VAR" -> "runtime:VAR"'),
    ("job.output_path", "output.root", "run directories go to ROOT/cluster/UUID"),
    ("otel.enabled: false", "(nothing)", "no collector, as ours never starts one"),
)

# NeMo Gym key -> why it is refused (the translator's message for that key).
REFUSED: Mapping[str, str] = {
    "compute.CLUSTER.hostname": "SSH submission is not supported: run gym-launch submit on the login node",
    "compute.CLUSTER.node_pools.NAME.extra_args": "per-pool #SBATCH directives are not supported; use "
    "compute.CLUSTER.extra_args (job-wide) or pools of another partition",
    "services.NAME.type = vllm_pd": "the prefill/decode router (vllm_pd) is not supported; serve the policy as "
    "one type: vllm service",
    "services.NAME.number_of_instances": "multi-instance vLLM (data-parallel replicas) is not supported; one "
    "engine serves each service: remove it or set 1",
    "services.NAME.use_ray_serve": "the Ray Serve gateway for vLLM instances is not supported; remove it",
    "services.NAME.pipeline_parallel_size": "pipeline parallelism is not supported; use tensor_parallel_size",
    "services.NAME.data_parallel_rpc_port": "is for multi-instance vLLM, which is not supported; remove it",
    "services.NAME.health_check.port": "the health check probes the service's own port; remove it or set it to "
    "the service's port",
    "services.NAME.health_check (ray)": "a Ray service's readiness is the agents' own gate (every node joined); "
    "remove it",
    "services.NAME.port (ray)": "the agents choose the Ray head's port for the job from their port grid "
    "(GYM_RAY_ADDRESS_<NAME> carries it); remove it",
    "services.NAME.num_gpus (ray)": "Ray is given the GPUs the plan places on each node; remove it",
    "services.NAME.node_pool (ray)": "a ray service spans node_pools, a list: write node_pools: [POOL]",
    "services.NAME.env host:VAR": "host: values are read on the submitting machine, and the config is read again "
    "on every node; use runtime:VAR (the job's environment, which Slurm copies from the submitting shell)",
    "services.NAME (two ray services)": "one Ray cluster per job: declare one type: ray service",
    "driver.benchmarks (more than one)": "NeMo Gym submits one job per benchmark; so does gym-launch: write "
    "one config per benchmark",
    "driver.benchmarks.NAME.prepare": "benchmark prepare (gym eval prepare) is not supported; prepare the data "
    "before submitting, or do it in a benchmark command",
    "driver.benchmarks.NAME.resumable": "NeMo Gym's resume chain is not supported; gym-launch resubmits with "
    "launch.max_retries and its own resume: remove it",
    "driver.container": "the driver runs in the agents' environment (the job's own image), not a container of "
    "its own: remove it",
    "driver.mounts": "the driver runs without a container of its own: remove it",
    "driver.gym_install": "the driver runs gym from the job's environment: install nemo-gym there and remove it",
    "driver.policy_host": f"the driver reaches the policy at {DriverEnv.POLICY_URL} (its node's address); remove it",
    "driver.env host:VAR": "host: values are read on the submitting machine; use runtime:VAR",
    "otel": "the OpenTelemetry collector is not supported: set otel.enabled: false or remove otel",
}

# Keys of ours a NeMo Gym config may carry as well (gym-agent extensions, same spelling).
EXTENSIONS: Mapping[str, str] = {
    "launch": "top level: this project's [launch] table (coordination timeouts, preflight, ...), merged",
    "services.NAME.revision": "pins a vllm service's weights: an immutable 40-hex commit, passed as --revision "
    "(absent: a warning that the weights are not pinned)",
    "services.NAME.prepared_dir": "the weights staged before the job, loaded instead of model; every node checks "
    "it holds revision",
    "services.NAME.backend": 'a non-policy service\'s server: "vllm" (default) or "reference" (the CPU '
    "reference judge, to try a config without GPUs)",
}

TOP_LEVEL = {
    "compute": "is seed 001's layout (a NeMo Gym config, read as one when it has services too); ours declares "
    "the allocation in [launch] (launch.slurm.account, launch.backend) and each node pool as its own "
    "[pools.NAME] table (nodes, gpus_per_node, partition)",
    "services": "is seed 001's layout (a NeMo Gym config, read as one when it has compute too); ours serves an "
    "evaluation's policy with [policy] (node_pool, tensor_parallel_size, port) and a training run's with its "
    "rollout engines (trainer.node_pool, inference.node_pool), "
    "each judge is a [judges.NAME] table (with node_pool), and a Ray service is [ray] (name, node_pools, "
    "resources)",
}


def problems(data: Mapping[str, Any]) -> dict[str, str]:
    """Top-level key -> message, for the keys of seed 001's layout ``data`` has."""
    return {k: f"{m} (docs/guides/nemo-gym.md)" for k, m in TOP_LEVEL.items() if k in data}


def mapping_table() -> list[str]:
    rows = [f"| `{seed}` | `{ours}` | {note} |" for seed, ours, note in MAPPING]
    rows += [f"| `{key}` | gym-agent extension | {note} |" for key, note in EXTENSIONS.items()]
    return ["| NeMo Gym 0.7.0 | gym-agent | note |", "|---|---|---|", *rows]


def refused_table() -> list[str]:
    rows = [f"| `{key}` | {why} |" for key, why in REFUSED.items()]
    return ["| NeMo Gym 0.7.0 | refused because |", "|---|---|", *rows]
