"""One rank of the collectives bench (bench/collectives.py): the real trainer's step math (the
policy of examples/torch_trainer.py: 2,408 parameters, Adam, an all_reduce of the gradients and one
of the statistics) for STEPS steps, timed; then, with "hang", rank 1 skips one all_reduce and every
rank waits (the others inside it) until killed. Prints JSON lines: {"ms_per_step"}, then "stuck"."""

from __future__ import annotations

import datetime
import json
import sys
import time

import torch
import torch.distributed as dist

from agent import driver_api  # noqa: F401 - arms the collective-trace hook (GYM_COLLECTIVE_TRACE)

rank, world, port, steps, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(1)
torch.manual_seed(1234)
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600)
)
policy = torch.nn.Sequential(torch.nn.Linear(16, 96), torch.nn.Tanh(), torch.nn.Linear(96, 8))
optimizer = torch.optim.Adam(policy.parameters(), lr=0.05)
context = torch.ones(16)


def step() -> None:
    chosen = torch.multinomial(torch.softmax(policy(context), dim=-1).detach(), 8, replacement=True)
    rewards = torch.rand(8)
    loss = -((rewards - rewards.mean()) * torch.log_softmax(policy(context), dim=-1)[chosen]).mean()
    optimizer.zero_grad()
    loss.backward()
    flat = torch.cat([p.grad.reshape(-1) for p in policy.parameters()])
    dist.all_reduce(flat)
    at = 0
    for p in policy.parameters():
        p.grad.copy_(flat[at : at + p.numel()].view_as(p) / world)
        at += p.numel()
    optimizer.step()
    dist.all_reduce(torch.tensor([loss.item(), rewards.mean().item()]))


step()  # warm up
dist.barrier()
t0 = time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({"ms_per_step": 1000 * (time.perf_counter() - t0) / steps}), flush=True)
if mode == "hang":
    print("stuck", flush=True)  # before: the others never return from their all_reduce
    if rank != 1:
        dist.all_reduce(torch.ones(4))
    time.sleep(3600)
dist.destroy_process_group()
