"""How the agent starts a service's own process (seed 001): its ``env`` (``runtime:VAR`` values taken
from the job's environment at start), its ``pre_command`` and its ``container``. Pure: the agent passes
its environment in and gets the argv and the variables to add back.

- ``env``: added to the service's environment; a ``runtime:VAR`` value is VAR of the agent's
  environment (the batch shell's on Slurm: every step inherits it), read here and never written to
  a record.
- ``pre_command``: ``bash -c`` runs it with ``set -e`` (a failing statement fails the service), then
  ``exec``s the service in the same shell, so its exports reach it.
- ``container``: the service runs as a Slurm step of its own on the agent's node, in its image, by
  the srun words the batch script exported (``JobEnv.container_step``) plus ``--nodelist`` of this
  node. A step gets every GPU of the job's node, so the plan's devices are set again inside it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launch.spec.resolve import RUNTIME_PREFIX, Service
from schemas import JobEnv
from schemas.errors import GymError

__all__ = ["ServiceProcess", "ServiceProcessError", "service_process"]

SLURM_NODE = "SLURMD_NODENAME"  # Slurm sets it in every task: the node the agent's step runs on


class ServiceProcessError(GymError):
    """A service cannot be started as its keys say (a runtime: variable unset, no container step)."""


@dataclass(frozen=True)
class ServiceProcess:
    argv: tuple[str, ...]
    env: Mapping[str, str]  # to add to the service's environment


def service_process(
    key: str,
    svc: Service,
    argv: Sequence[str],
    environ: Mapping[str, str],
    *,
    devices: str | None = None,
) -> ServiceProcess:
    """The argv and added environment of service ``key`` ("policy", "judges.NAME", "ray") whose own
    command is ``argv``; ``devices`` is its CUDA_VISIBLE_DEVICES (set again inside a container step)."""
    env = {name: _value(key, name, value, environ) for name, value in svc.env.items()}
    lines = []
    if svc.container is not None and devices is not None:
        lines.append(f"export CUDA_VISIBLE_DEVICES={shlex.quote(devices)}")
    if svc.pre_command:
        lines += ["set -e", svc.pre_command, "set +e"]
    out = list(argv)
    if lines:
        # "$@" is the service's own argv, passed as words: nothing of it is parsed by the shell.
        out = ["bash", "-c", "\n".join([*lines, 'exec "$@"']), key, *out]
    if svc.container is not None:
        out = [*_step_words(key, environ), *out]
    return ServiceProcess(tuple(out), env)


def _value(key: str, name: str, value: str, environ: Mapping[str, str]) -> str:
    if not value.startswith(RUNTIME_PREFIX):
        return value
    var = value[len(RUNTIME_PREFIX) :]
    if var not in environ:
        raise ServiceProcessError(
            f"{key}.env.{name} takes {var} from the job's environment (runtime:{var}), and it is not set there: "
            f"export {var} before the job starts (the batch script's environment, or [launch] env)"
        )
    return environ[var]


def _step_words(key: str, environ: Mapping[str, str]) -> list[str]:
    var = JobEnv.container_step(key)
    words, node = environ.get(var), environ.get(SLURM_NODE)
    if not words or not node:
        raise ServiceProcessError(
            f"{key}.container runs the service as a Slurm step in its image, and this agent has no such step "
            f"({var} or {SLURM_NODE} is not set): start the run with gym-launch submit --backend slurm"
        )
    return [*shlex.split(words), f"--nodelist={node}"]
