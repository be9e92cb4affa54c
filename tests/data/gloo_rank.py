"""One rank of a 3-rank gloo group for tests/test_collectives.py: STEPS all_reduces of 4 floats,
then (rank FAULT_RANK) a different last step: "skip" (it skips the last all_reduce and waits),
"barrier" (a barrier where the others all_reduce), "sizes" (5 floats where the others reduce 4).
Imports agent.driver_api first (the agent's hook), then torch; prints "entered" before the step
that hangs, and waits there until killed."""

import datetime
import sys
import time

import torch
import torch.distributed as dist

from agent import driver_api  # noqa: F401 - arms the collective-trace hook (GYM_COLLECTIVE_TRACE)

rank, port, fault = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
STEPS, FAULT_RANK = 5, 1
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3, timeout=datetime.timedelta(seconds=120)
)
t = torch.ones(4)
for _ in range(STEPS):
    dist.all_reduce(t)
print("entered", flush=True)
if rank != FAULT_RANK:
    dist.all_reduce(t)
elif fault == "skip":
    time.sleep(600)
elif fault == "barrier":
    dist.barrier()
elif fault == "sizes":
    dist.all_reduce(torch.ones(5))
time.sleep(600)
