"""A real (tiny) trainer under the agent: torch.distributed across the run's nodes, rewards from the
managed judge. Copy it as the shape of your own trainer.

One rank per planned node, each a Ray actor pinned to its node (`node:<address>`). The ranks join
one process group (gloo on CPU, NCCL where CUDA is available) at the agent's rendezvous: the
driver's node and a port the agent holds for it (agent.driver_api.rendezvous()). The policy is a
small network (~3,000 parameters) choosing one of a few candidate answers to a question; each step
every rank samples answers, the judge grades them all through grade_many, each rank computes its
REINFORCE loss, the gradients are averaged with all_reduce, and every rank takes the same
optimizer step. The driver calls progress(step) after each step, rank 0 writes a checkpoint, and
the driver writes driver-result.json (the evidence the audit reads).

Importing agent.driver_api in the actor (as here) arms the agent's hang evidence there: the stack
fallback and, with [driver] collective_trace, the Flight Recorder dump the audit names a stuck
collective from. Needs torch (`pip install 'gym-agent[trainer]'`, or your own torch).

Fault switches for the project's fault matrix (not for users): TRAINER_SKIP="RANK:STEP" makes that
rank skip that step's last all_reduce (its statistics'); TRAINER_SIZE_MISMATCH="RANK:STEP" makes it all_reduce a tensor
of another size; TRAINER_STEP_SLEEP seconds of sleep inside each step (time to kill a rank);
TRAINER_COLLECTIVE_TIMEOUT the process group's timeout in seconds.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
import time
from typing import Any

import ray

from agent import driver_api
from schemas import DriverEnv

STEPS = int(os.environ.get("TRAINER_STEPS", "4"))
SAMPLES = 8  # answers each rank samples per step
QUESTION = "What is the capital of France?"
REFERENCE = "Paris."
CANDIDATES = (
    "The capital of France is Paris.",
    "Paris.",
    "Lyon, maybe.",
    "Marseille is a large city.",
    "I do not know.",
    "Berlin.",
    "France has many cities.",
    "The answer is Nice.",
)
FEATURES, HIDDEN = 16, 96


def _settings() -> dict[str, str]:
    """The driver's TRAINER_* variables, handed to every rank (Ray workers have the node's env)."""
    return {k: v for k, v in os.environ.items() if k.startswith("TRAINER_")}


@ray.remote(num_cpus=0)
class Rank:
    """One rank of the process group, on one node."""

    def __init__(
        self, rank: int, world: int, host: str, port: int, checkpoint_dir: str, settings: dict[str, str]
    ) -> None:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self.settings = settings
        import torch
        import torch.distributed as dist

        from agent import driver_api as _armed  # noqa: F401 - arms the hang evidence in this process

        self.torch, self.dist = torch, dist
        torch.manual_seed(1234)  # the same initial policy on every rank
        torch.set_num_threads(1)
        self.rank, self.world, self.checkpoint_dir = rank, world, checkpoint_dir
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        timeout = float(settings.get("TRAINER_COLLECTIVE_TIMEOUT", "600"))
        dist.init_process_group(
            backend,
            init_method=f"tcp://{host}:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout),
        )
        self.policy = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, len(CANDIDATES))
        ).to(self.device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=0.05)
        self.generator = torch.Generator().manual_seed(rank)
        self.context = torch.ones(FEATURES, device=self.device)  # one prompt: a fixed context
        self._chosen: Any = None

    def describe(self) -> dict[str, Any]:
        params = sum(p.numel() for p in self.policy.parameters())
        return {"rank": self.rank, "backend": self.dist.get_backend(), "parameters": params, "pid": os.getpid()}

    def sample(self) -> list[str]:
        torch = self.torch
        with torch.no_grad():
            probs = torch.softmax(self.policy(self.context), dim=-1).cpu()
        self._chosen = torch.multinomial(probs, SAMPLES, replacement=True, generator=self.generator)
        return [CANDIDATES[int(i)] for i in self._chosen]

    def step(self, step: int, rewards: list[float]) -> dict[str, float]:
        torch, dist = self.torch, self.dist
        time.sleep(float(self.settings.get("TRAINER_STEP_SLEEP", "0")))
        r = torch.tensor(rewards, device=self.device)
        advantage = r - r.mean()
        logp = torch.log_softmax(self.policy(self.context), dim=-1)[self._chosen.to(self.device)]
        loss = -(advantage * logp).mean()
        self.optimizer.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in self.policy.parameters()])
        if self._fault("TRAINER_SIZE_MISMATCH", step):
            flat = flat[:-1]
        dist.all_reduce(flat)  # the gradients averaged across ranks: every rank steps alike
        flat /= self.world
        at = 0
        for p in self.policy.parameters():
            n = p.numel()
            p.grad.copy_(flat[at : at + n].view_as(p))
            at += n
        self.optimizer.step()
        stats = torch.tensor([loss.item(), r.mean().item()], device=self.device)
        if not self._fault("TRAINER_SKIP", step):
            dist.all_reduce(stats)
        return {"loss": stats[0].item() / self.world, "reward": stats[1].item() / self.world}

    def _fault(self, name: str, step: int) -> bool:
        return self.settings.get(name) == f"{self.rank}:{step}"

    def checkpoint(self, step: int) -> str:
        path = os.path.join(self.checkpoint_dir, f"policy-step{step}.pt")
        if self.rank == 0:
            self.torch.save({"step": step, "policy": self.policy.state_dict()}, path + ".tmp")
            os.replace(path + ".tmp", path)
        self.dist.barrier()
        return path

    def close(self) -> None:
        self.dist.destroy_process_group()


def started(refs: list[Any]) -> list[Any]:
    """Every rank up (torch imported, the process group joined), telling the agent the driver is
    alive meanwhile: starting ranks is progress, and a rank that never joins is bounded by the
    process group's own timeout (init_process_group raises), not by the agent's progress_timeout."""
    pending = list(refs)
    while pending:
        _ready, pending = ray.wait(pending, num_returns=len(pending), timeout=1.0)
        driver_api.progress()
    return ray.get(refs)


def gather(refs: list[Any], grace: float = 15.0) -> list[Any]:
    """Every rank's result; when one fails, the others' outcomes too (bounded by `grace`), each said
    in the log, so a rank that died and the collective its peers were left in are both on record."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayError:
        ray.wait(refs, num_returns=len(refs), timeout=grace)
        for i, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.GetTimeoutError:
                print(f"rank {i}: still running after {grace:g} s", file=sys.stderr, flush=True)
            except ray.exceptions.RayError as exc:
                print(f"rank {i} failed: {exc}", file=sys.stderr, flush=True)
        raise


def grade(answers: list[str]) -> list[float]:
    """Every answer through the first judge binding's grade_many: the rewards, in 0..1."""
    from agent.judges._bindings import bindings_from_registry

    bindings = bindings_from_registry(driver_api.registry())
    if not bindings:
        return [1.0 if a.endswith("Paris.") else 0.0 for a in answers]  # no judge bound: a rule
    _name, bound = sorted(bindings.items())[0]
    grades = bound.grade_many([(QUESTION, a, REFERENCE) for a in answers])
    return [float(g.score) for g in grades]  # type: ignore[union-attr]


def main() -> int:
    driver_api.connect_ray(logging_level="ERROR")
    plan = driver_api.plan()
    rendezvous = driver_api.rendezvous()
    if rendezvous is None:
        print("no rendezvous from the agent (is [ray] enabled?)", file=sys.stderr)
        return 2
    host, port = rendezvous
    checkpoints = os.environ.get(DriverEnv.CHECKPOINT_DIR, ".")
    addresses = plan["addresses"]
    # One GPU per rank where the node's Ray has GPUs (NCCL on a GPU node; this CPU machine's GPUs are
    # labels, so torch finds no CUDA and the group is gloo), none on a CPU node.
    gpus = [1 if n["trainer_gpus"] or n["rollout_gpus"] else 0 for n in plan["nodes"]]
    ranks = [
        Rank.options(num_gpus=g, resources={f"node:{a}": 0.001}).remote(
            i, len(addresses), host, port, checkpoints, _settings()
        )
        for i, (a, g) in enumerate(zip(addresses, gpus, strict=True))
    ]
    for d in started([r.describe.remote() for r in ranks]):
        print(f"rank {d['rank']}: {d['backend']}, {d['parameters']} parameters, pid {d['pid']}", flush=True)
    losses: list[float] = []
    rewards: list[float] = []
    replies = 0
    for step in range(1, STEPS + 1):
        answers = ray.get([r.sample.remote() for r in ranks])
        flat = [a for per_rank in answers for a in per_rank]
        scores = grade(flat)
        replies += len(scores)
        per_rank = [scores[i * SAMPLES : (i + 1) * SAMPLES] for i in range(len(ranks))]
        stats = gather([r.step.remote(step, s) for r, s in zip(ranks, per_rank, strict=True)])
        losses.append(stats[0]["loss"])
        rewards.append(stats[0]["reward"])
        driver_api.progress(step)
        print(f"step {step}: loss {losses[-1]:.4f}, mean reward {rewards[-1]:.3f}", flush=True)
    path = ray.get([r.checkpoint.remote(STEPS) for r in ranks])[0]
    ray.get([r.close.remote() for r in ranks])
    if not all(math.isfinite(x) for x in losses):
        print("non-finite loss", file=sys.stderr)
        return 1
    driver_api.write_result(
        optimizer_steps=len(losses),
        losses=losses,
        final_loss=losses[-1],
        policy_version=len(losses),
        policy_refreshes=len(losses),
        judge_replies=replies,
    )
    print(f"done: {len(losses)} steps, checkpoint {os.path.basename(path)}, {replies} judge replies", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
