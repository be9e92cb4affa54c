"""Extra ``#SBATCH`` directives of ``[launch.slurm] directives``: which are accepted.

The renderer owns the shape of the job (one task per node, GPUs per node, where output goes,
the failure policy): a directive that sets one of those would silently change what the plan
promised, so it is refused, as is one that a ``[launch.slurm]`` key sets, and any option sbatch
does not know (a typo would otherwise reach sbatch and fail only at submission). Long forms only:
short options are ambiguous to read (``-c`` vs ``-C``) and are refused with their long name.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ACCEPTED", "OWNED", "directive_name", "problems"]

# Written by the renderer from the plan; the value is what to change instead.
OWNED: dict[str, str] = {
    "--nodes": "the plan's replicas (sum of [pools.NAME] nodes)",
    "--ntasks": "one task per node",
    "--ntasks-per-node": "one task per node",
    "--gpus-per-node": "launch.gpus_per_replica",
    "--gres": "launch.gpus_per_replica",
    "--gpus": "launch.gpus_per_replica",
    "--output": "the run directory",
    "--error": "the run directory",
    "--open-mode": "append, so that a requeued job keeps its earlier output",
    "--job-name": "the run's name",
    "--chdir": "the directory gym-launch runs in",
    "--nodelist": "launch.hostnames",
    "--array": "one job per run",
    "--partition": "launch.slurm.partition",
    "--account": "launch.slurm.account",
    "--qos": "launch.slurm.qos",
    "--time": "launch.slurm.time",
}

# Other sbatch options a user may set (sbatch 22.05's long options).
ACCEPTED = frozenset(
    [
        "--acctg-freq",
        "--batch",
        "--bb",
        "--bbf",
        "--begin",
        "--cluster-constraint",
        "--clusters",
        "--comment",
        "--constraint",
        "--container",
        "--contiguous",
        "--core-spec",
        "--cores-per-socket",
        "--cpu-freq",
        "--cpus-per-gpu",
        "--cpus-per-task",
        "--deadline",
        "--delay-boot",
        "--dependency",
        "--distribution",
        "--exclude",
        "--exclusive",
        "--export",
        "--export-file",
        "--extra-node-info",
        "--get-user-env",
        "--gid",
        "--gpu-bind",
        "--gpu-freq",
        "--gpus-per-socket",
        "--gpus-per-task",
        "--hint",
        "--hold",
        "--ignore-pbs",
        "--input",
        "--licenses",
        "--mail-type",
        "--mail-user",
        "--mcs-label",
        "--mem",
        "--mem-bind",
        "--mem-per-cpu",
        "--mem-per-gpu",
        "--mincpus",
        "--network",
        "--nice",
        "--no-kill",
        "--no-requeue",
        "--ntasks-per-core",
        "--ntasks-per-gpu",
        "--ntasks-per-socket",
        "--overcommit",
        "--oversubscribe",
        "--power",
        "--priority",
        "--profile",
        "--propagate",
        "--reboot",
        "--requeue",
        "--reservation",
        "--signal",
        "--sockets-per-node",
        "--spread-job",
        "--switches",
        "--thread-spec",
        "--threads-per-core",
        "--time-min",
        "--tmp",
        "--uid",
        "--use-min-nodes",
        "--verbose",
        "--wait-all-nodes",
        "--wckey",
    ]
)


def directive_name(directive: str) -> str:
    return directive.split("=", 1)[0].strip()


def problems(directives: Sequence[str]) -> list[tuple[int, str]]:
    """(index, message) for every directive that cannot be written as given."""
    out: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for i, d in enumerate(directives):
        name = directive_name(d)
        if d != d.strip() or "\n" in d or "#" in d:
            out.append((i, f"{d!r}: one option per entry, without spaces around it, newlines or '#'"))
        elif not name.startswith("--"):
            out.append((i, f"{d!r}: write the long form (for example --exclusive, --mem=0)"))
        elif name in OWNED:
            out.append((i, f"{name} is set by gym-launch from {OWNED[name]}; remove it from the directives"))
        elif name not in ACCEPTED:
            out.append((i, f"{name} is not an sbatch option this renderer knows; check its spelling"))
        elif name in seen:
            out.append((i, f"{name} is given twice (entries {seen[name]} and {i}); keep one"))
        else:
            seen[name] = i
    return out
