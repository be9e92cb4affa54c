"""The sample ledger's proof on real processes (issue 52): the demo trainer (examples/ledger_driver.py)
as a spec's [driver] table, the moment to kill its node between two checkpoints, and what the killed
attempt's ledger says the audit must then find of each loader.

The expectations are read from the records, never assumed: where the kill landed (the last checkpoint
the killed attempt recorded, the steps it recorded after it) decides which ids a resumed loader
repeats, skips or replays.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from schemas import names
from schemas.ledger_order import epoch_order
from tests.harness.agents import BIN, assert_artifacts_valid, launch_local
from tests.harness.orphans import assert_nothing_left, kill_node, kill_tree_by_session
from tests.harness.specs import small_spec, uid

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "examples" / "ledger_driver.py"
IDS = REPO / "examples" / "data" / "ledger-ids.txt"
LOADERS = ("correct", "restarts-epoch", "skips-ahead")
BATCH = 4  # ids a step
EVERY = 8  # steps between checkpoints: 1.6 s, more than the ledger's flush period (1 s)
STEP_SLEEP = 0.2
PREFETCH = 3  # batches the skips-ahead loader's saved position runs ahead (examples/ledger_driver.py)
MARGIN = 5  # kill at most this many steps past a checkpoint: far from the next one's save
DRIVER_RANK = 0
CHECKPOINT = "ledger-demo.pt"  # the trainer's checkpoint file (examples/ledger_driver.py)


def driver_table(loader: str, seed: int | None = None) -> str:
    """The [driver] table's keys: the demo trainer on its dataset, with `loader`'s resume, each
    epoch in the file's order or shuffled by `seed` (the spec's shuffle_seed and the driver's alike)."""
    env = {
        "LEDGER_LOADER": loader,
        "LEDGER_BATCH": str(BATCH),
        "LEDGER_CHECKPOINT_EVERY": str(EVERY),
        "LEDGER_STEP_SLEEP": str(STEP_SLEEP),
    }
    shuffle = ""
    if seed is not None:
        env["LEDGER_SHUFFLE_SEED"] = str(seed)
        shuffle = f", shuffle_seed = {seed}"
    settings = ", ".join(f'{k} = "{v}"' for k, v in env.items())
    return (
        f'command = ["python", "{DRIVER}", "{IDS}"]\nenv = {{ {settings} }}\n'
        f'ledger = {{ order = "{IDS}"{shuffle} }}\nevidence = {{ refresh = "none" }}'
    )


def ledger_spec(loader: str, replicas: int, seed: int | None = None, **kw: object) -> str:
    """Every node a trainer node (no rollout to refresh), coordination only (no Ray)."""
    driver = driver_table(loader, seed)
    return small_spec(replicas=replicas, trainer_nodes=replicas, driver=driver, ray=False, **kw)  # type: ignore[arg-type]


def epoch_ids(epoch: int, seed: int | None) -> list[str]:
    """The ids of `epoch` in the order the spec declares (the file's, or its shuffle)."""
    ids = [ln.strip() for ln in IDS.read_text().splitlines() if ln.strip()]
    return ids if seed is None else [ids[i] for i in epoch_order(len(ids), seed, epoch)]


def ledger_lines(path: Path) -> list[dict]:
    """Every whole line of a ledger file (a line cut by a kill is not one)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return [orjson.loads(ln) for ln in raw.split(b"\n")[:-1] if ln]


def mid_interval(lines: list[dict]) -> bool:
    """The ledger ends with a step a few steps past its last checkpoint: the driver is between two."""
    done = [ln["step"] for ln in lines if ln["kind"] == "checkpoint"]
    last = lines[-1] if lines else None
    return bool(done) and last is not None and last["kind"] == "step" and 0 < last["step"] - done[-1] <= MARGIN


def wait_mid_interval(run_dir: Path, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Until the driver's ledger shows it between two checkpoints, past at least one (TimeoutError
    at once when `alive` says the run already ended)."""
    path = run_dir / names.ledger(DRIVER_RANK)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if mid_interval(ledger_lines(path)):
            return
        if not alive():
            raise TimeoutError(f"the run ended before {path.name} showed the driver between two checkpoints")
        time.sleep(0.02)
    raise TimeoutError(f"{path.name} never showed the driver between two checkpoints within {timeout:g}s")


@dataclass(frozen=True)
class Killed:
    """What the killed attempt's ledger recorded."""

    checkpoint: int  # its last checkpoint: where the next attempt resumes
    last_step: int
    replayed: tuple[str, ...]  # the ids of its steps after that checkpoint: work the next attempt redoes


def killed(run_dir: Path, attempt: int = 1) -> Killed:
    lines = ledger_lines(run_dir / names.attempt_dir(attempt) / names.ledger(DRIVER_RANK))
    checkpoint = max(ln["step"] for ln in lines if ln["kind"] == "checkpoint")
    after = [ln for ln in lines if ln["kind"] == "step" and ln["step"] > checkpoint]
    return Killed(checkpoint, max(ln["step"] for ln in lines), tuple(i for ln in after for i in ln["ids"]))


@dataclass(frozen=True)
class Expected:
    """What the audit must find after the resume, by the loader's resume."""

    repeated: tuple[str, ...]
    skipped: tuple[str, ...]
    gap_step: int | None  # the first step of the resumed attempt, where a skip opens


def expected(loader: str, k: Killed, seed: int | None = None) -> Expected:
    """Epoch 0 is where the demo's kill lands (24 steps of 4 ids; checkpoints at 8 and 16)."""
    ids = epoch_ids(0, seed)
    done = k.checkpoint * BATCH
    assert done + PREFETCH * BATCH < len(ids), f"the kill left epoch 0 (checkpoint {k.checkpoint})"
    if loader == "restarts-epoch":
        return Expected(tuple(ids[:done]), (), None)
    if loader == "skips-ahead":
        return Expected((), tuple(ids[done : done + PREFETCH * BATCH]), k.checkpoint + 1)
    return Expected((), (), None)


def audit_json(run_dir: Path) -> tuple[int, dict]:
    """`gym-audit --json`: its exit code and its document."""
    done = subprocess.run([str(BIN / "gym-audit"), str(run_dir), "--json"], capture_output=True, text=True)
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        return done.returncode, {"error": f"no JSON (exit {done.returncode}): {done.stderr[-500:]}"}


def audit_problems(doc: dict, loader: str, k: Killed, seed: int | None = None) -> list[str]:
    """What the audit's `ledger` section gets wrong of a resumed run, against what the killed
    attempt's ledger predicts for `loader` (empty: all as expected)."""
    led = doc.get("ledger")
    if not isinstance(led, dict) or not led.get("checked"):
        return [f"the audit has no checked ledger: {str(led)[:300]}"]
    want = expected(loader, k, seed)
    problems = []
    resumed = [a.get("resumed_from") for a in led["attempts"]]
    if resumed != [None, k.checkpoint]:
        problems.append(f"attempts resumed from {resumed}, expected [None, {k.checkpoint}]")
    if led["replayed"] != len(k.replayed):
        problems.append(
            f"replayed {led['replayed']} ids, attempt 1's ledger has {len(k.replayed)} after its checkpoint"
        )
    repeated = [r["id"] for r in led["repeated"]["ids"]]
    if led["repeated"]["count"] != len(want.repeated) or repeated != list(want.repeated[: len(repeated)]):
        problems.append(f"repeated {led['repeated']['count']} {repeated[:5]}, expected {len(want.repeated)}")
    gaps = led["skipped"]["gaps"]
    if led["skipped"]["count"] != len(want.skipped):
        problems.append(f"skipped {led['skipped']['count']}, expected {len(want.skipped)}: {gaps[:1]}")
    elif want.skipped:
        first = gaps[0]
        where = (first["attempt"], first["step"], tuple(first["ids"]))
        if where != (2, want.gap_step, want.skipped[: len(first["ids"])]):
            problems.append(f"the first gap is {where}, expected attempt 2, step {want.gap_step}")
    codes = {f["code"] for f in doc["findings"] if f["severity"] == "error"}
    named = {"data.repeated"} if want.repeated else set()
    named |= {"data.skipped"} if want.skipped else set()
    if codes & {"data.repeated", "data.skipped"} != named:
        problems.append(f"the audit's data errors are {sorted(codes)}, expected {sorted(named)}")
    return problems


def run_problems(run_dir: Path, loader: str, seed: int | None = None) -> list[str]:
    """audit_problems of a finished run directory (a fault row's check)."""
    _code, doc = audit_json(run_dir)
    try:
        return audit_problems(doc, loader, killed(run_dir), seed)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"ledger check: {type(exc).__name__}: {exc}"]


@dataclass(frozen=True)
class Resumed:
    run_dir: Path
    killed: Killed
    launched: str  # the resumed `gym-launch local`'s output
    code: int  # and its exit code


def kill_then_resume(tmp: Path, loader: str, replicas: int = 2, seed: int | None = None) -> Resumed:
    """`gym-launch local` of the demo trainer with `loader`; the driver's node SIGKILLed whole
    (agent, reaper, driver) between two checkpoints; once every process of it is gone,
    `gym-launch local --resume` (a scheduler's restart) to the end."""
    text = ledger_spec(loader, replicas, seed)
    run = launch_local(tmp, text, uid("ledger"))
    try:
        wait_mid_interval(run.run_dir, 150, alive=lambda: run.proc.poll() is None)
        lost = kill_node(run.run_dir, DRIVER_RANK)
        assert lost >= 3, f"rank {DRIVER_RANK} had {lost} process(es), expected its agent, reaper and driver"
        assert run.wait(90) != 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert_nothing_left(run.run_dir)
    again = launch_local(tmp, text, run.uuid, args=("--resume",))
    try:
        code = again.wait(180)
    finally:
        kill_tree_by_session(again.proc)
    assert_nothing_left(run.run_dir)
    assert_artifacts_valid(run.run_dir)  # both attempts' ledger lines against their schema
    k = killed(run.run_dir)
    log = (run.run_dir / names.driver_log(DRIVER_RANK)).read_text()
    assert f"resumed from {CHECKPOINT} at step {k.checkpoint}:" in log, log[:2000]
    return Resumed(run.run_dir, k, again.text, code)
