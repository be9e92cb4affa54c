"""Spec texts for runs of real agents on this machine, and unique run ids.

One template: `small_spec` writes a multi-node spec (one trainer node, the rest rollout) with short
coordination timings; its arguments are the knobs the tests and bench turn.
"""

from __future__ import annotations

import secrets
from typing import Any

# A driver that trains nothing, and says so: exit 0 is then a pass (the audit requires no evidence).
SLEEP_1 = 'command = ["python", "-c", "import time; time.sleep(1)"]\ntrains = false'


def result_driver(delay: float) -> str:
    """A [driver] command that leaves the evidence a successful run needs (driver-result.json)
    after `delay` seconds, without Ray."""
    return (
        f'command = ["python", "-c", "import time; time.sleep({delay:g}); from agent import driver_api; '
        "driver_api.write_result(optimizer_steps=1, final_loss=0.5, policy_version=1, policy_refreshes=1, "
        'judge_replies=0)"]'
    )


def judge_tables(
    *,
    max_concurrent_calls: int = 4,
    timeout: float = 30,
    max_output_tokens: int = 256,
    pool: str | None = None,
    invalid_reply_attempts: int | None = None,
) -> str:
    """A managed reference judge (one GPU; in node pool `pool` if given) bound twice, as in the demo.
    `invalid_reply_attempts` sets both rubrics' key (None: the default, 3 tries 1 s then 2 s apart)."""
    pool_line = f'node_pool = "{pool}"\n' if pool else ""
    attempts = f"invalid_reply_attempts = {invalid_reply_attempts}\n" if invalid_reply_attempts is not None else ""
    return f"""
[judges.general]
mode = "managed"
backend = "reference"
model = "reference-judge"
gpus = 1
max_context_length = 8192
max_concurrent_calls = {max_concurrent_calls}
timeout = {timeout}
{pool_line}[rubrics.general-quality]
profile = "general-quality"
max_output_tokens = {max_output_tokens}
{attempts}[rubrics.general-quality-ref]
profile = "general-quality-ref"
max_output_tokens = {max_output_tokens}
{attempts}[judging.bindings."general-quality"]
judge = "general"
rubric = "general-quality"
[judging.bindings."general-quality_ref"]
judge = "general"
rubric = "general-quality-ref"
"""


JUDGE_TABLES = judge_tables()

# Seed 001's first example in our spelling, with a CPU pool on another partition beside it: the trainer
# and rollout pinned to the policy's two nodes, a judge's pool of one node (pin the judge with
# judge_tables(pool="judge")), and one CPU node whose agent runs coordination only.
PINNED_POOLS = """
[trainer]
nodes = 1
gpus_per_node = 4
node_pool = "policy"
[inference]
gpus = 12
node_pool = "policy"
[pools.policy]
nodes = 2
gpus_per_node = 8
partition = "gpu"
[pools.judge]
nodes = 1
gpus_per_node = 8
[pools.readers]
nodes = 1
gpus_per_node = 0
partition = "cpu"
"""


def pool_tables(*pools: tuple[str, int, int]) -> str:
    """[pools.NAME] tables of (name, nodes, gpus_per_node), in declaration order."""
    return "".join(f"[pools.{name}]\nnodes = {nodes}\ngpus_per_node = {gpus}\n" for name, nodes, gpus in pools)


HEAD_SLOTS_CHECKED = 8  # ranks whose first Ray block a new run id must find free (Slurm fixes the head's)
UID_TRIES = 50


def uid(tag: str, prefix: str = "e2e") -> str:
    """A run id no other run on this machine has: `prefix-tag-<6 hex>`, chosen so that the first Ray
    port block of each of its first ranks is free now. A rendered Slurm job fixes its head's block
    from the run id (schemas/port_grid.head_block) and cannot move it; tests share one host, where
    another test's Ray may be using exactly that block (seen: "its port block ... is taken")."""
    from agent.proc.ports import free
    from schemas import port_grid

    for _ in range(UID_TRIES):
        run = f"{prefix}-{tag}-{secrets.token_hex(3)}" if prefix else f"{tag}-{secrets.token_hex(3)}"
        bases = (port_grid.head_block(run, rank) for rank in range(HEAD_SLOTS_CHECKED))
        if all(free(p) for b in bases for p in range(b, b + port_grid.PORT_BLOCK)):
            return run
    return run


def small_spec(
    *,
    name: str = "e2e",
    replicas: int = 3,
    node_gpus: int = 2,
    trainer_nodes: int = 1,
    driver: str = SLEEP_1,
    placement: str | None = "trainer",
    startup_timeout: float = 180,
    heartbeat_timeout: float = 6,
    heartbeat_interval: float = 0.5,
    poll_interval: float = 0.25,
    teardown_grace: float = 4.0,
    ack_timeout: float | None = 20.0,
    progress_interval: float | None = None,
    ray: bool = True,
    judges: bool | str = False,
    extra: str = "",
) -> str:
    """A spec of `replicas` nodes with `node_gpus` GPUs each: the first `trainer_nodes` train, the others
    roll out (less one GPU for the judge with `judges`: True for JUDGE_TABLES, or the judge tables' text).
    `driver` is the [driver] table's command line; `extra` lands in the [ray] table; None leaves a
    key at its default."""
    rollout = node_gpus * (replicas - trainer_nodes) - (1 if judges else 0)
    coordination = [
        f"startup_timeout = {startup_timeout}",
        f"heartbeat_timeout = {heartbeat_timeout}",
        f"heartbeat_interval = {heartbeat_interval}",
        f"poll_interval = {poll_interval}",
        f"teardown_grace = {teardown_grace}",
    ]
    if ack_timeout is not None:
        coordination.append(f"ack_timeout = {ack_timeout}")
    if progress_interval is not None:
        coordination.append(f"progress_interval = {progress_interval}")
    drive = [driver] + ([f'placement = "{placement}"'] if placement is not None else [])
    ray_table = "num_cpus = 1\nobject_store_memory = 80000000" if ray else "enabled = false"
    nl = "\n"
    return f"""
name = "{name}"
[launch]
gpus_per_replica = {node_gpus}
node_gpus = {node_gpus}
[launch.coordination]
{nl.join(coordination)}
[trainer]
nodes = {trainer_nodes}
gpus_per_node = {node_gpus}
[inference]
gpus = {rollout}
[driver]
{nl.join(drive)}
[ray]
{ray_table}
{extra}
""" + (judges if isinstance(judges, str) else JUDGE_TABLES if judges else "")


def judge_spec(
    driver: str = 'command = ["python", "-c", "import time; time.sleep(60)"]', judges: str = JUDGE_TABLES, **kw: Any
) -> str:
    """Three 2-GPU nodes: trainer, rollout, and rollout + a managed reference judge on node 2
    (`judges`: its tables, judge_tables())."""
    return small_spec(driver=driver, judges=judges, **kw)
