"""Spec rules the agent enforces at run time, on real agents: the hostname allowlist and
``runtime:VAR`` values of the driver's environment."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from schemas import names
from tests.harness import assert_nothing_left, failures, kill_tree_by_session, launch_local, small_spec, uid

pytestmark = pytest.mark.slow


def test_a_host_outside_launch_hostnames_fails_the_run_naming_it(tmp_path: Path) -> None:
    spec = small_spec(replicas=2, ray=False).replace(
        "[launch]\n", '[launch]\nhostnames = ["not-this-host-a", "not-b"]\n', 1
    )
    run = launch_local(tmp_path, spec, uid("hosts"))
    try:
        assert run.wait(120) != 0
    finally:
        kill_tree_by_session(run.proc)
    fails = failures(run.run_dir)
    host = socket.gethostname()
    roots = [f for f in fails.values() if f["kind"] == "placement"]
    assert roots and all(host in f["cause"] and "launch.hostnames" in f["cause"] for f in roots), fails
    assert not (run.run_dir / names.driver_log(0)).exists()  # nothing ran on a host outside the list
    assert_nothing_left(run.run_dir)


def test_the_allowlist_admits_this_host(tmp_path: Path) -> None:
    host = socket.gethostname()
    spec = small_spec(replicas=2, ray=False).replace("[launch]\n", f'[launch]\nhostnames = ["{host}"]\n', 1)
    run = launch_local(tmp_path, spec, uid("hosts-ok"))
    try:
        assert run.wait(120) == 0, run.text[-2000:]
    finally:
        kill_tree_by_session(run.proc)
    assert failures(run.run_dir) == {}
    assert (run.run_dir / names.COMPLETE).exists()


def test_runtime_values_come_from_the_jobs_environment(tmp_path: Path) -> None:
    driver = (
        'command = ["python", "-c", "import os; print(\'JUDGE_HOST=\' + os.environ[\'JUDGE_HOST\'])"]\n'
        'env = {JUDGE_HOST = "runtime:GYM_TEST_POOL_NODES", PLAIN = "runtime-not-a-prefix"}\n'
        "trains = false"
    )
    run = launch_local(
        tmp_path,
        small_spec(replicas=2, driver=driver, ray=False),
        uid("runtime"),
        env={"GYM_TEST_POOL_NODES": "n1,n2"},
    )
    try:
        assert run.wait(120) == 0, run.text[-2000:]
    finally:
        kill_tree_by_session(run.proc)
    assert "JUDGE_HOST=n1,n2" in (run.run_dir / names.driver_log(0)).read_text()
    spec_text = (run.run_dir / names.SPEC).read_text()
    assert "runtime:GYM_TEST_POOL_NODES" in spec_text and "n1,n2" not in spec_text  # resolved only at run time


def test_a_missing_runtime_variable_fails_the_run_naming_it(tmp_path: Path) -> None:
    driver = 'command = ["true"]\nenv = {JUDGE_HOST = "runtime:GYM_TEST_NOT_SET_ANYWHERE"}'
    run = launch_local(tmp_path, small_spec(replicas=2, driver=driver, ray=False), uid("runtime-x"))
    try:
        assert run.wait(120) != 0
    finally:
        kill_tree_by_session(run.proc)
    fails = failures(run.run_dir)
    assert any("GYM_TEST_NOT_SET_ANYWHERE" in f["cause"] for f in fails.values()), fails
    assert_nothing_left(run.run_dir)
