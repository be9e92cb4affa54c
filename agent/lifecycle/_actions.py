"""What runs each placed and run step on this node: the runtimes' methods, named directly with the
node's topology bound (steps.py, which must import no runtime, prints each one's name; a test
checks the two agree), and the two steps that hand one runtime's result to another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from agent.coord.liveness import Liveness
from agent.coord.topology import Topology
from agent.judges.runtime import JudgeRuntime
from agent.lifecycle._driver import DriverRuntime
from agent.lifecycle._placement import check_devices, write_placement
from agent.lifecycle._running import Running
from agent.ray.runtime import RayRuntime
from schemas import Phase

__all__ = ["Action", "acknowledge", "bind", "start_ray"]


@dataclass(frozen=True)
class Action:
    """`run` returns the detail printed when its phase ends; `detail` gives the one printed when it
    begins (none without it)."""

    run: Callable[[], str]
    detail: Callable[[], str] | None = None


def bind(r: Running, topo: Topology) -> dict[Phase, Action]:
    """Each placed and run step's action on this node, by phase."""
    return {
        Phase.DATA_CHECK: Action(r.judges.check_data),
        Phase.DEVICES: Action(partial(check_devices, r.ctx, topo)),
        Phase.PREFLIGHT: Action(partial(r.preflight.run, topo)),
        Phase.PLACEMENT: Action(partial(write_placement, r.ctx, topo, r.preflight)),
        Phase.JUDGES_START: Action(partial(r.judges.start_local, topo)),
        Phase.RAY_START: Action(partial(start_ray, r.ray, r.judges, topo), detail=partial(r.ray.role, topo)),
        Phase.JUDGE_HEALTH: Action(r.judges.wait_local_healthy),
        Phase.READINESS: Action(partial(r.ray.readiness, topo)),
        Phase.REGISTRY: Action(partial(r.judges.write_registry, topo)),
        Phase.CANARIES: Action(partial(r.judges.run_canaries, topo)),
        Phase.DRIVER: Action(partial(r.driver.run, topo), detail=partial(r.driver.detail, topo)),
        Phase.COMPLETE: Action(partial(r.driver.complete, topo)),
        Phase.ACKNOWLEDGE: Action(partial(acknowledge, r.driver, r.liveness)),
    }


def start_ray(ray: RayRuntime, judges: JudgeRuntime, topo: Topology) -> str:
    # Ray's environment carries the judges' hand-off, so the judges' endpoints come first.
    return ray.start(topo, judges.ray_env(topo))


def acknowledge(driver: DriverRuntime, liveness: Liveness) -> str:
    detail = driver.acknowledge()
    liveness.stop_watching()  # peers may now exit: their silence is expected
    return detail
