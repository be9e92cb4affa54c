"""What exists once the lifecycle runs: the run context, the reaper, the liveness thread and the
runtimes, started before the first step (_wiring.py) and handed to every step and to the teardown."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from agent.coord.context import RunContext
from agent.coord.liveness import Liveness
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle._driver import DriverRuntime
from agent.lifecycle._hang_stacks import HangStacks
from agent.preflight.runtime import PreflightRuntime
from agent.ray.runtime import RayRuntime
from agent.stacks.live import LiveStacks

__all__ = ["Running"]


@dataclass(frozen=True)
class Running:
    ctx: RunContext
    reaper: subprocess.Popen[str]
    liveness: Liveness
    judges: JudgeRuntime
    ray: RayRuntime
    driver: DriverRuntime
    preflight: PreflightRuntime
    stacks: HangStacks  # a hang's stacks, taken before the teardown
    live: LiveStacks  # answers gym-launch stacks
