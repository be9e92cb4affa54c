"""Issue 13's defects, each against real agent processes (no Ray where Ray is not the point, so
each test takes seconds): evidence that survives the fault, and nothing of the run left running."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent.proc import tempdirs
from schemas import RunDir, names
from tests.harness import (
    BIN,
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    failures,
    fullfs,
    kill_tree_by_session,
    launch_local,
    read,
    small_spec,
    start_agent,
    uid,
    wait_all,
    wait_for_file,
    wait_phase,
)

pytestmark = pytest.mark.slow

# A driver that leaves the evidence a successful run needs, without Ray.
RESULT_DRIVER = (
    'command = ["python", "-c", "from agent import driver_api; driver_api.write_result(optimizer_steps=1, '
    'final_loss=0.5, policy_version=1, policy_refreshes=1, judge_replies=0)"]'
)
SLEEPY = 'command = ["python", "-c", "import time; time.sleep(60)"]'


def snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for p in sorted(run_dir.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(run_dir))] = (p.read_bytes(), p.stat().st_mtime_ns)
    return out


def test_ray_disabled_success_audits_pass(tmp_path: Path) -> None:
    """Defect 12: no Ray, so no ray-layout.json is expected (was: FAIL ray_layout.missing)."""
    run = launch_local(tmp_path, small_spec(ray=False, replicas=2, driver=RESULT_DRIVER), uid("noray"))
    try:
        assert run.wait(120) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    assert_artifacts_valid(run.run_dir)
    assert not (run.run_dir / names.RAY_LAYOUT).exists()
    audit(run.run_dir, verdict="pass")
    assert_nothing_left(run.run_dir)


def test_launcher_refuses_a_symlinked_run_directory_in_one_line(tmp_path: Path) -> None:
    """Defect 11: exit 2, one line naming the problem, no traceback, nothing written through it."""
    u = uid("link")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out" / "cluster").mkdir(parents=True)
    (tmp_path / "out" / "cluster" / u).symlink_to(elsewhere)
    run = launch_local(tmp_path, small_spec(ray=False, replicas=2), u)
    assert run.wait(60) == 2
    lines = run.text.strip().splitlines()
    assert len(lines) == 1 and "symlink" in lines[0] and "Traceback" not in run.text, run.text
    assert list(elsewhere.iterdir()) == []


def test_reused_uuid_and_restarted_rank_touch_nothing(tmp_path: Path) -> None:
    """Defect 4: a finished run's directory is byte-for-byte unchanged after gym-agent is started
    again with its uuid (a reused uuid, or a scheduler restarting rank 1); exit 2, one line."""
    run = launch_local(tmp_path, small_spec(ray=False, replicas=2, driver=RESULT_DRIVER), uid("reuse"))
    try:
        assert run.wait(120) == 0, run.text[-3000:]
    finally:
        kill_tree_by_session(run.proc)
    before = snapshot(run.run_dir)
    spec = run.run_dir / names.SPEC
    for rank in (1, 0):
        p = start_agent(tmp_path, spec, run.uuid, rank, 2, f"127.0.0.{rank + 2}")
        try:
            out = p.communicate(timeout=60)[0]
        finally:
            kill_tree_by_session(p)
        assert p.returncode == 2, out
        assert f"rank {rank} of this run was already claimed" in out and "Traceback" not in out, out
        assert len(out.strip().splitlines()) == 1, out
    assert snapshot(run.run_dir) == before
    audit(run.run_dir, verdict="pass")
    assert_nothing_left(run.run_dir)


def test_racing_duplicate_rank_one_wins_and_the_run_is_clean(tmp_path: Path) -> None:
    """Defect 5: two agents for rank 1 released at once: exactly one joins, the other exits 2."""
    spec = tmp_path / "race.toml"
    spec.write_text(small_spec(ray=False, replicas=2, driver=RESULT_DRIVER, startup_timeout=60))
    u = uid("race")
    run_dir = tmp_path / "out" / "cluster" / u
    procs: list[subprocess.Popen] = []
    gate = threading.Barrier(2)

    def start(rank: int, address: str) -> None:
        gate.wait()
        procs.append(start_agent(tmp_path, spec, u, rank, 2, address))

    threads = [threading.Thread(target=start, args=(1, a)) for a in ("127.0.0.3", "127.0.0.4")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    procs.append(start_agent(tmp_path, spec, u, 0, 2, "127.0.0.2"))
    codes = wait_all(procs, 120)
    assert sorted(codes) == [0, 0, 2], codes
    assert_artifacts_valid(run_dir)
    audit(run_dir, verdict="pass")
    assert_nothing_left(run_dir)


def test_exclusive_create_has_exactly_one_winner(tmp_path: Path) -> None:
    """The claim primitive itself under contention (write_artifact would let every thread 'win')."""
    from schemas import Writer

    run = RunDir.create(tmp_path, "claim", mode=0o750)
    wins: list[int] = []
    gate = threading.Barrier(8)

    def contend(i: int) -> None:
        gate.wait()
        try:
            run.create_artifact(names.ack(0), Writer("f" * 64, 0, f"i{i}"), {"outcome": "success"})
            wins.append(i)
        except FileExistsError:
            pass

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert read(run.path, names.ack(0))["incarnation"] == f"i{wins[0]}"
    assert [n for n in os.listdir(run.path / names.ACKS_DIR)] == ["ack-0.json"]  # no temp left


def test_replica_count_mismatch_fails_at_once_naming_the_ranks(tmp_path: Path) -> None:
    """Defect 7: one agent told --replicas 4, the others 3: every agent fails at plan agreement
    within seconds (was: two ran the driver, the third waited until startup_timeout)."""
    spec = tmp_path / "count.toml"
    spec.write_text(small_spec(ray=False, replicas=3, driver=SLEEPY, startup_timeout=90))
    u = uid("count")
    run_dir = tmp_path / "out" / "cluster" / u
    t0 = time.monotonic()
    procs = [start_agent(tmp_path, spec, u, r, 4 if r == 2 else 3, f"127.0.0.{r + 2}") for r in range(3)]
    codes = wait_all(procs, 120)
    took = time.monotonic() - t0
    assert codes == [1, 1, 1] and took < 45, (codes, took)
    recs = failures(run_dir)
    # Whoever notices first records plan_mismatch; a peer may react to that record instead.
    assert all(d["kind"] in ("plan_mismatch", "peer_failure") for d in recs.values()), recs
    assert all("replica count disagrees" in d["cause"] for d in recs.values()), recs
    # The record names the odd rank: seen from a peer ("rank 2: 4") or from rank 2 itself ("--replicas 4").
    assert any(
        d["kind"] == "plan_mismatch" and ("rank 2: 4" in d["cause"] or (r == 2 and "--replicas 4" in d["cause"]))
        for r, d in recs.items()
    ), recs
    assert not (run_dir / names.driver_log(0)).exists()
    assert_artifacts_valid(run_dir)
    assert_nothing_left(run_dir)


def test_closed_stdout_keeps_the_real_cause(tmp_path: Path) -> None:
    """Defect 2: every agent's stdout is a pipe closed mid-run; the driver then fails. Each rank
    must still record its own cause (driver_exit / peer_failure), never `agent_died`."""
    failing = 'command = ["python", "-c", "import time, sys; time.sleep(4); sys.exit(3)"]'
    spec = tmp_path / "pipe.toml"
    spec.write_text(small_spec(ray=False, replicas=3, driver=failing))
    u = uid("pipe")
    run_dir = tmp_path / "out" / "cluster" / u
    procs = [start_agent(tmp_path, spec, u, r, 3, f"127.0.0.{r + 2}") for r in range(3)]
    try:
        for r in range(3):
            wait_phase(run_dir, r, "driver", 60)
        for p in procs:
            assert p.stdout is not None
            p.stdout.close()  # the reader is gone: the agents' next print meets EPIPE
    finally:
        codes = wait_all(procs, 120)
    assert codes == [1, 1, 1], codes
    recs = failures(run_dir)
    assert sorted(recs) == [0, 1, 2]
    assert {r["kind"] for r in recs.values()} == {"driver_exit", "peer_failure"}, recs
    assert all(r["writer"] == "agent" for r in recs.values())
    for r in range(3):
        assert read(run_dir, names.cleanup(r))["writer"] == "agent"
    audit(run_dir, verdict="fail", rank=0, kind="driver_exit")
    assert_nothing_left(run_dir)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_launcher_hangup_or_kill_stops_every_agent_with_records(tmp_path: Path, sig: signal.Signals) -> None:
    """Defect 3: SIGHUP or SIGKILL of `gym-launch local` mid-run: every agent fails cleanly with
    its failure and cleanup records, and nothing of the run is left (was: all ran on forever)."""
    run = launch_local(tmp_path, small_spec(ray=False, replicas=3, driver=SLEEPY), uid(sig.name.lower()))
    try:
        for r in range(3):
            wait_phase(run.run_dir, r, "driver", 60)
        t0 = time.monotonic()
        os.kill(run.proc.pid, sig)
        if sig == signal.SIGHUP:
            assert run.wait(60) == 1
        end = time.monotonic() + 60
        while time.monotonic() < end and not all((run.run_dir / names.cleanup(r)).exists() for r in range(3)):
            time.sleep(0.2)
        took = time.monotonic() - t0
    finally:
        kill_tree_by_session(run.proc)
    recs = failures(run.run_dir)
    assert sorted(recs) == [0, 1, 2] and took < 30, (recs, took)
    want = "received SIGTERM" if sig == signal.SIGHUP else "launcher"
    assert any(want in r["cause"] for r in recs.values()), recs
    for r in range(3):
        assert read(run.run_dir, names.cleanup(r))["outcome"] == "failure"
        assert recs[r]["kind"] in ("signal", "peer_failure") and recs[r]["writer"] == "agent", recs[r]
        if recs[r]["cause"].startswith("received SIGTERM"):  # not the launcher's pipe: a signal, as a field
            assert recs[r]["signal"] == "SIGTERM", recs[r]
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)


def test_gym_agent_help_hides_the_launcher_fd() -> None:
    out = subprocess.run([str(BIN / "gym-agent"), "--help"], capture_output=True, text=True, check=True).stdout
    assert "--launcher-fd" not in out


def cmdline(proc: object) -> str:
    import psutil

    try:
        return " ".join(proc.cmdline())  # type: ignore[attr-defined]
    except psutil.Error:
        return ""


def test_hung_agent_is_fenced_by_its_reaper(tmp_path: Path) -> None:
    """Defect 9: SIGSTOP of the driver node's agent. Without anyone resuming or killing it, its
    reaper fences the node within heartbeat_timeout: the driver stops, the records say why."""
    import psutil

    hb_timeout = 4.0
    spec = small_spec(ray=False, replicas=3, driver=SLEEPY, heartbeat_timeout=hb_timeout)
    run = launch_local(tmp_path, spec, uid("fence"))
    try:
        for r in range(3):
            wait_phase(run.run_dir, r, "driver", 60)
        victim = int(read(run.run_dir, names.address(0))["pid"])
        # The phase is recorded as it begins: on a loaded machine the driver may be started later.
        end = time.monotonic() + 30
        drivers: list[psutil.Process] = []
        while not drivers and time.monotonic() < end:
            drivers = [c for c in psutil.Process(victim).children() if "time.sleep(60)" in cmdline(c)]
            time.sleep(0.1)
        assert len(drivers) == 1
        os.kill(victim, signal.SIGSTOP)
        t0 = time.monotonic()
        gone, _ = psutil.wait_procs(drivers, timeout=hb_timeout + 20)
        took = time.monotonic() - t0
        assert gone, "the hung agent's driver kept running"
        assert run.wait(60) == 1
    finally:
        kill_tree_by_session(run.proc)
        try:  # a failing run of this test must not leave the stopped agent behind
            os.kill(victim, signal.SIGKILL)
        except (ProcessLookupError, NameError):
            pass
        for d in drivers if "drivers" in locals() else ():
            try:
                d.kill()
            except psutil.Error:
                pass
    assert took < hb_timeout + 15, took
    rec = read(run.run_dir, names.failure(0))
    assert rec["writer"] == "reaper" and rec["kind"] == "agent_died" and "fenced" in rec["cause"], rec
    cleanup = read(run.run_dir, names.cleanup(0))
    assert cleanup["writer"] == "reaper" and cleanup["leftover_pids"] == []
    assert [g["name"] for g in cleanup["groups"]] == ["driver"]
    assert_artifacts_valid(run.run_dir)
    audit(run.run_dir, verdict="fail", rank=0, kind="agent_died")
    assert_nothing_left(run.run_dir)


def test_reaper_writes_the_failure_record_before_stopping_groups(tmp_path: Path) -> None:
    """Defect 10: SIGKILL of the driver node's agent while its driver ignores SIGTERM (a full
    teardown_grace to stop): the reaper's failure record comes first, the cleanup record after."""
    stubborn = (
        'command = ["python", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
        'time.sleep(60)"]'
    )
    run = launch_local(tmp_path, small_spec(ray=False, replicas=2, driver=stubborn), uid("first"))
    try:
        for r in range(2):
            wait_phase(run.run_dir, r, "driver", 60)
        time.sleep(1.5)  # the driver's interpreter has started and ignores SIGTERM by now
        killed_at = time.time()
        os.kill(int(read(run.run_dir, names.address(0))["pid"]), signal.SIGKILL)
        assert run.wait(60) == 1
        wait_for_file(run.run_dir / names.cleanup(0), 20)  # the reaper outlives the launcher's wait
    finally:
        kill_tree_by_session(run.proc)
    rec, cleanup = read(run.run_dir, names.failure(0)), read(run.run_dir, names.cleanup(0))
    assert rec["writer"] == "reaper" and cleanup["writer"] == "reaper"
    assert rec["written_at"] - killed_at < 2.0, rec["written_at"] - killed_at  # grace is 4 s
    assert cleanup["written_at"] - rec["written_at"] > 3.0
    assert cleanup["groups"][0]["how"] == "sigkill" and cleanup["leftover_pids"] == []
    audit(run.run_dir, verdict="fail", rank=0, kind="agent_died")
    assert_nothing_left(run.run_dir)


ESCAPING_DRIVER = (
    'command = ["python", "-c", "import subprocess, time; '
    "subprocess.Popen(['setsid', 'sleep', '300']); time.sleep({sleep}); raise SystemExit({code})\"]"
)


def _escaped(run_dir: Path) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get("GYM_RUN_DIR") == str(run_dir) and p.info["cmdline"][:2] == ["sleep", "300"]:
            out.append(p.pid)
    return out


@pytest.mark.parametrize("how", ["driver_fails", "agent_killed"])
def test_setsid_grandchild_of_the_driver_does_not_escape(tmp_path: Path, how: str) -> None:
    """Defect 8: the driver starts `setsid sleep 300` (a new session). Whether the agent tears
    down itself or is SIGKILLed (its reaper cleans up), the grandchild is killed and recorded;
    a cleanup record never says `leftover_pids: []` while it runs."""
    driver = ESCAPING_DRIVER.format(sleep=3 if how == "driver_fails" else 60, code=1)
    run = launch_local(tmp_path, small_spec(ray=False, replicas=2, driver=driver), uid("setsid"))
    try:
        for r in range(2):
            wait_phase(run.run_dir, r, "driver", 60)
        end = time.monotonic() + 20
        while not _escaped(run.run_dir) and time.monotonic() < end:
            time.sleep(0.2)
        assert _escaped(run.run_dir), "the driver never started its grandchild"
        if how == "agent_killed":
            time.sleep(2.5)  # one scan of the supervisor: the reaper has been told
            os.kill(int(read(run.run_dir, names.address(0))["pid"]), signal.SIGKILL)
        assert run.wait(60) == 1
        wait_for_file(run.run_dir / names.cleanup(0), 20)
    finally:
        kill_tree_by_session(run.proc)
    left = _escaped(run.run_dir)
    for pid in left:  # never leak into other tests; the assertion below fails this one
        os.kill(pid, signal.SIGKILL)
    cleanup = read(run.run_dir, names.cleanup(0))
    assert not left, (left, cleanup)
    assert "escaped-descendants" in [g["name"] for g in cleanup["groups"]], cleanup
    assert cleanup["leftover_pids"] == []
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)


def test_full_shared_disk_is_named_and_records_land_when_space_returns(tmp_path: Path) -> None:
    """Defect 6: the run directory's filesystem (a real 3 MB tmpfs) fills up mid-run. Each agent
    names its own failed writes (not a healthy peer's silence), keeps its records on the node,
    writes them once space returns, and the audit says "shared filesystem full"."""
    from tests.harness import agent_tmp_root

    with fullfs.mounted(tmp_path / "fs", "3m") as fs:
        spec = tmp_path / "full.toml"
        # The disk fills mid-run, not before: the preflight's disk bound is below the 3 MB tmpfs.
        spec.write_text(
            small_spec(ray=False, replicas=3, driver=SLEEPY) + '\n[launch.preflight]\nmin_free_disk = "1MiB"\n'
        )
        u = uid("full")
        run_dir = fs / "cluster" / u
        cmd = [str(BIN / "gym-launch"), "local", str(spec), "--uuid", u, "--output-root", str(fs)]
        env = {**os.environ, tempdirs.ROOT_ENV: str(agent_tmp_root(tmp_path))}
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        try:
            for r in range(3):
                wait_phase(run_dir, r, "driver", 60)
            filler = fullfs.fill(fs)
            time.sleep(6)  # past heartbeat_timeout / 2: every agent has seen its own writes fail
            kept = agent_tmp_root(tmp_path) / f"gym-records-{u}"
            assert kept.is_dir() and (kept / "failure-0.json").exists(), list(agent_tmp_root(tmp_path).iterdir())
            filler.unlink()  # space comes back: the records must land
            out = proc.communicate(timeout=90)[0]
        finally:
            kill_tree_by_session(proc)
        assert proc.returncode == 1, out[-3000:]
        assert "shared filesystem full" in out
        recs = failures(run_dir)
        assert sorted(recs) == [0, 1, 2], (sorted(recs), out[-8000:])
        assert all(r["kind"] != "peer_silent" for r in recs.values()), recs
        assert any(
            r["kind"] == "run_dir" and "shared filesystem full" in r["cause"] and r["fs_condition"] == "full"
            for r in recs.values()
        ), {r: (d["kind"], d["cause"][:300], d.get("fs_condition"), d.get("reacting_to")) for r, d in recs.items()}
        for r in range(3):
            assert (run_dir / names.cleanup(r)).exists()
        # Every agent meets the full filesystem: which of them the audit names depends on which
        # record landed first once space returned; it is one of those that recorded run_dir.
        roots = {r for r, d in recs.items() if d["kind"] == "run_dir"}
        result = audit(run_dir, verdict="fail", rank=roots, kind="run_dir")
        assert "run_dir.unwritable" in result.codes("error")
        assert_nothing_left(run_dir)


def test_a_run_file_the_full_disk_refuses_is_named_a_full_filesystem(tmp_path: Path) -> None:
    """The full-disk test's flake, made certain: as the driver starts, its node writes the user's
    run file (run-file.toml) into the run directory. A filesystem full at that moment refused it
    with ENOSPC, which reached the agent as an unexpected OSError and was recorded `internal`.
    Here a real tmpfs has room for every record but not for the run file (the spec is ~0.5 MB of
    comments): the failure is the full filesystem, named with the file, and the audit says so."""
    with fullfs.mounted(tmp_path / "fs", "800k") as fs:
        spec = tmp_path / "big.toml"
        padding = ("# " + "x" * 98 + "\n") * 5000  # spec.json holds it once; the run file cannot
        spec.write_text(
            small_spec(ray=False, replicas=2, driver=SLEEPY)
            + '\n[launch.preflight]\nmin_free_disk = "64KiB"\n'
            + padding
        )
        u = uid("runfile")
        run_dir = fs / "cluster" / u
        done = subprocess.run(
            [str(BIN / "gym-launch"), "local", str(spec), "--uuid", u, "--output-root", str(fs)],
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
            check=False,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 1, out[-3000:]
        recs = failures(run_dir)
        said = {r: (d["kind"], d["cause"][:300]) for r, d in recs.items()}
        assert all(d["kind"] != "internal" for d in recs.values()), said
        refused = [r for r, d in recs.items() if d["kind"] == "run_dir" and names.run_file(padding) in d["cause"]]
        assert len(refused) == 1, (said, out[-3000:])
        doc = recs[refused[0]]
        assert doc["fs_condition"] == "full" and "shared filesystem full" in doc["cause"], doc
        assert not (run_dir / names.run_file(padding)).exists()
        result = audit(run_dir, verdict="fail", rank=refused[0], kind="run_dir")
        assert "run_dir.unwritable" in result.codes("error")
        assert_artifacts_valid(run_dir)
        assert_nothing_left(run_dir)


def test_no_writer_overwrites_another_incarnations_record(tmp_path: Path) -> None:
    """Defect 4, the writers' side: failure and cleanup records of another incarnation stay."""
    from agent.coord.durable import RecordKeeper
    from agent.coord.failure_record import write_failure_record
    from agent.ground.failure import Failure
    from schemas import FailureKind, Writer

    run = RunDir.create(tmp_path, "inc", mode=0o750)
    old, new = Writer("f" * 64, 0, "old-incarnation"), Writer("f" * 64, 0, "new-incarnation")
    failure = Failure(kind=FailureKind.SIGNAL, cause="received SIGTERM", phase="driver")
    assert write_failure_record(run, old, 0, failure, "driver")
    assert not write_failure_record(run, new, 0, failure, "driver")
    keeper = RecordKeeper(run, lambda _line: None)
    fields = {"outcome": "failure", "groups": [], "leftover_pids": []}
    assert keeper.write(names.cleanup(0), old, fields)
    assert not keeper.write(names.cleanup(0), new, fields) and not keeper.pending
    for rel in (names.failure(0), names.cleanup(0)):
        assert read(run.path, rel)["incarnation"] == "old-incarnation"
