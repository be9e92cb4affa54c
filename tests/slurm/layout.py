"""The test cluster's shape and the files it runs on (pure: no processes, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeSpec:
    name: str
    address: str  # this node's own loopback address: `hostname --ip-address` in its jobs
    gpus: int
    partition: str


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    max_time: str
    default: bool
    priority_tier: int = 1  # a higher tier preempts a lower one's jobs (PreemptType=preempt/partition_prio)
    nodes_of: str = ""  # the nodes of this other partition (default: the nodes declared in this one)


@dataclass(frozen=True)
class Layout:
    controller: str
    controller_address: str
    nodes: tuple[NodeSpec, ...]
    partitions: tuple[PartitionSpec, ...]
    cpus_per_node: int = 4  # declared (config_overrides): lets two small jobs share a node
    memory_mb: int = 4000


DEFAULT_LAYOUT = Layout(
    controller="gymctl",
    controller_address="127.0.10.254",
    nodes=(
        NodeSpec("n1", "127.0.10.1", 8, "gpu"),
        NodeSpec("n2", "127.0.10.2", 8, "gpu"),
        NodeSpec("n3", "127.0.10.3", 8, "gpu"),
        NodeSpec("c1", "127.0.10.11", 0, "cpu"),
    ),
    partitions=(
        PartitionSpec("gpu", "02:00:00", True),
        PartitionSpec("cpu", "01:00:00", False),
        # The GPU nodes again, on a higher tier: a job here preempts (requeues) a gpu job in its way.
        PartitionSpec("urgent", "01:00:00", False, priority_tier=10, nodes_of="gpu"),
    ),
)


def render_slurm_conf(layout: Layout, d: Path, ctl_port: int, node_ports: Mapping[str, int]) -> str:
    lines = [
        "# Written by tests/slurm/cluster.py: a throwaway test cluster.",
        "ClusterName=gymtest",
        f"SlurmctldHost={layout.controller}({layout.controller_address})",
        f"SlurmctldPort={ctl_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d / 'munge' / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool' / '%n'}",
        f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'log' / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No cgroups here: processes are tracked through /proc, tasks are not confined.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MailProg=/bin/true",
        "MpiDefault=none",
        # Impossible requests (over MaxTime, too many nodes) are refused at submit, never pend forever.
        "EnforcePartLimits=ALL",
        "ReturnToService=2",
        "KillWait=15",
        "MinJobAge=3600",  # finished jobs stay visible to `scontrol show job` (there is no sacct)
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "GresTypes=gpu",
        # Preemption as clusters run it: a higher-tier partition's job requeues the jobs in its way.
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        # Only the backfill scheduler starts heterogeneous jobs: every 2 s rather than Slurm's 30.
        "SchedulerParameters=bf_interval=2",
    ]
    for n in layout.nodes:
        gres = f" Gres=gpu:{n.gpus}" if n.gpus else ""
        lines.append(
            f"NodeName={n.name} NodeHostname={n.name} NodeAddr={n.address} Port={node_ports[n.name]} "
            f"CPUs={layout.cpus_per_node} RealMemory={layout.memory_mb}{gres} State=UNKNOWN"
        )
    for p in layout.partitions:
        members = ",".join(n.name for n in layout.nodes if n.partition == (p.nodes_of or p.name))
        default = "YES" if p.default else "NO"
        lines.append(
            f"PartitionName={p.name} Nodes={members} Default={default} MaxTime={p.max_time} "
            f"PriorityTier={p.priority_tier} State=UP"
        )
    return "\n".join(lines) + "\n"


def render_gres_conf(layout: Layout, d: Path) -> str:
    lines = []
    for n in layout.nodes:
        if n.gpus:
            lines.append(f"NodeName={n.name} Name=gpu File={d / 'dev' / 'gpu'}[0-{n.gpus - 1}]")
    return "\n".join(lines) + "\n"


def render_hosts(layout: Layout, base: str) -> str:
    """The host's own entries (localhost, ...) plus one line per cluster name."""
    ours = {layout.controller, *(n.name for n in layout.nodes)}
    keep = [ln for ln in base.splitlines() if not (set(ln.split("#")[0].split()[1:]) & ours)]
    lines = [*keep, f"{layout.controller_address} {layout.controller}"]
    lines += [f"{n.address} {n.name}" for n in layout.nodes]
    return "\n".join(lines) + "\n"
