"""The judge gateway under real agents (no Ray: the gateway is the subject).

An external judge (a real reference server this test starts) gets its gateway on the driver's node; a
driver that grades with plain HTTP through GYM_JUDGE_URL_<NAME> leaves no grades file, and the audit
still counts its replies, from the gateway. A gateway killed with a real signal fails the run as its
judge's failure.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _judge_server import RunningServer, server_factory

from schemas import names
from tests.harness import (
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    kill_tree_by_session,
    launch_local,
    read,
    small_spec,
    uid,
    wait_phase,
)

pytestmark = pytest.mark.slow
Factory = Callable[..., RunningServer]


@pytest.fixture
def judge_server(tmp_path: Path) -> Iterator[Factory]:
    yield from server_factory(tmp_path)


def external_spec(server: RunningServer, driver: str) -> str:
    return (
        small_spec(replicas=2, ray=False, driver=driver)
        + f"""
[judges.ext]
mode = "external"
model = "{server.model}"
endpoint = "{server.base_url}/v1"
max_concurrent_calls = 2
timeout = 30
[rubrics.q]
profile = "general-quality"
max_output_tokens = 256
[judging.bindings."general-quality"]
judge = "ext"
rubric = "q"
"""
    )


def test_a_plain_http_driver_through_an_external_judge_passes_the_audit(judge_server: Factory, tmp_path: Path) -> None:
    server = judge_server()
    spec = external_spec(server, 'command = ["python", "tests/data/plain_http_driver.py"]')
    run = launch_local(tmp_path, spec, uid("plain"), env={"CALLS": "3", "MODEL": server.model})
    try:
        assert run.wait(180) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    assert_artifacts_valid(d)
    gateway = read(d, names.gateway_record("ext"))
    assert gateway["rank"] == 0 and gateway["upstream"] == server.base_url + "/v1"  # on the driver's node
    assert read(d, names.REGISTRY)["judges"]["ext"]["endpoint"] == gateway["endpoint"]
    assert not list(d.glob("grades-*.jsonl"))  # plain HTTP: our client library recorded nothing
    lines = [json.loads(x) for x in (d / names.gateway_log("ext")).read_text().splitlines()]
    assert sum(1 for x in lines if x["generation"] and not x["canary"] and x["outcome"] == "replied") == 3
    assert_nothing_left(d)
    result = audit(d, verdict="pass")
    assert result.judge_replies is not None and result.judge_replies["independent"] == 3


def test_a_killed_gateway_is_its_judges_failure(judge_server: Factory, tmp_path: Path) -> None:
    server = judge_server()
    driver = 'command = ["python", "-c", "import time; time.sleep(120)"]\ntrains = false'
    run = launch_local(tmp_path, external_spec(server, driver), uid("gwkill"))
    try:
        wait_phase(run.run_dir, 0, "driver", 120)
        os.kill(read(run.run_dir, names.gateway_record("ext"))["pid"], signal.SIGKILL)
        assert run.wait(120) != 0
    finally:
        kill_tree_by_session(run.proc)
    record = failures(run.run_dir)[0]
    assert record["kind"] == "judge" and record["judge"] == "ext", record
    assert record["log"] == names.gateway_process_log("ext", 0)
    audit(run.run_dir, verdict="fail", rank=0, kind="judge")
