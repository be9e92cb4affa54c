"""The filesystem guard (agent/coord/fs_guard.py, agent/coord/_mountinfo.py): mount-table parsing on
real mountinfo lines of the filesystems runs live on, the warnings and the refusal, the placement
record's `filesystem`, and one real agent run whose record and audit carry the facts.

No object-store FUSE daemon can run here (no bucket, no network): the refusal is tested on a real FUSE
mount that the kernel lists as fuse.s3fs (bindfs with subtype=s3fs), and, for the other daemons, on
mount tables written for the test (one handed to a real gym-agent process in place of /proc/self/mountinfo).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.coord import _mountinfo as mountinfo
from agent.coord import fs_guard
from agent.coord.fs_guard import Heartbeat
from schemas import names, records, validation
from tests.harness import (
    BIN,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    kill_tree_by_session,
    read,
    small_spec,
    start_agent,
    uid,
)

# Lines as Linux prints them (proc(5)); sources and addresses are examples.
ROOT = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard"
NFS_SERVER = "fileserver:/export/shared"
NFS_TAIL = "hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.5,local_lock=none,addr=10.0.0.2"
NFS_DEFAULTS = (
    f"312 27 0:53 / /mnt/shared rw,relatime shared:180 - nfs4 {NFS_SERVER} "
    f"rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,{NFS_TAIL}"
)
NFS_ACTIMEO_1 = (
    f"313 27 0:54 / /mnt/fast rw,relatime - nfs4 {NFS_SERVER} rw,vers=4.2,rsize=1048576,"
    f"acregmin=1,acregmax=1,acdirmin=1,acdirmax=1,{NFS_TAIL}"
)
NFS_NOAC = (
    "314 27 0:55 / /mnt/noac rw,sync,relatime - nfs fileserver:/export/v3 rw,sync,vers=3,rsize=1048576,"
    "namlen=255,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,hard,noac,proto=tcp,timeo=600,retrans=2,sec=sys,"
    "mountaddr=10.0.0.2,mountvers=3,mountport=20048,mountproto=udp,local_lock=none,addr=10.0.0.2"
)
NFS_LOOKUP_NONE = f"315 27 0:56 / /mnt/nolookup rw,relatime - nfs4 {NFS_SERVER} rw,vers=4.1,lookupcache=none,{NFS_TAIL}"
NFS_NOCTO = f"316 27 0:57 / /mnt/nocto rw,relatime - nfs4 {NFS_SERVER} rw,vers=4.2,nocto,{NFS_TAIL}"
S3FS = (
    "401 27 0:60 / /mnt/bucket rw,nosuid,nodev,relatime shared:200 - fuse.s3fs s3fs rw,user_id=0,group_id=0,allow_other"
)
GCSFUSE = "402 27 0:61 / /gcs rw,nosuid,nodev,relatime - fuse.gcsfuse my-bucket rw,user_id=1000,group_id=1000"
MOUNTPOINT_S3 = "403 27 0:62 / /mnt/s3 rw,nosuid,nodev,noatime - fuse mountpoint-s3 rw,user_id=0,group_id=0"
LUSTRE = "150 27 0:45 / /lustre rw,relatime shared:90 - lustre 10.0.0.1@o2ib:/scratch rw,flock,lazystatfs"
WEKA = "151 27 0:46 / /mnt/weka rw,relatime - wekafs default rw,relatime,writecache,readahead_kb=32768"
TMPFS = "25 24 0:23 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw,size=24684092k"
OVERLAY = (
    "1082 1025 0:137 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/AB:"
    "/var/lib/docker/overlay2/l/CD,upperdir=/var/lib/docker/overlay2/xyz/diff,workdir=/var/lib/docker/overlay2/xyz/work"
)
SPACED = f"320 27 0:58 / /mnt/team\\040data rw,relatime - nfs4 {NFS_SERVER} rw,vers=4.2,actimeo=1,{NFS_TAIL}"
BIND = "330 27 0:53 /runs /data/runs rw,relatime - nfs4 fileserver:/export/shared rw,vers=4.2,acdirmax=30," + NFS_TAIL
SECRETS = (
    "340 27 0:70 / /mnt/dav rw,relatime - fuse.sshfs https://alice:hunter2@dav.example/x "
    "rw,user_id=0,password=hunter2,auth_token=s3kr1t,credentials=/root/.cred,cache=yes"
)

HB = Heartbeat(interval=2.0, timeout=120.0)  # the spec's defaults


def guard_of(tmp_path: Path, lines: list[str], path: str, hb: Heartbeat = HB) -> fs_guard.Guard:
    table = tmp_path / "mountinfo"
    table.write_text("\n".join(lines) + "\n")
    return fs_guard.check(path, hb, table=str(table))


def fs_of(line: str) -> fs_guard.Filesystem:
    mount = mountinfo.parse_line(line)
    assert mount is not None
    return fs_guard.Filesystem.of(mount)


# -- parsing and which mount holds a path ---------------------------------------------------------------


def test_a_mountinfo_line_parses_into_both_option_lists() -> None:
    m = mountinfo.parse_line(NFS_DEFAULTS)
    assert m is not None
    assert (m.mount_id, m.parent_id, m.root, m.mount_point) == (312, 27, "/", "/mnt/shared")
    assert (m.fstype, m.source) == ("nfs4", NFS_SERVER)
    assert m.mount_options == ("rw", "relatime")  # shared:180 is an optional field, not an option
    assert "vers=4.2" in m.super_options and m.options[:3] == ("rw", "relatime", "vers=4.2")
    assert mountinfo.parse_line("garbage") is None
    assert mountinfo.parse_line("1 2 3:4 / /x rw") is None  # no separator
    assert mountinfo.parse("\n".join([ROOT, "nonsense line", TMPFS])) == (
        mountinfo.parse_line(ROOT),
        mountinfo.parse_line(TMPFS),
    )


def test_escaped_space_in_a_mount_point() -> None:
    mounts = mountinfo.parse("\n".join([ROOT, SPACED]))
    assert mounts[1].mount_point == "/mnt/team data"
    assert mountinfo.mount_of("/mnt/team data/runs", mounts) == mounts[1]
    assert mountinfo.mount_of("/mnt/team", mounts) == mounts[0]


def test_the_longest_containing_mount_point_wins_and_a_prefix_is_not_containment() -> None:
    other = NFS_DEFAULTS.replace("312 27", "317 27").replace("/mnt/shared", "/mnt/shared2")
    mounts = mountinfo.parse("\n".join([ROOT, NFS_DEFAULTS, other, LUSTRE]))
    assert mountinfo.mount_of("/mnt/shared/out/cluster/u", mounts).mount_point == "/mnt/shared"  # type: ignore[union-attr]
    assert mountinfo.mount_of("/mnt/shared2", mounts).mount_point == "/mnt/shared2"  # type: ignore[union-attr]
    assert mountinfo.mount_of("/mnt/sharedX/a", mounts).mount_point == "/"  # type: ignore[union-attr]
    assert mountinfo.mount_of("/lustre/a", mounts).fstype == "lustre"  # type: ignore[union-attr]


def test_a_bind_mount_is_its_own_mount_point() -> None:
    mounts = mountinfo.parse("\n".join([ROOT, BIND]))
    m = mountinfo.mount_of("/data/runs/out", mounts)
    assert m is not None and (m.root, m.mount_point, m.fstype) == ("/runs", "/data/runs", "nfs4")


def test_a_mount_stacked_on_another_hides_it_and_its_children() -> None:
    lower = "50 27 0:80 / /scratch rw - ext4 /dev/sdb rw"
    child = "51 50 0:81 / /scratch/fast rw - tmpfs tmpfs rw"
    upper = "52 50 0:82 / /scratch rw - nfs4 srv:/x rw,vers=4.2"  # mounted over /scratch: its parent is 50
    mounts = mountinfo.parse("\n".join([ROOT, lower, child, upper]))
    assert mountinfo.mount_of("/scratch/a", mounts).mount_id == 52  # type: ignore[union-attr]
    assert mountinfo.mount_of("/scratch/fast/a", mounts).mount_id == 52  # type: ignore[union-attr]
    loop = "60 61 0:90 / /loop rw - ext4 a rw\n61 60 0:91 / /loop rw - ext4 b rw"  # a malformed table
    assert mountinfo.mount_of("/loop/x", mountinfo.parse(loop)) is None


def test_a_path_that_does_not_exist_yet_resolves_through_its_existing_ancestor(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert mountinfo.resolve(str(tmp_path / "link" / "out" / "cluster")) == str(real.resolve() / "out" / "cluster")
    assert mountinfo.resolve(str(real)) == str(real.resolve())


def test_this_machines_mount_table() -> None:
    text = Path(mountinfo.MOUNTINFO).read_text()
    mounts = mountinfo.read()
    assert len(mounts) == len([ln for ln in text.splitlines() if ln.strip()]), "a line of this machine was not parsed"
    findmnt = shutil.which("findmnt")
    for path in (os.getcwd(), "/", str(Path(sys.executable).parent), "/dev/shm", "/proc"):
        if not os.path.exists(path):
            continue
        resolved = mountinfo.resolve(path)
        m = mountinfo.mount_of(resolved, mounts)
        assert m is not None, path
        if findmnt:  # util-linux's own answer for the same path
            got = subprocess.run(
                [findmnt, "-n", "-T", resolved, "-o", "TARGET,FSTYPE"], capture_output=True, text=True, check=True
            ).stdout.split()
            assert (m.mount_point, m.fstype) == (got[0], got[-1]), (path, got)


# -- what the guard says --------------------------------------------------------------------------------


def test_nfs_defaults_warn_naming_acdirmax_and_lookupcache(tmp_path: Path) -> None:
    g = guard_of(tmp_path, [ROOT, NFS_DEFAULTS], "/mnt/shared/out")
    assert g.refusal is None and g.filesystem is not None and g.filesystem.fstype == "nfs4"
    listing, negative = g.warnings
    assert "acdirmax=60 (the NFS default" in listing and "heartbeat_interval=2 s" in listing
    assert "actimeo=1" in listing and "heartbeat_timeout" not in listing  # 60 s < the 120 s timeout
    assert "lookupcache=all (the NFS default)" in negative and "lookupcache=positive" in negative
    # A heartbeat_timeout the cache reaches: a failed peer can be named silent first.
    short = guard_of(tmp_path, [ROOT, NFS_DEFAULTS], "/mnt/shared/out", Heartbeat(interval=1, timeout=30))
    assert "beyond heartbeat_timeout=30 s" in short.warnings[0]


def test_nfs_with_actimeo_1_or_noac_is_quiet(tmp_path: Path) -> None:
    assert guard_of(tmp_path, [ROOT, NFS_ACTIMEO_1], "/mnt/fast/out").warnings == ()
    assert guard_of(tmp_path, [ROOT, NFS_NOAC], "/mnt/noac/out").warnings == ()
    # ...but not when the heartbeat interval is shorter than actimeo=1: then only noac fits.
    fast = guard_of(tmp_path, [ROOT, NFS_ACTIMEO_1], "/mnt/fast/out", Heartbeat(interval=0.5, timeout=10))
    listing, negative = fast.warnings
    assert "acdirmax=1 " in listing and "Remount with noac" in listing and "lookupcache=positive" in negative


def test_actimeo_spelled_in_the_options_sets_every_bound() -> None:
    cache = fs_guard.nfs_cache(fs_of(SPACED))
    assert cache is not None and (cache.acregmin, cache.acdirmax, cache.listing, cache.negative) == (1, 1, 1, 1)
    assert fs_guard.nfs_cache(fs_of(LUSTRE)) is None


def test_lookupcache_none_leaves_only_the_listing_warning(tmp_path: Path) -> None:
    (listing,) = guard_of(tmp_path, [ROOT, NFS_LOOKUP_NONE], "/mnt/nolookup/x").warnings
    assert "acdirmax=60" in listing and "lookupcache" not in listing


def test_nocto_warns_that_heartbeats_are_read_from_the_cache(tmp_path: Path) -> None:
    warnings = guard_of(tmp_path, [ROOT, NFS_NOCTO], "/mnt/nocto/x", Heartbeat(interval=2, timeout=30)).warnings
    nocto = [w for w in warnings if "without nocto" in w]
    assert len(nocto) == 1 and "acregmax=60" in nocto[0] and "beyond heartbeat_timeout=30 s" in nocto[0]


@pytest.mark.parametrize("line", [LUSTRE, WEKA, TMPFS, OVERLAY, ROOT])
def test_coherent_and_local_filesystems_are_quiet(tmp_path: Path, line: str) -> None:
    m = mountinfo.parse_line(line)
    assert m is not None
    g = guard_of(tmp_path, [ROOT, line], m.mount_point.rstrip("/") + "/out")
    assert g.filesystem is not None and g.filesystem.fstype == m.fstype
    assert g.refusal is None and g.warnings == ()


@pytest.mark.parametrize(
    ("line", "where", "fstype"),
    [(S3FS, "/mnt/bucket", "fuse.s3fs"), (GCSFUSE, "/gcs", "fuse.gcsfuse"), (MOUNTPOINT_S3, "/mnt/s3", "fuse")],
)
def test_object_store_fuse_mounts_are_refused(tmp_path: Path, line: str, where: str, fstype: str) -> None:
    g = guard_of(tmp_path, [ROOT, line], f"{where}/out")
    assert g.refusal is not None
    assert f"{fstype} " in g.refusal and f"at {where}" in g.refusal and "not atomic" in g.refusal
    assert "[output] root" in g.refusal and "nothing was written" in g.refusal


def test_other_fuse_filesystems_are_not_object_stores() -> None:
    for fstype, source in (("fuse.sshfs", "u@h:/x"), ("fuse.bindfs", "/src"), ("fuse.juicefs", "redis://m")):
        assert fs_guard.object_store(fs_guard.Filesystem(fstype, source, "/m", ())) is None
    assert fs_guard.object_store(fs_guard.Filesystem("fuse", "s3fs#bucket", "/m", ())) is not None  # old spelling


def test_an_unreadable_mount_table_is_unknown_not_fatal(tmp_path: Path) -> None:
    g = fs_guard.check(str(tmp_path), HB, table=str(tmp_path / "missing"))
    assert g.filesystem is None and g.refusal is None and "cannot read" in (g.unknown_because or "")
    assert g.record()["type"] == "unknown" and "unknown" in g.log_lines()[0]


# -- the record ---------------------------------------------------------------------------------------


def _placement(filesystem: dict) -> dict:
    fields = records.placement_fields(
        node_index=0,
        address="10.0.0.1",
        visible_devices=("0",),
        trainer_gpus=1,
        rollout_gpus=0,
        ray_devices=(0,),
        ray_num_gpus=1,
        judge_devices={},
        unused_devices=(),
        is_head=True,
        is_driver_node=True,
        filesystem=filesystem,
    )
    header = {"schema": "placement", "schema_version": 1, "fingerprint": "a" * 64, "rank": 0}
    header |= {"incarnation": "i-1", "writer": "agent", "written_at": 1.0, "attempt": 1}
    return header | fields


def test_the_record_drops_credentials_and_validates(tmp_path: Path) -> None:
    g = guard_of(tmp_path, [ROOT, SECRETS], "/mnt/dav/out")
    rec = g.record()
    text = json.dumps(rec)
    assert "hunter2" not in text and "s3kr1t" not in text and "/root/.cred" not in text
    assert "password=<redacted>" in rec["options"] and "cache=yes" in rec["options"]
    assert rec["source"] == "https://<redacted>@dav.example/x"
    assert "hunter2" not in " ".join(g.log_lines())
    assert validation.violations("placement", _placement(rec)) == []
    nfs = guard_of(tmp_path, [ROOT, NFS_DEFAULTS], "/mnt/shared/out").record()
    assert (nfs["type"], nfs["mount_point"], len(nfs["warnings"])) == ("nfs4", "/mnt/shared", 2)
    assert validation.violations("placement", _placement(nfs)) == []
    huge = fs_guard.Guard("/x", fs_guard.Filesystem("overlay", "o", "/", tuple(f"l={'x' * 5000}" for _ in range(300))))
    assert validation.violations("placement", _placement(huge.record())) == []  # capped to the schema's bounds
    bad = _placement(nfs)
    bad["filesystem"]["password"] = "x"
    assert validation.violations("placement", bad) != []  # no field beyond the declared ones


def test_the_audit_reports_each_mount_and_every_warning_once(tmp_path: Path) -> None:
    from audit._report_text import render
    from audit.api import audit_run
    from tests.harness.rundirs import VISIBLE, success

    b = success(tmp_path / "run")
    nfs = guard_of(tmp_path, [ROOT, NFS_DEFAULTS], "/mnt/shared/out").record()
    lustre = guard_of(tmp_path, [ROOT, LUSTRE], "/lustre/out").record()
    for r, fs in ((0, nfs), (1, nfs), (2, lustre)):
        b.write(names.placement(r), r, b.topo[r].placement_fields(b.address[r], VISIBLE, fs))
    result = audit_run(b.path, ask_scheduler=False)
    assert result.verdict == "pass", [f.message for f in result.errors]
    warned = [f for f in result.findings if f.code == "filesystem.cache"]
    assert len(warned) == 2 and all(f.severity == "warning" and f.message.startswith("ranks 0-1: ") for f in warned)
    assert {f.message[len("ranks 0-1: ") :] for f in warned} == set(nfs["warnings"])
    report = result.to_json()["filesystem"]
    assert [(m["type"], m["ranks"]) for m in report] == [("nfs4", [0, 1]), ("lustre", [2])]
    text = render(result)
    assert f"filesystem: nfs4 {NFS_SERVER} at /mnt/shared (ranks 0-1; 2 warning(s), see Findings)" in text
    assert "filesystem: lustre 10.0.0.1@o2ib:/scratch at /lustre (rank 2)" in text
    # A record without `filesystem` (an agent older than the guard) is still a valid run.
    b.write(names.placement(2), 2, b.topo[2].placement_fields(b.address[2], VISIBLE))
    assert [m["ranks"] for m in audit_run(b.path, ask_scheduler=False).to_json()["filesystem"]] == [[0, 1]]


# -- real processes -----------------------------------------------------------------------------------

FAKE_TABLE = (
    "import sys; from agent.coord import _mountinfo as mountinfo; mountinfo.MOUNTINFO = sys.argv.pop(1); "
    "from agent.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_gym_agent_refuses_an_object_store_mount_before_writing_anything(tmp_path: Path) -> None:
    """A real gym-agent process, its mount table replaced: the output root is on fuse.s3fs."""
    root = tmp_path / "bucket"
    table = tmp_path / "mountinfo"
    s3 = S3FS.replace("/mnt/bucket", str(root))
    table.write_text("\n".join([ROOT, s3]) + "\n")
    spec = tmp_path / "s.toml"
    spec.write_text(small_spec(replicas=1, ray=False))
    argv = ["--uuid", "u1", "--config", str(spec), "--output-root", str(root / "out"), "--rank", "0"]
    argv += ["--replicas", "1", "--address", "127.0.0.2"]
    p = subprocess.run(
        [str(BIN / "python"), "-c", FAKE_TABLE, str(table), *argv], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2, p.stderr
    assert "fuse.s3fs" in p.stderr and f"at {root}" in p.stderr and "Traceback" not in p.stderr
    assert not root.exists()  # nothing was written: not even the output root


def test_gym_agent_refuses_a_real_fuse_mount_of_subtype_s3fs(tmp_path: Path) -> None:
    """A real FUSE mount the kernel lists as fuse.s3fs (bindfs with subtype=s3fs: no bucket here, but
    the mount table is the real one), and a real gym-agent with nothing replaced."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("bindfs") is None:
        pytest.skip("needs root, /dev/fuse and bindfs (make bindfs)")
    src, mnt = tmp_path / "src", tmp_path / "bucket"
    src.mkdir()
    mnt.mkdir()
    done = subprocess.run(["bindfs", "-o", "subtype=s3fs", str(src), str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"bindfs mount failed: {done.stderr.strip()}")
    try:
        spec = tmp_path / "s.toml"
        spec.write_text(small_spec(replicas=1, ray=False))
        p = start_agent(tmp_path, spec, "u1", 0, 1, "127.0.0.2", args=("--output-root", str(mnt / "out")))
        out = p.communicate(timeout=60)[0]
        assert p.returncode == 2, out
        assert "fuse.s3fs" in out and f"at {mnt}" in out and "nothing was written" in out and "Traceback" not in out
        assert list(src.iterdir()) == []  # not even the output root
    finally:
        if subprocess.run(["fusermount", "-u", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["fusermount", "-u", "-z", str(mnt)], capture_output=True)


@pytest.mark.slow
def test_a_real_run_records_its_filesystem_and_the_audit_shows_it(tmp_path: Path) -> None:
    spec = tmp_path / "fs.toml"
    spec.write_text(small_spec(replicas=1, node_gpus=1, ray=False, driver='command = ["true"]\ntrains = false'))
    u = uid("fs")
    run_dir = tmp_path / "out" / "cluster" / u
    p = start_agent(tmp_path, spec, u, 0, 1, "127.0.0.2", gpus=1)
    try:
        out = p.communicate(timeout=120)[0]
    finally:
        kill_tree_by_session(p)
    assert p.returncode == 0, out
    assert_nothing_left(run_dir)
    expected = mountinfo.mount_of(mountinfo.resolve(str(tmp_path)), mountinfo.read())
    assert expected is not None
    assert_artifacts_valid(run_dir)
    fs = read(run_dir, names.placement(0))["filesystem"]
    assert (fs["type"], fs["mount_point"]) == (expected.fstype, expected.mount_point)
    assert fs["options"] == list(fs_guard.redact(expected.options))
    log = (run_dir / names.agent_log(0)).read_text()
    assert f"filesystem of {mountinfo.resolve(str(tmp_path / 'out'))}: {expected.fstype}" in log
    result = audit(run_dir, verdict="pass")
    assert result.to_json()["filesystem"] == [{**fs, "ranks": [0]}]
    from audit._report_text import render

    assert f"filesystem: {expected.fstype} {expected.source} at {expected.mount_point} (rank 0)" in render(result)
