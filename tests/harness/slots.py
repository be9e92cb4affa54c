"""How many tests that start Ray nodes run at once, across the workers of one pytest session.

A Ray node costs a few CPU seconds to start (`ray start`, raylet, GCS, agents: about 20 CPU-s for
three nodes) and Ray gives its nodes a bounded time to register; on a 2-core machine, four clusters
starting together time out. So a test marked `ray` holds one of SLOTS slots from its setup to its
teardown, and one marked `quiet` (it measures a latency with a tight bound) holds all of them:
no Ray node starts while it runs. Other tests run beside them freely.

A slot is a lock file (filelock, so the kernel drops it with a worker that dies) in a directory
named after the session's run id, which every xdist worker shares: two sessions on one machine do
not share slots. The harness asks `require_ray()` before it starts agents whose spec enables Ray:
a test that starts Ray without the mark fails at once, saying which mark it needs.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

SLOTS_ENV = "GYM_TEST_RAY_SLOTS"
DEFAULT_SLOTS = 2
RUN_ENV = "PYTEST_XDIST_TESTRUNUID"  # set by pytest-xdist in every worker of a session

# Set by conftest for the test that runs now: how many slots it holds (None outside pytest: bench/
# uses the harness without slots).
held: int | None = None


def count() -> int:
    try:
        return max(1, int(os.environ.get(SLOTS_ENV, DEFAULT_SLOTS)))
    except ValueError:
        return DEFAULT_SLOTS


def _dir() -> Path:
    run = os.environ.get(RUN_ENV) or f"pid{os.getpid()}"
    d = Path(tempfile.gettempdir()) / f"gym-test-slots-{run}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


@contextmanager
def holding(wanted: int, poll: float = 0.2) -> Iterator[None]:
    """Hold `wanted` of the session's slots (all of them at most) until the block ends. One slot:
    whichever is free. Several: taken in order, each waited for, so that two tests that want
    several never each hold a part and wait for the rest, and a quiet test is not starved by
    tests that take one slot at a time."""
    global held
    total = count()
    wanted = min(wanted, total)
    d = _dir() if wanted else None
    locks = [FileLock(str(d / f"slot-{i}.lock"), thread_local=False) for i in range(total)] if d else []
    mine: list[FileLock] = []
    if wanted == 1:
        while not mine:
            for lock in locks:
                try:
                    lock.acquire(blocking=False)
                except Timeout:
                    continue
                mine.append(lock)
                break
            else:
                time.sleep(poll)
    else:
        for lock in locks[:wanted]:
            lock.acquire()
            mine.append(lock)
    held = wanted
    try:
        yield
    finally:
        held = None
        for lock in mine:
            lock.release()


def _yaml(text: str) -> object:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def starts_ray(spec_text: str) -> bool:
    """Whether agents of this spec (TOML, a NeMo Gym YAML, or a run's spec.json) start Ray nodes (ray.enabled, or by
    default a trainer, rollout or a [ray] table; a MILES run file trains). A spec that does not parse
    starts nothing: the agents refuse it."""
    try:
        doc = json.loads(spec_text) if spec_text.lstrip().startswith("{") else tomllib.loads(spec_text)
    except (ValueError, tomllib.TOMLDecodeError):
        doc = _yaml(spec_text)
    if isinstance(doc, dict) and isinstance(doc.get("spec"), dict):  # spec.json: the spec as spelled
        doc = doc["spec"]
    if isinstance(doc, dict) and "compute" in doc and isinstance(doc.get("services"), dict):
        # A NeMo Gym config: Ray only with a type: ray service.
        return any(isinstance(s, dict) and s.get("type") == "ray" for s in doc["services"].values())
    if not isinstance(doc, dict):
        return True
    ray = doc.get("ray")
    if isinstance(ray, dict) and "enabled" in ray:
        return ray["enabled"] is not False
    # Absent: Ray where the trainer, rollout or a [ray] table needs it (launch.spec.config.RunConfig).
    trainer, inference = doc.get("trainer"), doc.get("inference")
    needs = [t.get(k) for t, k in ((trainer, "nodes"), (inference, "gpus")) if isinstance(t, dict)]
    return ray is not None or "schema_version" in doc or "model" in doc or any(n != 0 for n in needs) or not needs


def require_ray(what: str, spec_text: str) -> None:
    """Fail a test that is about to start Ray nodes without holding a slot (bench/ is not checked)."""
    if held == 0 and starts_ray(spec_text):
        raise AssertionError(
            f"{what} starts Ray nodes: mark the test @pytest.mark.ray (tests/conftest.py limits how many run at once)"
        )
