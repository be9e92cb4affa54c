"""Agents split across NFS-model clients, a driver that fails on one, and when each agent stopped.

Shared by tests/test_netfs_e2e.py and bench/netfs.py: `Placement` says which client each rank's
agent runs on, `run_split` starts them (each with its client's mount as output root), waits, and
returns a `Split` with every agent's exit code and exit time beside the records they wrote.
`coordination_sets` turns a doorbell choice into the `--set` overrides the agents get (none, and
"files only", where the spec has no such key yet).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agent.proc import tempdirs
from tests.harness.agents import BIN, agent_tmp_root, failures
from tests.harness.orphans import kill_tree_by_session, started_session


def exit_driver(delay: float) -> str:
    """A [driver] command that exits 1 after `delay` seconds (a crash of the training script)."""
    return f'command = ["python", "-c", "import time; time.sleep({delay:.3f}); raise SystemExit(1)"]'


@dataclass(frozen=True)
class Placement:
    """clients[rank] is the index of the client (mount) rank's agent runs on."""

    clients: tuple[int, ...]

    @property
    def replicas(self) -> int:
        return len(self.clients)

    def ranks_on(self, client: int) -> list[int]:
        return [r for r, c in enumerate(self.clients) if c == client]


def doorbell_key_exists() -> bool:
    from launch.spec.sections import Coordination

    return "doorbell" in {f.name for f in dataclasses.fields(Coordination)}


def coordination_sets(doorbell: bool | None) -> tuple[list[str], str]:
    """The agents' `--set` overrides for a doorbell choice, and how to name the protocol run.
    None, or a spec without `launch.coordination.doorbell`: no override, files only."""
    if doorbell is None or not doorbell_key_exists():
        return [], "files only"
    value = "true" if doorbell else "false"
    return ["--set", f"launch.coordination.doorbell={value}"], "doorbell" if doorbell else "files only"


@dataclass(frozen=True)
class Split:
    run_dir: Path  # through the backing directory, not a client
    uuid: str
    codes: list[int]
    exit_wall: list[float]  # when each rank's agent was seen gone (time.time(), 20 ms polls)
    records: dict[int, dict]  # failure records by rank
    output: str

    def since_root(self, wall: float) -> float:
        return wall - float(self.records[0]["wall_time"])


def start(
    tmp: Path, root: Path, spec_file: Path, uuid: str, rank: int, replicas: int, sets: list[str], run_dir: Path
) -> subprocess.Popen:
    cmd = [str(BIN / "gym-agent"), "--uuid", uuid, "--config", str(spec_file), "--output-root", str(root)]
    cmd += ["--rank", str(rank), "--replicas", str(replicas), "--address", f"127.0.0.{rank + 2}", *sets]
    env = {**os.environ, tempdirs.ROOT_ENV: str(agent_tmp_root(tmp)), "CUDA_VISIBLE_DEVICES": "0,1"}
    # To a file, not a pipe: nobody reads while the run lasts, and a full pipe would block the agent.
    with open(tmp / f"{uuid}-agent-{rank}.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    started_session(run_dir, proc.pid)
    return proc


def run_split(
    tmp: Path,
    src: Path,
    mounts: list[Path],
    placement: Placement,
    spec_text: str,
    uuid: str,
    *,
    sets: list[str] | None = None,
    timeout: float = 240,
) -> Split:
    """Start one agent per rank on its client's mount, wait for all (killing what is left at
    `timeout`), and read what they wrote from the backing directory."""
    spec_file = tmp / f"{uuid}.toml"
    spec_file.write_text(spec_text)
    run_dir = src / "cluster" / uuid
    procs = [
        start(tmp, mounts[c], spec_file, uuid, r, placement.replicas, sets or [], run_dir)
        for r, c in enumerate(placement.clients)
    ]
    exit_wall: list[float | None] = [None] * len(procs)
    end = time.monotonic() + timeout
    try:
        while None in exit_wall and time.monotonic() < end:
            for r, p in enumerate(procs):
                if exit_wall[r] is None and p.poll() is not None:
                    exit_wall[r] = time.time()
            time.sleep(0.02)
    finally:
        for p in procs:
            kill_tree_by_session(p)
    codes = [p.wait(10) for p in procs]
    out = "".join(
        f"--- rank {r}\n" + (tmp / f"{uuid}-agent-{r}.log").read_text(errors="replace") for r in range(len(procs))
    )
    if None in exit_wall:
        raise AssertionError(f"agents still running after {timeout:.0f}s (killed):\n{out[-4000:]}")
    return Split(run_dir, uuid, codes, [w for w in exit_wall if w is not None], failures(run_dir), out)
