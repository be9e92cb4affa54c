"""The local Slurm cluster's pure parts: the config it runs on and when it is skipped (no Slurm needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from slurm import cluster as slurm
from slurm import install


def test_rendered_config_names_every_node_and_partition(tmp_path: Path) -> None:
    """Pure: the config the cluster runs on (no Slurm needed)."""
    layout = slurm.DEFAULT_LAYOUT
    ports = {n.name: 7001 + i for i, n in enumerate(layout.nodes)}
    conf = slurm.render_slurm_conf(layout, tmp_path, 7000, ports)
    assert "SlurmctldHost=gymctl(127.0.10.254)" in conf and "SlurmctldPort=7000" in conf
    assert f"AuthInfo=socket={tmp_path}/munge/munge.socket" in conf
    assert "NodeName=n2 NodeHostname=n2 NodeAddr=127.0.10.2 Port=7002 CPUs=4 RealMemory=4000 Gres=gpu:8" in conf
    assert "NodeName=c1 NodeHostname=c1 NodeAddr=127.0.10.11 Port=7004 CPUs=4 RealMemory=4000 State" in conf
    assert "PartitionName=gpu Nodes=n1,n2,n3 Default=YES MaxTime=02:00:00 PriorityTier=1 State=UP" in conf
    assert "PartitionName=cpu Nodes=c1 Default=NO MaxTime=01:00:00 PriorityTier=1 State=UP" in conf
    # The preempting tier: the gpu nodes again, a job there requeues what is in its way.
    assert "PartitionName=urgent Nodes=n1,n2,n3 Default=NO MaxTime=01:00:00 PriorityTier=10 State=UP" in conf
    assert "PreemptType=preempt/partition_prio" in conf and "PreemptMode=REQUEUE" in conf
    assert "SchedulerParameters=bf_interval=2" in conf  # heterogeneous jobs start within seconds
    assert slurm.render_gres_conf(layout, tmp_path).splitlines() == [
        f"NodeName=n{i} Name=gpu File={tmp_path}/dev/gpu[0-7]" for i in (1, 2, 3)
    ]
    hosts = slurm.render_hosts(layout, "127.0.0.1 localhost\n127.0.0.1 n1 # stale\n")
    assert hosts.splitlines() == [
        "127.0.0.1 localhost",
        "127.0.10.254 gymctl",
        "127.0.10.1 n1",
        "127.0.10.2 n2",
        "127.0.10.3 n3",
        "127.0.10.11 c1",
    ]


def test_skip_reasons_name_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in (install.unavailable_reason() or "")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(install, "which", lambda name: None)  # nothing installed, no apt-get
    reason = install.unavailable_reason() or ""
    assert "no apt-get" in reason and "slurmctld" in reason and "munged" in reason
    monkeypatch.setattr(install, "which", lambda name: None if name != "apt-get" else "/usr/bin/apt-get")
    assert install.unavailable_reason() is None  # root with apt-get: installs, never skips
