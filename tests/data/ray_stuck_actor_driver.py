"""A driver whose Ray actors sit one per node: two wait in a barrier, the one on the node with the
highest address is stuck loading weights, and the driver waits for all three in ray.get: a hang
whose odd one out is that actor (tests/test_hang_ray.py, bench/faults.py ray-actor-stuck)."""

import threading
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from agent import driver_api


def load_weights() -> None:
    time.sleep(3600)  # a read that never returns


def barrier() -> None:
    threading.Event().wait()  # every peer is waiting for the stuck one


@ray.remote(num_cpus=0)
class Shard:
    def run(self, stuck: bool) -> None:
        if stuck:
            load_weights()
        else:
            barrier()


def main() -> None:
    driver_api.connect_ray()
    nodes = sorted(
        (n for n in ray.nodes() if n["Alive"]), key=lambda n: tuple(map(int, n["NodeManagerAddress"].split(".")))
    )
    driver_api.progress(0)
    shards = [
        Shard.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)).remote()
        for n in nodes
    ]
    starting = [s.__ray_ready__.remote() for s in shards]
    while starting:  # actors slow to start (a loaded machine) are not the hang: say so each second
        _, starting = ray.wait(starting, num_returns=len(starting), timeout=1.0)
        driver_api.progress(0)
    driver_api.progress(1)
    print(f"{len(shards)} shards on {[n['NodeManagerAddress'] for n in nodes]}", flush=True)
    ray.get([s.run.remote(i == len(shards) - 1) for i, s in enumerate(shards)])


if __name__ == "__main__":
    main()
