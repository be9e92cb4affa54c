"""The preflight's node checks on real things: a small tmpfs as /dev/shm (in a private mount
namespace, so the machine's own /dev/shm is untouched) and as the output root, a network namespace
with an interface of its own, limits set with prlimit, peers' doorbells that answer, are closed or
stay silent. Checks run as `gym-launch preflight` runs them: `python -m agent.preflight SPEC`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.coord.doorbell import Doorbell, PeerBell
from agent.coord.doorbell_probe import Prober, probe_peers
from agent.preflight._network import Interfaces, check_network, nccl_selects
from schemas import validation
from tests.harness import fullfs
from tests.harness.specs import small_spec

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and network namespaces need root")
MIB = 1 << 20


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(small_spec(ray=False))
    return path


def preflight(
    spec: Path, *args: str, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """Run `python -m agent.preflight SPEC --json ARGS` (under `prefix`); its exit code and record."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "agent.preflight", str(spec), "--json", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    record = json.loads(done.stdout)
    # The record is preflight-RANK.json's body: with a header it matches the schema.
    header = {
        "schema": "preflight",
        "schema_version": 1,
        "fingerprint": "0" * 64,
        "rank": 0,
        "incarnation": "x",
        "writer": "agent",
        "written_at": 0.0,
        "attempt": 1,
    }
    assert validation.violations("preflight", {**header, **record}) == []
    return done.returncode, record


def check(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in record["checks"] if c["check"] == name)


# -- shared memory ------------------------------------------------------------------------------

SHM_SETUP = """
import os, time
old = time.time() - 7200
def seg(name, size, mtime, uid=None):
    with open('/dev/shm/' + name, 'wb') as f:
        f.write(b'x' * size)
    os.utime('/dev/shm/' + name, (mtime, mtime))
    if uid is not None:
        os.chown('/dev/shm/' + name, uid, uid)
seg('nccl-AbC123', 1 << 20, old)                     # NCCL's, an earlier job's, ours
seg('torch_4242_77', 512 << 10, time.time() + 3600)  # torch's, newer than this job: kept
seg('psm_deadbeef', 256 << 10, old, uid=65534)       # another user's: kept
seg('unrelated.txt', 4096, old)                      # not a known segment: not listed
"""


def in_private_shm(spec: Path, *sets: str) -> tuple[int, dict[str, Any]]:
    """The preflight with a 4 MiB tmpfs as /dev/shm holding SHM_SETUP's files, in a mount namespace
    of its own; `sets` are [launch.preflight] keys as --set takes them."""
    script = f'mount -t tmpfs -o size=4m tmpfs /dev/shm && {sys.executable} -c "$SETUP"'
    args = ["--address", "127.0.0.2"] + [x for kv in sets for x in ("--set", f"launch.preflight.{kv}")]
    prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c", script + ' && exec "$@"', "sh")
    return preflight(spec, *args, prefix=prefix, env={"SETUP": SHM_SETUP})


@ROOT_ONLY
def test_a_small_dev_shm_warns_and_names_leftover_segments(spec: Path) -> None:
    code, record = in_private_shm(spec)
    shm = check(record, "shm")
    assert code == 0 and shm["status"] == "warned" and shm["mode"] == "warn"  # shm warns by default
    (problem,) = shm["problems"]
    assert problem.startswith("/dev/shm has ") and "below [launch.preflight] min_free_shm = 1.0 GiB" in problem
    assert "3 leftover segment(s) hold 1.8 MiB" in problem
    segs = {s["name"]: s for s in shm["facts"]["segments"]}
    assert set(segs) == {"nccl-AbC123", "torch_4242_77", "psm_deadbeef"}
    assert segs["nccl-AbC123"]["kind"] == "NCCL" and segs["nccl-AbC123"]["bytes"] == MIB
    assert segs["nccl-AbC123"]["owner"] == "root" and segs["psm_deadbeef"]["owner"] in ("nobody", "65534")
    assert segs["nccl-AbC123"]["age_s"] >= 7000 and not any(s["removed"] for s in segs.values())


@ROOT_ONLY
def test_clean_shm_removes_only_our_older_segments_and_fail_mode_fails(spec: Path) -> None:
    code, record = in_private_shm(spec, "clean_shm=true", 'min_free_shm="2MiB"', 'shm="fail"')
    shm = check(record, "shm")
    removed = {s["name"] for s in shm["facts"]["segments"] if s["removed"]}
    assert removed == {"nccl-AbC123"}  # not the newer one, not another user's
    assert shm["facts"]["removed"] == 1
    # 4 MiB less what is kept (768 KiB + the 4 KiB file) is above 2 MiB: passes once cleaned.
    assert code == 0 and shm["status"] == "ok", shm
    code, record = in_private_shm(spec, 'min_free_shm="3900KiB"', 'shm="fail"')
    assert code == 1 and check(record, "shm")["status"] == "failed" and record["passed"] is False


@ROOT_ONLY
def test_a_small_output_disk_fails_naming_path_and_bound(spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    why = fullfs.mount_tmpfs(out, "2m")
    if why:
        pytest.skip(why)
    try:
        code, record = preflight(spec, "--address", "127.0.0.2", "--output-root", str(out))
        disk = check(record, "disk")
        assert code == 1 and disk["status"] == "failed"
        (problem,) = disk["problems"]
        assert problem.startswith(f"the output root {out} has 2.0 MiB free of 2.0 MiB, below [launch.preflight] ")
        assert "min_free_disk = 10.0 GiB" in problem
        code, record = preflight(
            spec, "--address", "127.0.0.2", "--output-root", str(out), "--set", 'launch.preflight.min_free_disk="1MiB"'
        )
        assert check(record, "disk")["status"] == "ok"
    finally:
        fullfs.unmount(out)


def test_open_files_below_the_bound_fail_in_fail_mode(spec: Path) -> None:
    limits = ("--set", 'launch.preflight.limits="fail"')
    code, record = preflight(spec, "--address", "127.0.0.2", *limits, prefix=("prlimit", "--nofile=256:256"))
    lim = check(record, "limits")
    assert code == 1 and lim["status"] == "failed"
    assert lim["facts"]["nofile"] == {"soft": 256, "hard": 256}
    assert lim["problems"][0].startswith("open files: the soft limit is 256 (ulimit -n), below [launch.preflight] ")
    code, record = preflight(spec, "--address", "127.0.0.2", prefix=("prlimit", "--nofile=256:256"))
    assert code == 0 and check(record, "limits")["status"] == "warned"  # limits warns by default
    code, record = preflight(
        spec,
        "--address",
        "127.0.0.2",
        *limits,
        "--set",
        "launch.preflight.min_open_files=200",
        prefix=("prlimit", "--nofile=256:256"),
    )
    assert check(record, "limits")["status"] == "ok"


# -- network ------------------------------------------------------------------------------------


def test_nccl_interface_rules() -> None:
    names = ["docker0", "eth0", "eth1", "ib0", "lo"]
    assert nccl_selects("eth", names) == ["eth0", "eth1"]
    assert nccl_selects("=eth", names) == []
    assert nccl_selects("=eth1,ib", names) == ["eth1"]
    assert nccl_selects("^docker,lo", names) == ["eth0", "eth1", "ib0"]
    assert nccl_selects("^=eth0", names) == ["docker0", "eth1", "ib0", "lo"]
    ifs = Interfaces({"lo": ("127.0.0.1", "::1"), "eth0": ("10.0.0.5",)})
    assert ifs.carrying("127.0.0.7") == "lo" and ifs.carrying("10.0.0.5") == "eth0" and ifs.carrying("10.0.0.6") is None


@pytest.fixture
def netns() -> Any:
    """A network namespace with lo and interfaces of its own: a veth pair gym0/gym1, gym0 at 10.77.0.2/24."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    name = f"gympf{os.getpid()}"
    cmds = [
        ["ip", "netns", "add", name],
        ["ip", "-n", name, "link", "set", "lo", "up"],
        ["ip", "-n", name, "link", "add", "gym0", "type", "veth", "peer", "name", "gym1"],
        ["ip", "-n", name, "addr", "add", "10.77.0.2/24", "dev", "gym0"],
        ["ip", "-n", name, "link", "set", "gym0", "up"],
        ["ip", "-n", name, "link", "set", "gym1", "up"],
    ]
    try:
        for cmd in cmds:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                pytest.skip(f"{' '.join(cmd)}: {done.stderr.strip()}")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_socket_interface_variables_in_a_namespace_with_its_own_interface(spec: Path, netns: str) -> None:
    def run(**env: str) -> dict[str, Any]:
        _, record = preflight(spec, "--address", "10.77.0.2", prefix=("ip", "netns", "exec", netns), env=env)
        return check(record, "network")

    ok = run(NCCL_SOCKET_IFNAME="gym", GLOO_SOCKET_IFNAME="gym0", TP_SOCKET_IFNAME="gym0")
    assert ok["status"] == "ok" and ok["facts"]["address_on"] == "gym0", ok
    assert set(ok["facts"]["interfaces"]) == {"lo", "gym0", "gym1"}
    bad = run(NCCL_SOCKET_IFNAME="^gym", GLOO_SOCKET_IFNAME="=gym0", TP_SOCKET_IFNAME="eth0")
    assert bad["status"] == "failed" and len(bad["problems"]) == 3, bad
    nccl, gloo, tp = bad["problems"]
    assert nccl.startswith(
        "NCCL_SOCKET_IFNAME='^gym' (this environment) selects lo, but this node's address 10.77.0.2 is on gym0"
    )
    assert "set it to 'gym0'" in nccl
    assert gloo.startswith("GLOO_SOCKET_IFNAME='=gym0' (this environment) names no interface here") and "NCCL's" in gloo
    assert tp.startswith(
        "TP_SOCKET_IFNAME='eth0' (this environment) names no interface here (one exact interface name); "
        "interfaces: gym0, gym1, lo; set it to 'gym0'"
    )
    # The spec's [launch] env is the job's environment too.
    _, record = preflight(
        spec,
        "--address",
        "10.77.0.2",
        "--set",
        'launch.env={NCCL_SOCKET_IFNAME="=lo"}',
        prefix=("ip", "netns", "exec", netns),
    )
    assert check(record, "network")["problems"][0].startswith("NCCL_SOCKET_IFNAME='=lo' ([launch] env) selects lo")


def test_peers_that_answer_are_closed_or_silent(tmp_path: Path) -> None:
    secret = os.urandom(32)
    bell, why = Doorbell.bind("127.0.0.3")
    assert bell is not None, why
    bell.arm(secret, run="run-x", attempt=1, rank=1, incarnation="i1", on_ring=lambda _r: None, stopping=lambda: False)
    bell.start()
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.4", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the kernel answers "port unreachable"
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never answers (as a firewall drops)
    silent.bind(("127.0.0.5", 0))
    try:
        peers = [
            PeerBell(1, "127.0.0.3", bell.port, "i1"),
            PeerBell(2, "127.0.0.4", closed_port, "i2"),
            PeerBell(3, "127.0.0.5", silent.getsockname()[1], "i3"),
            PeerBell(4, "127.0.0.6", None, "i4"),
        ]
        t0 = time.monotonic()
        seen = check_network(
            {}, "127.0.0.2", lambda: probe_peers(Prober(secret, "run-x", 1, 0, "i0"), peers, "127.0.0.2", 3.0), ""
        )
        assert time.monotonic() - t0 < 10
        probes = {p["rank"]: p for p in seen.facts["probes"]}
        assert probes[1]["answered"] and not probes[2]["answered"] and not probes[3]["answered"]
        assert "closed (ICMP port unreachable)" in probes[2]["error"] and probes[3]["error"] == "no answer"
        assert "doorbell is off" in probes[4]["error"]
        assert len(seen.problems) == 2  # the closed and the silent one; a peer without a doorbell is not probed
        assert seen.problems[0].startswith(f"rank 2's address 127.0.0.4 (doorbell port {closed_port}) does not answer")
        assert seen.problems[1].startswith("rank 3's address 127.0.0.5")
        assert "1/4 peer(s) answered" in seen.summary
        # A probe signed with another secret gets no answer: the doorbell answers its own run only.
        (other,) = probe_peers(Prober(os.urandom(32), "run-x", 1, 0, "i0"), peers[:1], "127.0.0.2", 1.0)
        assert not other.answered and bell.dropped["bad_mac"] >= 1
    finally:
        silent.close()
        bell.stop()
        bell.join(2)


def test_gym_launch_preflight_prints_the_table_and_exits_by_the_checks(spec: Path) -> None:
    launch = [sys.executable, "-m", "launch.cli", "preflight", str(spec), "--address", "127.0.0.2"]
    done = subprocess.run(launch, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("preflight of (") and "127.0.0.2): passed in " in lines[0]
    assert lines[1].split() == ["check", "mode", "result", "time", "what", "it", "saw"]
    assert [ln.split()[0] for ln in lines[2:7]] == ["gpus", "shm", "network", "disk", "limits"]
    assert "skipped: no NVML" in lines[2]
    env = {**os.environ, "NCCL_SOCKET_IFNAME": "ib-does-not-exist"}
    done = subprocess.run(launch, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and "network  fail  FAILED" in done.stdout, done.stdout
    assert "NCCL_SOCKET_IFNAME='ib-does-not-exist' (this environment) names no interface here" in done.stdout
    done = subprocess.run([*launch, "--set", 'launch.preflight.disk="never"'], capture_output=True, text=True)
    assert done.returncode == 2 and 'launch.preflight.disk: must be "fail" or "warn" or "off"' in done.stderr


def test_gym_launch_preflight_on_a_hostname_resolving_to_loopback_fails_network_in_its_table(spec: Path) -> None:
    """Issue 46: a hostname on loopback was a usage error (exit 2, no table). It is this node's
    finding: the table, `network` failed (exit 1), and the fix (pass --address)."""
    env = {k: v for k, v in os.environ.items() if k != "GYM_TEST_REPLICA_ADDRESS"}
    env["BEAKER_NODE_HOSTNAME"] = "localhost"  # the hostname preflight resolves; loopback everywhere
    launch = [sys.executable, "-m", "launch.cli", "preflight", str(spec)]
    done = subprocess.run(launch, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "network  fail  FAILED" in done.stdout and "check    mode  result" in done.stdout
    assert "network (fails): hostname 'localhost' resolves to loopback address" in done.stdout
    assert "Pass --address" in done.stdout


def test_sizes_and_modes_of_the_spec() -> None:
    from launch.spec._keys import Size, parse_size

    assert (
        parse_size("20GiB") == 20 << 30
        and parse_size("512 MiB") == 512 << 20
        and parse_size("1.5TB") == 1_500_000_000_000
    )
    assert parse_size(4096) == 4096 and parse_size("20 parsecs") is None and parse_size(-1) is None
    assert Size(unlimited=True).check("unlimited") is None and Size().check("unlimited") is not None
    from launch.spec.config import RunConfig
    from launch.spec.load import load_spec

    defaults = RunConfig.from_spec(
        load_spec(str(Path(__file__).parents[1] / "examples" / "demo.toml"), [])
    ).launch.preflight
    assert [defaults.mode(c) for c in ("gpus", "shm", "network", "disk", "limits")] == [
        "fail",
        "warn",
        "fail",
        "fail",
        "warn",
    ]
    assert (defaults.min_free_gpu_memory, defaults.clean_shm, defaults.gpu_release_timeout) == (0.95, False, 30.0)
    assert defaults.min_locked_memory_bytes is None  # unlimited
