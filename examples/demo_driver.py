"""The demo's training driver: a real Ray program on the cluster the agents built.

One trainer actor and one rollout actor per node that plans them, each pinned to its node with
Ray's `node:<address>` resource and asking for that node's planned GPU count; each checks from
inside that it landed on the planned address with that many GPUs. Then a few toy optimization
steps (fit y = 3x + 1 from rollout samples), a policy refresh after every step, judge grading
of rollouts through the registry when judges are bound, and driver-result.json.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import sys

import ray

from agent import driver_api

STEPS = int(os.environ.get("DEMO_STEPS", "4"))
SAMPLES_PER_ROLLOUT = 16


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self, expect_address: str, expect_gpus: int) -> None:
        self.w, self.b, self.version = 0.0, 0.0, 0
        self.where = _check_where("trainer", expect_address, expect_gpus)

    def where_am_i(self) -> dict:
        return self.where

    def step(self, batches: list[list[tuple[float, float]]], lr: float = 0.05) -> float:
        data = [s for batch in batches for s in batch]
        gw = gb = loss = 0.0
        for x, y in data:
            err = self.w * x + self.b - y
            loss += err * err
            gw += 2 * err * x
            gb += 2 * err
        n = len(data)
        self.w -= lr * gw / n
        self.b -= lr * gb / n
        self.version += 1
        return loss / n

    def weights(self) -> tuple[int, float, float]:
        return self.version, self.w, self.b


@ray.remote(num_cpus=0)
class Rollout:
    def __init__(self, expect_address: str, expect_gpus: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.version, self.w, self.b = 0, 0.0, 0.0
        self.where = _check_where("rollout", expect_address, expect_gpus)

    def where_am_i(self) -> dict:
        return self.where

    def refresh(self, version: int, w: float, b: float) -> int:
        self.version, self.w, self.b = version, w, b
        return version

    def generate(self, n: int) -> list[tuple[float, float]]:
        xs = [self.rng.uniform(-1, 1) for _ in range(n)]
        return [(x, 3 * x + 1 + self.rng.gauss(0, 0.01)) for x in xs]

    def answer(self, question: str) -> str:
        # A toy "policy answer": good once the policy has learned, noisy before.
        return "The capital of France is Paris." if self.version >= 1 else "Lyon, maybe."


def _check_where(role: str, expect_address: str, expect_gpus: int) -> dict:
    address = ray.util.get_node_ip_address()
    gpus = ray.get_gpu_ids()
    where = {
        "role": role,
        "address": address,
        "gpus": len(gpus),
        "gpu_ids": [str(g) for g in gpus],
        "expected_address": expect_address,
        "expected_gpus": expect_gpus,
    }
    if address != expect_address or len(gpus) != expect_gpus:
        raise RuntimeError(f"{role} actor misplaced: {where}")
    return where


def show_run_file() -> None:
    """The MILES run file the launcher handed over (GYM_RUN_FILE): its size and digest."""
    path = driver_api.run_file()
    if path is None:
        return
    raw = path.read_bytes()
    print(f"run file {path}: {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}", flush=True)


def main() -> int:
    show_run_file()
    driver_api.connect_ray(logging_level="ERROR")
    plan = driver_api.plan()
    addresses = plan["addresses"]
    trainers, rollouts = [], []
    for node, address in zip(plan["nodes"], addresses, strict=True):
        pin = {f"node:{address}": 0.001}
        if node["trainer_gpus"]:
            trainers.append(
                Trainer.options(num_gpus=node["trainer_gpus"], resources=pin).remote(address, node["trainer_gpus"])
            )
        if node["rollout_gpus"]:
            rollouts.append(
                Rollout.options(num_gpus=node["rollout_gpus"], resources=pin).remote(
                    address, node["rollout_gpus"], seed=len(rollouts)
                )
            )
    placements = ray.get([a.where_am_i.remote() for a in trainers + rollouts])
    for p in placements:
        print(f"placed {p['role']} on {p['address']} with {p['gpus']} GPUs {p['gpu_ids']}", flush=True)

    trainer = trainers[0]
    losses: list[float] = []
    refreshes = 0
    for step in range(STEPS):
        batches = ray.get([r.generate.remote(SAMPLES_PER_ROLLOUT) for r in rollouts])
        loss = ray.get(trainer.step.remote(batches, 0.3))
        version, w, b = ray.get(trainer.weights.remote())
        ray.get([r.refresh.remote(version, w, b) for r in rollouts])
        refreshes += 1
        losses.append(loss)
        print(
            f"step {step + 1}: loss {loss:.4f}, policy version {version} pushed to {len(rollouts)} engines", flush=True
        )

    judge_replies, judge_samples = _grade_with_judges(rollouts)
    version = ray.get(trainer.weights.remote())[0]
    if not all(math.isfinite(x) for x in losses):
        print("non-finite loss", file=sys.stderr)
        return 1
    driver_api.write_result(
        optimizer_steps=len(losses),
        losses=losses,
        final_loss=losses[-1],
        policy_version=version,
        policy_refreshes=refreshes,
        judge_replies=judge_replies,
        placements=placements,
        judge_samples=judge_samples,
    )
    print(f"done: {len(losses)} steps, final loss {losses[-1]:.4f}, {judge_replies} judge replies", flush=True)
    return 0


def _grade_with_judges(rollouts: list) -> tuple[int, list[dict]]:
    """Grade real rollout answers through every binding of the registry (none: no judge replies)."""
    registry = driver_api.registry()
    if not registry["bindings"]:
        return 0, []
    from agent.judges._bindings import bindings_from_registry

    sample = {"metadata": {"judge_query": "What is the capital of France?"}, "label": "Paris."}
    answers = ray.get([r.answer.remote(sample["metadata"]["judge_query"]) for r in rollouts])
    replies, samples = 0, []
    for verifier, bound in sorted(bindings_from_registry(registry).items()):
        for answer in answers:
            grade = bound.grade_sample(sample, answer, reference=sample["label"])
            replies += 1
            samples.append(
                {
                    "verifier": verifier,
                    # The question and reference too: gym-launch regrade grades these answers again.
                    "question": sample["metadata"]["judge_query"],
                    "reference": sample["label"],
                    "answer": answer,
                    "score": grade.score,
                    "latency_s": grade.verifier_diagnostics.get("latency_s"),
                }
            )
            print(f"judge {bound.judge} via {verifier}: {answer!r} -> {grade.score}", flush=True)
    return replies, samples


if __name__ == "__main__":
    sys.exit(main())
