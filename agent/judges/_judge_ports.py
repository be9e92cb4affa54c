"""The ports a managed SGLang judge binds, reserved on this host from the check to the bind.

SGLang binds its ports long after the agent chose them: torch.distributed's store (--nccl-port)
as its scheduler starts, the HTTP server (--port) once the weights are loaded, minutes later.
Both are chosen here in one grid block (agent.proc.ports) walked like Ray's: outside the kernel's
ephemeral range, so no outgoing connection on the host is handed one of them in between; from a
start hashed from the run and the judge, so two agents' judges start on different blocks; and
held with the block's lock file until the judge is started again or the agent ends, so another
agent's judge or Ray never takes the block while SGLang loads. What still can take a port is a
process outside gym-agent: SGLang then exits with EADDRINUSE, `lost_race` reads that from its
log, and the agent starts it again on the next block of the walk.

The reference server is not reserved for: it binds port 0 itself and publishes the port it got.
"""

from __future__ import annotations

import errno

from agent.proc import ports
from launch.spec.sections import JudgeConfig
from launch.spec.sglang_argv import bound_ports

__all__ = ["MAX_LINE", "PORT_RACE_MARKERS", "describe", "lost_race", "reserve"]

# What SGLang (uvicorn's bind, torch's TCPStore) and Python print when a port is taken.
PORT_RACE_MARKERS = ("address already in use", "eaddrinuse", "errno 98")
MAX_LINE = 300  # of the judge's own bind error, quoted in a failure's cause


def reserve(
    judge: JudgeConfig,
    run_key: str,
    attempt: int,
    ephemeral: tuple[int, int] | None = None,
    avoid: frozenset[int] = frozenset(),
) -> int:
    """The --port for start `attempt` (1, 2, ...) of `judge`: the base of a block that no other
    chooser on this host holds and in which every port the judge binds is free now, held for the
    judge (what it held before is let go). Each attempt starts one block further along the walk,
    so a start after a lost race is on new ports even if their taker has let them go since; the
    blocks of earlier starts (`avoid`) are skipped too, as a skipped busy block would otherwise
    make two starts meet on the next one. OSError(EADDRINUSE) when every block is held or in use."""

    def usable(base: int) -> bool:
        return base not in avoid and all(ports.free(p) for p in bound_ports(judge, base).values())

    order = ports.walk(f"{run_key}/judge/{judge.name}", attempt - 1, 1, ephemeral)
    base = ports.hold_block(f"judge-{judge.name}", order, usable)
    if base is None:
        raise OSError(
            errno.EADDRINUSE,
            "every port block outside the ephemeral range is held by another agent here or has a port in use",
        )
    return base


def lost_race(log: str) -> str | None:
    """The line of a judge's log (one start's part of it) that says a port it binds was taken,
    or None if it says no such thing."""
    for line in log.splitlines():
        low = line.lower()
        if any(m in low for m in PORT_RACE_MARKERS):
            return line.strip()[:MAX_LINE]
    return None


def describe(judge: JudgeConfig, port: int) -> str:
    """`--port 10050 and --nccl-port 10051`: the ports one start was given, as a cause names them."""
    return " and ".join(f"{flag} {p}" for flag, p in (bound_ports(judge, port) or {"--port": port}).items())
