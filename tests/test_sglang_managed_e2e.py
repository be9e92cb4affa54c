"""The managed-SGLang path of real agents, around a stand-in for SGLang's server.

SGLang needs a GPU, so `python -m sglang.launch_server` is the stand-in in tests/stand_in_sglang
(a mock, put on the agent's PYTHONPATH): it refuses flags SGLang 0.5.23 lacks, records what the
agent ran, binds the ports SGLang binds (--nccl-port on every interface, then --port), can lose a
port race the way SGLang does or wait at a gate while the test takes one of its ports, and
otherwise serves the reference judge. Everything around it is real: agents, Ray, the
supervisor, health probes, canaries, the port locks of agents sharing this host.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

from agent.proc import ports, tempdirs
from schemas import names
from tests.harness import (
    JUDGE_TABLES,
    LocalRun,
    agent_tmp_root,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    read,
    small_spec,
    uid,
)

pytestmark = pytest.mark.slow

STAND_IN = Path(__file__).parent / "stand_in_sglang"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SGLANG_JUDGE = """
[judges.general]
mode = "managed"
backend = "sglang"
model = "reference-judge"
revision = "0123456789abcdef0123456789abcdef01234567"
prepared_dir = "PREPARED_DIR"
gpus = 1
tensor_parallel_size = 1
max_context_length = 8192
max_concurrent_calls = 4
timeout = 30
"""
# A driver that grades through the registry's bindings, without Ray: the judge's start is tested.
GRADING_DRIVER = f'command = ["{sys.executable}", "{Path(__file__).parent / "data" / "grading_driver.py"}"]'


def snapshot_dir(tmp_path: Path, revision: str) -> Path:
    """A prepared directory laid out as a Hugging Face cache snapshot of ``revision``."""
    snap = tmp_path / "hub" / "models--reference-judge" / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    return snap


def sglang_spec(prepared_dir: Path) -> str:
    reference_judge = JUDGE_TABLES[: JUDGE_TABLES.index("[rubrics.")]
    spec = judge_spec(driver=GRADING_DRIVER, ray=False)
    assert reference_judge in spec
    return spec.replace(reference_judge, SGLANG_JUDGE.replace("PREPARED_DIR", str(prepared_dir)))


def run_with_stand_in(
    tmp_path: Path, tag: str, lose_races: int, prepared_dir: Path | None = None, env: dict[str, str] | None = None
) -> tuple[LocalRun, Path]:
    record = tmp_path / "sglang-starts.jsonl"
    env = {
        "PYTHONPATH": str(STAND_IN),
        "GYM_STAND_IN_SGLANG_RECORD": str(record),
        "GYM_STAND_IN_SGLANG_LOSE_RACES": str(lose_races),
        "GRADES": "2",
        **(env or {}),
    }
    prepared = prepared_dir or snapshot_dir(tmp_path, REVISION)
    run = launch_local(tmp_path, sglang_spec(prepared), uid(f"sglang-{tag}"), env=env)
    return run, record


def starts(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def given(start: dict, flag: str) -> int:
    argv = start["argv"]
    return int(argv[argv.index(flag) + 1])


def judge_ports(start: dict) -> set[int]:
    """The ports a start was given: SGLang's HTTP port and its store's port, in one held block."""
    http, store = given(start, "--port"), given(start, "--nccl-port")
    assert ports.block_of(http) == http == ports.block_of(store) and store == http + 1, start["argv"]
    low, high = ports.ephemeral_range()
    assert not low <= http <= high and not low <= store <= high  # no outgoing connection is handed one
    return {http, store}


def test_a_lost_port_race_is_retried_on_a_new_port_and_the_run_succeeds(tmp_path: Path) -> None:
    run, record = run_with_stand_in(tmp_path, "race", lose_races=1)
    try:
        code = run.wait(180)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 0, failures(run.run_dir)
    first, second = starts(record)
    endpoint = read(run.run_dir, names.judge_endpoint("general", 2))
    judge_mask = read(run.run_dir, names.placement(2))["judges"]["general"]["cuda_visible_devices"]
    for start in (first, second):
        argv = start["argv"]
        assert start["cuda_visible_devices"] == judge_mask  # only the judge's own device
        assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
        assert argv[argv.index("--served-model-name") + 1] == "reference-judge"
    # The endpoint is the second start's: its pid and the port it was given, in another block.
    assert not judge_ports(first) & judge_ports(second)
    assert endpoint["pid"] == second["pid"] != first["pid"]
    assert str(endpoint["port"]) == second["argv"][second["argv"].index("--port") + 1]
    assert endpoint["argv"][-len(second["argv"]) :] == second["argv"]
    assert "address already in use" in (run.run_dir / names.judge_log("general", 2)).read_text()
    assert read(run.run_dir, names.CANARIES)["passed"] is True
    assert read(run.run_dir, names.DRIVER_RESULT)["judge_replies"] > 0  # the driver graded through it
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="pass")


def test_a_judge_that_keeps_losing_port_races_fails_the_run_with_a_ports_failure_naming_them(
    tmp_path: Path,
) -> None:
    run, record = run_with_stand_in(tmp_path, "races", lose_races=99)
    try:
        assert run.wait(180) != 0
    finally:
        kill_tree_by_session(run.proc)
    made = starts(record)
    assert len(made) == 3
    blocks = [judge_ports(start) for start in made]
    assert not (blocks[0] & blocks[1] or blocks[1] & blocks[2] or blocks[0] & blocks[2])  # a new block each time
    fails = failures(run.run_dir)
    cause = fails[2]["cause"]
    last = f"--port {given(made[2], '--port')} and --nccl-port {given(made[2], '--nccl-port')}"
    assert fails[2]["kind"] == "ports" and "3 starts" in cause and last in cause, fails[2]
    assert "address already in use" in cause  # the judge's own words
    assert fails[2]["log"] == names.judge_log("general", 2) and fails[2]["judge"] == "general"
    assert not (run.run_dir / names.COMPLETE).exists()
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=2, kind="ports")


def wait_for_start(record: Path, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if record.exists() and (made := starts(record)):
            return made[0]
        time.sleep(0.05)
    raise AssertionError(f"the judge was not started within {timeout}s")


@pytest.mark.parametrize("flag", ["--nccl-port", "--port"])
def test_a_port_taken_by_another_process_between_choice_and_bind_is_retried_on_new_ports(
    tmp_path: Path, flag: str
) -> None:
    """The stand-in waits at a gate before binding; meanwhile this test (a process outside
    gym-agent, which no lock file stops) listens on one of the ports the agent gave it."""
    gate = tmp_path / "gate"
    run, record = run_with_stand_in(
        tmp_path, f"taken{flag.strip('-')}", lose_races=0, env={"GYM_STAND_IN_SGLANG_GATE": str(gate)}
    )
    try:
        first = wait_for_start(record, 120)
        with socket.socket() as outsider:
            outsider.bind(("", given(first, flag)))
            outsider.listen()
            gate.touch()
            code = run.wait(180)
    finally:
        kill_tree_by_session(run.proc)
    assert code == 0, failures(run.run_dir)
    first, second = starts(record)
    assert not judge_ports(first) & judge_ports(second)
    endpoint = read(run.run_dir, names.judge_endpoint("general", 2))
    assert endpoint["port"] == given(second, "--port") and endpoint["pid"] == second["pid"]
    log = (run.run_dir / names.judge_log("general", 2)).read_text()
    assert f"{given(first, flag)}" in log and "address already in use" in log.lower()
    assert read(run.run_dir, names.CANARIES)["passed"] is True
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="pass")


ONE_NODE_JUDGES = 8


def one_node_spec(prepared_dir: Path) -> str:
    """One node without Ray: a trainer GPU and a managed SGLang judge's GPU; the driver sleeps."""
    spec = small_spec(replicas=1, ray=False, judges=True, startup_timeout=300)
    spec = spec.replace("gpus_per_node = 2", "gpus_per_node = 1").replace("gpus = -1", "gpus = 0")
    reference_judge = JUDGE_TABLES[: JUDGE_TABLES.index("[rubrics.")]
    assert reference_judge in spec
    return spec.replace(reference_judge, SGLANG_JUDGE.replace("PREPARED_DIR", str(prepared_dir)))


def test_eight_judges_of_agents_on_one_host_started_at_once_get_distinct_ports_and_all_serve(tmp_path: Path) -> None:
    """Eight one-node runs with one run id (in eight output roots) and one agent temp root, so
    every agent's judge starts its walk on the same block at the same time: only the held lock
    files and the free-port checks keep them apart. No start may lose a race."""
    prepared = snapshot_dir(tmp_path, REVISION)
    spec = one_node_spec(prepared)
    shared_root = str(agent_tmp_root(tmp_path))  # one host: one lock directory for every agent
    run_id = uid("sglang-eight")
    runs: list[tuple[LocalRun, Path]] = []
    try:
        for i in range(ONE_NODE_JUDGES):
            here = tmp_path / f"run{i}"
            here.mkdir()
            record = here / "sglang-starts.jsonl"
            env = {
                "PYTHONPATH": str(STAND_IN),
                "GYM_STAND_IN_SGLANG_RECORD": str(record),
                tempdirs.ROOT_ENV: shared_root,
            }
            runs.append((launch_local(here, spec, run_id, env=env), record))
        codes = [run.wait(420) for run, _ in runs]
    finally:
        for run, _ in runs:
            kill_tree_by_session(run.proc)
    assert codes == [0] * ONE_NODE_JUDGES, [failures(run.run_dir) for run, _ in runs]
    given_ports: list[set[int]] = []
    for run, record in runs:
        (start,) = starts(record)  # one start each: no lost race, no retry
        given_ports.append(judge_ports(start))
        endpoint = read(run.run_dir, names.judge_endpoint("general", 0))
        assert endpoint["port"] == given(start, "--port") and endpoint["pid"] == start["pid"]
        assert "already in use" not in (run.run_dir / names.judge_log("general", 0)).read_text().lower()
        assert read(run.run_dir, names.CANARIES)["passed"] is True  # it served: known-good beat known-bad
        assert_artifacts_valid(run.run_dir)
        assert_nothing_left(run.run_dir)
    every = set().union(*given_ports)
    assert len(every) == 2 * ONE_NODE_JUDGES, given_ports


def test_a_prepared_dir_that_does_not_prove_the_pinned_revision_fails_the_run(tmp_path: Path) -> None:
    other = "fedcba9876543210fedcba9876543210fedcba98"
    run, record = run_with_stand_in(tmp_path, "rev", lose_races=0, prepared_dir=snapshot_dir(tmp_path, other))
    try:
        assert run.wait(180) != 0
    finally:
        kill_tree_by_session(run.proc)
    assert not record.exists() or starts(record) == []  # SGLang was never started
    fails = failures(run.run_dir)
    cause = fails[2]["cause"]
    assert fails[2]["kind"] == "judge" and REVISION in cause and other in cause, fails[2]
    assert "snapshots" in cause
    assert_nothing_left(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=2, kind="judge")
