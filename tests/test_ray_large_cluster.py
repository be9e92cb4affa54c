"""Ray at scale: the settings a large cluster's head and workers get, the job's own values kept, the
workers' jittered join, and every setting's name checked against the installed Ray's binaries."""

from __future__ import annotations

import random

from agent.ray import _large_cluster as large_cluster
from bench.preflight import check_ray_settings, ray_config_names


def test_only_a_cluster_larger_than_the_bound_is_large() -> None:
    assert not large_cluster.is_large(64, 64) and large_cluster.is_large(65, 64)


def test_head_gets_the_gcs_settings_workers_the_rest_and_the_job_wins() -> None:
    head, worker = large_cluster.settings(True), large_cluster.settings(False)
    assert "RAY_gcs_server_rpc_server_thread_num" in head and "RAY_gcs_server_rpc_server_thread_num" not in worker
    assert head["RAY_gcs_rpc_server_connect_timeout_s"] == worker["RAY_gcs_rpc_server_connect_timeout_s"] == "120"
    assert set(worker) < set(head)
    env: dict[str, str] = {}
    used = large_cluster.apply(env, worker, {"RAY_worker_register_timeout_seconds": "300"})
    assert used["RAY_worker_register_timeout_seconds"] == "300" and "RAY_worker_register_timeout_seconds" not in env
    assert env["RAY_task_events_report_interval_ms"] == "5000"


def test_workers_spread_their_first_start_and_back_off_after() -> None:
    rng = random.Random(7)
    firsts = [large_cluster.join_delay(1, 2000, rng) for _ in range(200)]
    assert min(firsts) >= 0 and max(firsts) <= large_cluster.JOIN_SPREAD_MAX_S and max(firsts) > 5
    assert max(large_cluster.join_delay(1, 100, rng) for _ in range(50)) <= 1.0  # a small spread for fewer nodes
    second = [large_cluster.join_delay(2, 100, rng) for _ in range(50)]
    fourth = [large_cluster.join_delay(4, 100, rng) for _ in range(50)]
    assert min(second) >= 5 and min(fourth) >= 15 and max(fourth) <= 25


def test_every_setting_is_a_name_the_installed_ray_reads() -> None:
    known, files = ray_config_names()
    assert len(files) >= 2 and "health_check_period_ms" in known and "no_such_setting_xyz" not in known
    result = check_ray_settings()
    assert result["unknown"] == [], result["unknown"]
