"""A hang's collective traces (issue 49 item 2), with real torch.distributed processes over gloo:
the hook agent.driver_api arms answers for a process stuck in a collective, the agent's collection
keeps them as collectives-RANK.json (schema-valid), and the audit's own analysis names the
collective and the rank that never joined it. The hook never imports torch itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.proc import collective_hook
from agent.stacks import collectives
from agent.stacks._targets import describe
from audit._collectives import summarise
from schemas import DriverEnv
from tests.harness.documents import checked

RANK_PROGRAM = Path(__file__).parent / "data" / "gloo_rank.py"
REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR", "GYM_"))}
    env.update(
        {
            DriverEnv.STACK_DUMP_DIR: str(folder),
            DriverEnv.COLLECTIVE_TRACE: "1",
            collective_hook.BUFFER_ENV: collective_hook.BUFFER_SIZE,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO),
        }
    )
    return env


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield tmp_path, procs
    for p in procs:
        p.kill()
        p.wait()


def _start(folder: Path, procs: list[subprocess.Popen[bytes]], fault: str) -> None:
    port = _free_port()
    for rank in range(3):
        procs.append(
            subprocess.Popen(
                [sys.executable, str(RANK_PROGRAM), str(rank), str(port), fault],
                env=_env(folder),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        )
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == b"entered"
    time.sleep(1.0)  # every rank is in (or past) its last step


def _record(fields: dict, rank: int) -> dict:
    return checked("collectives", fields, rank)


def _collected(folder: Path, procs: list[subprocess.Popen[bytes]]) -> dict[int, dict]:
    """Each process as one node's record (as three agents would keep them)."""
    docs = {}
    for node, p in enumerate(procs):
        fields = collectives.collect([describe(p.pid, "driver")], dump_dir=str(folder), timeout=20, reason="hang")
        assert fields is not None and fields["seconds"] < 20
        docs[node] = _record(fields, node)
    return docs


@pytest.mark.parametrize(
    ("fault", "want"),
    [
        ("skip", "rank 1 never entered all_reduce #6 of default_pg (sizes [4]); ranks 0, 2 wait in it"),
        ("barrier", "rank 1 sits in barrier #6"),
    ],
)
def test_the_rank_that_never_joined_the_collective_is_named(
    group: tuple[Path, list[subprocess.Popen[bytes]]], fault: str, want: str
) -> None:
    folder, procs = group
    _start(folder, procs, fault)
    docs = _collected(folder, procs)
    [proc] = docs[1]["processes"]
    assert proc["rank"] == 1 and proc["world_size"] == 3 and proc["backend"] == "gloo"
    assert max(e["seq"] for e in proc["entries"] if e["completed"]) == 5
    summary = summarise(docs, [f"collectives-{r}.json" for r in docs])
    assert summary is not None
    [stuck] = summary.stuck
    assert want in stuck.headline(), summary.lines()
    assert (stuck.group, stuck.seq, stuck.op) == ("default_pg", 6, "all_reduce")
    assert [r.last_completed for r in stuck.ranks] == [5, 5, 5]
    assert stuck.to_json()["entered"] == [0, 2]
    if fault == "skip":  # a rank's process gone (its node kept nothing): the others' records name it
        del docs[1]
        [gone] = summarise(docs, ["collectives-0.json", "collectives-2.json"]).stuck  # type: ignore[union-attr]
        assert gone.missing == (1,) and "rank 1 left no trace of all_reduce #6" in gone.headline()


def test_the_hook_never_imports_torch(tmp_path: Path) -> None:
    """A process that imports agent.driver_api but not torch answers that it has none; torch stays
    unimported. Its folder's path is longer than a Unix socket's address may be: the hook still binds."""
    tmp_path = tmp_path / ("deep" * 25)
    tmp_path.mkdir()
    code = "import sys, time\nfrom agent import driver_api\nprint('torch' in sys.modules, flush=True)\ntime.sleep(60)\n"
    p = subprocess.Popen([sys.executable, "-c", code], env=_env(tmp_path), stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == b"False"
        answer = collective_hook.ask(str(tmp_path), p.pid, 10)
        assert answer == {"torch": False, "problem": "torch.distributed not imported by this process"}
        fields = collectives.collect([describe(p.pid, "driver")], dump_dir=str(tmp_path), timeout=10, reason="hang")
        assert fields is None  # no process uses torch.distributed: no record
        assert collective_hook.ask(str(tmp_path), 999_999_999, 1) is None  # not armed
    finally:
        p.kill()
        p.wait()


def test_collective_trace_setting_and_environment() -> None:
    assert collective_hook.enabled(True) and not collective_hook.enabled(False)
    assert collective_hook.enabled(None)  # torch is importable here (see importorskip above)
    assert collective_hook.env(None, "/x", {}) == {DriverEnv.COLLECTIVE_TRACE: "1", "TORCH_FR_BUFFER_SIZE": "2000"}
    assert collective_hook.env(True, "/x", {"TORCH_FR_BUFFER_SIZE": "50"}) == {DriverEnv.COLLECTIVE_TRACE: "1"}
    assert collective_hook.env(False, "/x", {}) == {} and collective_hook.env(True, None, {}) == {}


def test_the_recorders_lagging_status_does_not_hide_the_stuck_collective() -> None:
    """gloo's pg_status may say #4 completed while entry #5 is retired: the later one counts."""

    def proc(rank: int, last: int, ops: list[tuple[int, bool]]) -> dict:
        entries = [
            {
                "pg_id": "0",
                "group": "default_pg",
                "seq": q,
                "op": "all_reduce",
                "input_sizes": [[4]],
                "output_sizes": [[4]],
                "completed": done,
                "state": "scheduled",
            }
            for q, done in ops
        ]
        group = {"pg_id": "0", "group": "default_pg", "ranks": [0, 1], "last_completed": last, "last_enqueued": 6}
        return {
            "processes": [
                {
                    "pid": 10 + rank,
                    "rank": rank,
                    "world_size": 2,
                    "backend": "gloo",
                    "groups": [group],
                    "entries": entries,
                }
            ]
        }

    docs = {0: proc(0, 5, [(5, True), (6, False)]), 1: proc(1, 4, [(5, True)])}
    [stuck] = summarise(docs, ["collectives-0.json", "collectives-1.json"]).stuck  # type: ignore[union-attr]
    assert stuck.seq == 6 and "rank 1 never entered all_reduce #6" in stuck.headline()
    assert [r.last_completed for r in stuck.ranks] == [5, 5]


def test_the_rendezvous_is_the_spare_port_of_the_ray_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """GYM_TRAINER_RENDEZVOUS: a port of the node's held Ray block that Ray never binds, checked free with it."""
    from agent import driver_api
    from agent.ray import node

    ports = node._ports_at(20000)
    taken = set(vars(ports).values()) | {ports.dashboard, ports.client_server}
    assert ports.spare == 20049 and ports.spare not in taken
    assert node.BLOCK_USED == node.PORT_BLOCK  # _block_free checks the spare port too
    monkeypatch.setenv(DriverEnv.TRAINER_RENDEZVOUS, "127.0.0.2:20049")
    assert driver_api.rendezvous() == ("127.0.0.2", 20049)
    monkeypatch.delenv(DriverEnv.TRAINER_RENDEZVOUS)
    assert driver_api.rendezvous() is None
