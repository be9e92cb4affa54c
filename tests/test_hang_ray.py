"""A Ray actor stuck on one of three local Ray nodes (issue 34): the driver waits for every actor in
ray.get and calls progress() no more; its node calls the hang, every node keeps the stacks of its
Ray workers before anything is torn down (stopping the driver would end its actors on every node),
and the audit names the stuck actor, on the third node, as the odd one out. Nothing is left."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.api import audit_run
from schemas import names
from tests.harness import assert_artifacts_valid, assert_nothing_left, failures, launch_local, read, small_spec, uid

# `make test-long`: `make faults` runs the same stuck actor three times (its ray-actor-stuck row), and
# `make test` keeps the hang of a driver without Ray (tests/test_hang_e2e.py).
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.long]
DRIVER = Path(__file__).parent / "data" / "ray_stuck_actor_driver.py"


def test_a_ray_actor_stuck_on_one_of_three_nodes_is_the_named_odd_one_out(tmp_path: Path) -> None:
    driver = f'command = ["python", "{DRIVER}"]\nprogress_timeout = 6\ntrains = false'
    spec = small_spec(driver=driver, ray=True, heartbeat_timeout=10, startup_timeout=240, poll_interval=0.25)
    run = launch_local(tmp_path, spec, uid("hang-ray"))
    assert run.wait(400) == 1, run.text[-3000:]
    recs = failures(run.run_dir)
    assert recs[0]["kind"] == "hang" and recs[0]["hang"]["source"] == "progress" and recs[0]["hang"]["last_step"] == 1
    for rank in range(3):  # every node read its actor before any node tore down
        doc = read(run.run_dir, names.stacks(rank))
        shards = [p for p in doc["processes"] if p["role"] == "ray_worker" and p["cmdline"][:1] == ["ray::Shard.run"]]
        assert shards and shards[0]["threads"], (rank, [(p["cmdline"][:1], p.get("problem")) for p in doc["processes"]])
    assert_artifacts_valid(run.run_dir)
    result = audit_run(run.run_dir)
    assert result.first_cause is not None and result.first_cause.kind == "hang" and result.first_cause.rank == 0
    assert result.stacks is not None and result.stacks.ranks == (0, 1, 2)
    [odd] = result.stacks.odd
    assert odd.role == "ray_worker" and [p.rank for p in odd.members] == [2]
    assert odd.shown() == "load_weights ← Shard.run", odd.line()
    barrier = next(g for g in result.stacks.groups if "barrier" in g.shown())
    assert sorted(p.rank for p in barrier.members) == [0, 1]
    assert_nothing_left(run.run_dir)
