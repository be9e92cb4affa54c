"""A resumable trainer that keeps a sample ledger: the demo of issue 52's proof that a resumed run
consumed its data exactly once (docs/guides/sample-ledger.md).

A tiny torch model (a linear regression; each sample's features and target derive from its id) trains
on the ids of a dataset file, one batch per optimizer step, for a few epochs: each in the file's order, or
reshuffled every epoch by the one rule the audit can recompute (`driver_api.epoch_order`). After
every step it tells the agent which ids that step trained on (`driver_api.ledger`); every few steps it
saves a real checkpoint (the model, the optimizer and the loader's position, in one torch file under
GYM_CHECKPOINT_DIR, written whole then renamed) and says so (`driver_api.checkpoint`). A later attempt
(`gym-launch ... --resume`) loads that checkpoint and goes on from it; the steps of the killed attempt
after its last checkpoint are trained again (the replay the audit counts apart).

The loader's position is where the three ways differ (LEDGER_LOADER, for the proof; not for users):
- `correct`: the position saved is the next sample the model will train on. Resumed runs consume every
  id once per epoch.
- `restarts-epoch`: the loader saves its epoch but not its place in it, so a resumed run starts the
  epoch again while the step count goes on: the ids before the checkpoint are trained twice.
- `skips-ahead`: the loader saves the position of its prefetcher, PREFETCH batches ahead of the
  model, so a resumed run starts past ids it never trained on.

Other settings: LEDGER_EPOCHS (2), LEDGER_BATCH (4 ids a step), LEDGER_CHECKPOINT_EVERY (5 steps),
LEDGER_STEP_SLEEP (seconds a step sleeps, so that a run can be killed mid-way; 0.2), LEDGER_SHUFFLE_SEED
(absent: the file's order; the same number as the spec's `[driver.ledger] shuffle_seed`). The dataset
is the first argument (default: data/ledger-ids.txt beside this file), one id a line, the same file
the spec declares as `[driver.ledger] order`.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import driver_api
from schemas import DriverEnv

MODES = ("correct", "restarts-epoch", "skips-ahead")
PREFETCH = 3  # batches the skips-ahead loader's prefetcher runs ahead of the model
FEATURES = 8
CHECKPOINT = "ledger-demo.pt"  # under GYM_CHECKPOINT_DIR, the same directory in every attempt
DATASET = Path(__file__).resolve().parent / "data" / "ledger-ids.txt"


@dataclass(frozen=True)
class Settings:
    mode: str
    epochs: int
    batch: int
    checkpoint_every: int
    step_sleep: float
    shuffle_seed: int | None


def settings(env: dict[str, str]) -> Settings:
    mode = env.get("LEDGER_LOADER", "correct")
    if mode not in MODES:
        raise SystemExit(f"LEDGER_LOADER is {mode!r}: use one of {', '.join(MODES)}")
    return Settings(
        mode,
        int(env.get("LEDGER_EPOCHS", "2")),
        int(env.get("LEDGER_BATCH", "4")),
        int(env.get("LEDGER_CHECKPOINT_EVERY", "5")),
        float(env.get("LEDGER_STEP_SLEEP", "0.2")),
        int(env["LEDGER_SHUFFLE_SEED"]) if env.get("LEDGER_SHUFFLE_SEED") else None,
    )


@dataclass(frozen=True)
class Position:
    """The loader's place: the next sample is the index-th of epoch `epoch`'s order."""

    epoch: int
    index: int


class Loader:
    """Batches of ids, epoch after epoch (each in the file's order, or shuffled by `seed`), from a position."""

    def __init__(self, ids: list[str], s: Settings, start: Position) -> None:
        self.ids, self.batch, self.epochs, self.mode, self.seed = ids, s.batch, s.epochs, s.mode, s.shuffle_seed
        self.position = _normal(start, len(ids))
        self._order: tuple[int, list[str]] = (-1, [])

    def epoch_ids(self, epoch: int) -> list[str]:
        if self.seed is None:
            return self.ids
        if self._order[0] != epoch:
            lines = driver_api.epoch_order(len(self.ids), self.seed, epoch)
            self._order = (epoch, [self.ids[i] for i in lines])
        return self._order[1]

    def __iter__(self) -> Loader:
        return self

    def __next__(self) -> tuple[int, list[str]]:
        p = self.position
        if p.epoch >= self.epochs:
            raise StopIteration
        chunk = self.epoch_ids(p.epoch)[p.index : p.index + self.batch]
        self.position = _normal(Position(p.epoch, p.index + len(chunk)), len(self.ids))
        return p.epoch, chunk

    def state(self) -> dict[str, int]:
        """What the checkpoint keeps of the loader: here each mode's bug lives."""
        p = self.position
        if self.mode == "restarts-epoch":
            return {"epoch": p.epoch}  # its place in the epoch is not saved
        if self.mode == "skips-ahead":
            ahead = _normal(Position(p.epoch, p.index + PREFETCH * self.batch), len(self.ids))
            return {"epoch": ahead.epoch, "index": ahead.index}  # the prefetcher's place, not the model's
        return {"epoch": p.epoch, "index": p.index}


def _normal(p: Position, n: int) -> Position:
    return Position(p.epoch + 1, 0) if p.index >= n else p


def read_ids(path: Path) -> list[str]:
    ids = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not ids:
        raise SystemExit(f"{path}: no ids (one a line)")
    return ids


class Model:
    """y = w.x + b fitted by SGD; a sample's x and y follow from its id alone."""

    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.torch = torch
        self.net = torch.nn.Linear(FEATURES, 1)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.05)
        self.truth = torch.linspace(-1.0, 1.0, FEATURES)

    def sample(self, sample_id: str) -> tuple[Any, Any]:
        torch = self.torch
        seed = int.from_bytes(hashlib.sha256(sample_id.encode()).digest()[:8], "big")
        x = torch.randn(FEATURES, generator=torch.Generator().manual_seed(seed))
        return x, (x @ self.truth + 0.5).reshape(1)

    def step(self, ids: list[str]) -> float:
        xs, ys = zip(*(self.sample(i) for i in ids), strict=True)
        loss = self.torch.nn.functional.mse_loss(self.net(self.torch.stack(xs)), self.torch.stack(ys))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def save(self, path: Path, step: int, loader: dict[str, int]) -> None:
        doc = {"step": step, "model": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}
        self.torch.save({**doc, "loader": loader}, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)  # whole or absent: a kill mid-save keeps the last one

    def load(self, path: Path) -> tuple[int, Position]:
        doc = self.torch.load(path, weights_only=True)
        self.net.load_state_dict(doc["model"])
        self.optimizer.load_state_dict(doc["optimizer"])
        loader = doc["loader"]
        return int(doc["step"]), Position(int(loader["epoch"]), int(loader.get("index", 0)))


def main(argv: list[str]) -> int:
    s = settings(dict(os.environ))
    ids = read_ids(Path(argv[0]) if argv else DATASET)
    model = Model()
    checkpoint = Path(os.environ.get(DriverEnv.CHECKPOINT_DIR, ".")) / CHECKPOINT
    step, start = 0, Position(0, 0)
    if checkpoint.exists():
        step, start = model.load(checkpoint)
        print(f"resumed from {checkpoint.name} at step {step}: epoch {start.epoch}, sample {start.index}", flush=True)
    loader = Loader(ids, s, start)
    losses: list[float] = []
    for epoch, batch in loader:
        step += 1
        losses.append(model.step(batch))
        driver_api.ledger(step, batch, epoch=epoch)
        driver_api.progress(step)
        print(f"step {step}: epoch {epoch}, {len(batch)} ids from {batch[0]}, loss {losses[-1]:.4f}", flush=True)
        if step % s.checkpoint_every == 0:
            model.save(checkpoint, step, loader.state())
            driver_api.checkpoint(step)
            print(f"checkpoint at step {step}", flush=True)
        time.sleep(s.step_sleep)
    if not losses or not all(math.isfinite(x) for x in losses):
        print(f"no finite loss to report ({len(losses)} steps in this attempt)", file=sys.stderr)
        return 1
    driver_api.write_result(
        optimizer_steps=step,
        losses=losses,
        final_loss=losses[-1],
        policy_version=step,
        policy_refreshes=0,  # supervised: no rollout engine to refresh ([driver.evidence] refresh = "none")
        judge_replies=0,
    )
    print(f"done: step {step}, final loss {losses[-1]:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
