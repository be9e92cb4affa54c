"""An idle agent waits by events: pidfds, an inotify descriptor, a wake pipe (issue 14, item 3).

Real threads, real child processes, a real directory. Wake-ups are counted from the kernel's
per-thread scheduler statistics (/proc/self/task/TID/schedstat: how many times the thread ran),
so a loop that polled on a timer would fail these tests; how much CPU that costs is measured by
`make soak`, not here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from agent.coord._dirwatch import DirWatch
from agent.coord.liveness import Liveness
from agent.ground.failure import Failure, FailureSignal
from agent.ground.reaper_channel import ReaperChannel
from agent.proc.procgroup import ProcessGroup, descendants, escaped_descendants
from agent.proc.supervisor import ExitPolicy, Supervisor
from agent.proc.wakeup import Wakeup
from schemas import FailureKind, RunDir, Writer, names
from schemas.safe_io import Sync

FP = "e" * 64
ROOT = Path(__file__).resolve().parents[1]


def runs(tid: int) -> int:
    """How many times thread `tid` of this process went to sleep by itself (a wake-up count).

    Voluntary context switches, not schedstat's timeslices: on a loaded machine a thread that woke
    once may be preempted and scheduled again several times, which is the machine's doing, not a
    wake-up of ours."""
    with open(f"/proc/self/task/{tid}/status") as fh:
        for line in fh:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches for thread {tid}")


def failure_fields(cause: str = "boom") -> dict:
    return {
        "kind": "driver_exit",
        "cause": cause,
        "phase": "driver",
        "wall_time": 1.0,
        "monotonic_time": 1.0,
        "reacting_to": None,
    }


def test_wakeup_wakes_a_blocked_waiter_and_reports_ready_fds() -> None:
    w = Wakeup()
    r, wr = os.pipe()
    try:
        threading.Timer(0.05, w.set).start()
        t0 = time.monotonic()
        assert w.wait(30.0, [r]) == set()  # woken by set(), not by the timeout
        assert time.monotonic() - t0 < 5.0
        os.write(wr, b"x")
        assert w.wait(30.0, [r]) == {r}
        assert w.wait(0.0, []) == set()  # the earlier wake was consumed
    finally:
        w.close()
        os.close(r)
        os.close(wr)


def test_dirwatch_reports_renames_in_and_the_caller_filters_temp_names(tmp_path: Path) -> None:
    watch = DirWatch.open(str(tmp_path))
    try:
        (tmp_path / ".failure-1.json.0123456789ab.tmp").write_text("{}")
        assert not watch.new_names(lambda n: not names.is_temp(n))  # only a temp file so far
        os.rename(tmp_path / ".failure-1.json.0123456789ab.tmp", tmp_path / "failure-1.json")
        assert watch.new_names(lambda n: not names.is_temp(n))
        assert not watch.new_names(lambda n: True)  # drained
    finally:
        watch.close()


def test_dirwatch_names_the_reason_when_inotify_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="inotify_add_watch"):
        DirWatch.open(str(tmp_path / "missing"))


def _liveness(tmp_path: Path, poll: float, *, local_events: bool = True) -> tuple[RunDir, Liveness, FailureSignal]:
    run = RunDir.create(tmp_path, "idle", mode=0o750)
    signal = FailureSignal()
    live = Liveness(
        run,
        Writer(FP, 0, "me"),
        0,
        3,
        heartbeat_interval=poll,
        heartbeat_timeout=max(60.0, 3 * poll),
        poll_interval=poll,
        signal=signal,
        phase=lambda: "driver",
        local_events=local_events,
    )
    return run, live, signal


def test_a_record_renamed_in_wakes_the_liveness_loop_long_before_its_poll(tmp_path: Path) -> None:
    run, live, signal = _liveness(tmp_path, poll=60.0)
    live.start()
    try:
        time.sleep(0.3)  # first round done: the loop now sleeps for a minute
        run.write_artifact(names.failure(2), Writer(FP, 2, "p2"), failure_fields())
        assert signal.wait(10.0), "the inotify wake-up did not happen (a 60 s poll would be the only bound)"
        assert signal.failure is not None and signal.failure.reacting_to["rank"] == 2
    finally:
        live.stop()
        live.join(5)


def test_without_local_events_a_record_waits_for_the_next_poll(tmp_path: Path) -> None:
    run, live, signal = _liveness(tmp_path, poll=60.0, local_events=False)
    live.start()
    try:
        time.sleep(0.3)
        run.write_artifact(names.failure(2), Writer(FP, 2, "p2"), failure_fields())
        assert not signal.wait(1.5), "found without inotify before its poll: local_events=False is not honoured"
    finally:
        live.stop()
        live.join(5)
    assert not live.is_alive(), "stop() did not wake the sleeping loop"


def test_an_idle_liveness_loop_wakes_about_once_per_poll(tmp_path: Path) -> None:
    _run, live, _signal = _liveness(tmp_path, poll=1.0)
    live.start()
    try:
        time.sleep(0.5)
        before = runs(live.native_id)
        time.sleep(3.0)
        woke = runs(live.native_id) - before
        assert woke <= 8, f"the liveness thread ran {woke} times in 3 s with a 1 s poll"
    finally:
        live.stop()
        live.join(5)


def _supervisor(signal: FailureSignal) -> Supervisor:
    return Supervisor(signal, 2.0, ReaperChannel(None), lambda: "driver")


def _sleeper(sup: Supervisor) -> ProcessGroup:
    return sup.start(
        "sleeper",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=dict(os.environ),
        log_fd=None,
        policy=ExitPolicy(FailureKind.CHILD_EXIT, None),
    )


def test_an_idle_supervisor_sleeps_and_a_child_exit_wakes_it_at_once() -> None:
    signal = FailureSignal()
    sup = _supervisor(signal)
    try:
        group = _sleeper(sup)
        assert group.pidfd is not None, "no pidfd on this kernel: the supervisor would poll"
        time.sleep(0.5)
        before = runs(sup._thread.native_id)
        time.sleep(1.5)
        woke = runs(sup._thread.native_id) - before
        assert woke <= 3, f"the supervisor thread ran {woke} times in 1.5 s with nothing happening"
        t0 = time.monotonic()
        os.kill(group.pid, 9)
        assert signal.wait(5.0), "the child's death was not noticed"
        assert time.monotonic() - t0 < 1.0
        assert signal.failure is not None and "sleeper" in signal.failure.cause
    finally:
        sup.stop_all()
        sup.halt()


def test_a_trip_wakes_the_supervisor_which_stops_every_group() -> None:
    signal = FailureSignal()
    sup = _supervisor(signal)
    group = _sleeper(sup)
    signal.trip(Failure(kind=FailureKind.SIGNAL, cause="test"))
    sup._thread.join(10)
    assert not sup._thread.is_alive(), "the supervisor did not wake on the trip"
    assert group.poll() is not None, "the trip did not stop the group"


def test_listeners_run_before_waiters_wake_and_see_the_signal_set() -> None:
    signal = FailureSignal()
    seen: list[tuple[str, bool]] = []
    signal.on_trip(lambda: seen.append(("listener", signal.is_set())))
    woke = threading.Event()

    def waiter() -> None:
        signal.wait(30)
        seen.append(("waiter", signal.is_set()))
        woke.set()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.1)
    assert signal.trip(Failure(kind=FailureKind.SIGNAL, cause="x"))
    assert woke.wait(5)
    t.join(5)
    assert seen == [("listener", True), ("waiter", True)]
    late: list[int] = []
    signal.on_trip(lambda: late.append(1))  # registered after the trip: called at once
    assert late == [1]


def test_descendants_come_from_the_kernels_children_lists_and_match_a_full_scan() -> None:
    # This process may have descendants of its own already (an xdist worker's Slurm cluster, from a
    # session fixture), which fork and exit at any time: the scans compare the child's subtree, and
    # escaped_descendants spares them as the agent spares its reaper.
    others = set(descendants(os.getpid()) or ())
    script = "sleep 30 & setsid sleep 30 & wait"
    child = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:

        def settled() -> bool:  # both forked, and the second one has run setsid
            kids = psutil.Process(child.pid).children()
            return len(kids) == 2 and any(os.getsid(k.pid) != child.pid for k in kids)

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not settled():
            time.sleep(0.05)
        ours = descendants(child.pid)
        assert ours is not None, "this kernel has no /proc/PID/task/TID/children"
        full = {p.pid for p in psutil.Process(child.pid).children(recursive=True)}
        assert set(ours) == full
        grandchildren = {p.pid for p in psutil.Process(child.pid).children()}
        assert len(grandchildren) == 2 and grandchildren == set(ours)
        assert grandchildren <= set(descendants(os.getpid()) or ())  # found from this process too
        escaped = {p.pid for p in escaped_descendants({child.pid}, others)}
        setsid = {pid for pid in grandchildren if os.getsid(pid) != child.pid}
        assert escaped == setsid and len(setsid) == 1
    finally:
        for pid in descendants(child.pid) or []:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        child.kill()
        child.wait()


@pytest.mark.parametrize("sync", list(Sync))
def test_every_sync_mode_publishes_the_whole_file_and_leaves_no_temp(tmp_path: Path, sync: Sync) -> None:
    run = RunDir.create(tmp_path, "sync", mode=0o750)
    doc = run.write_artifact(names.failure(1), Writer(FP, 1, "w"), failure_fields("x" * 5000), sync=sync)
    assert run.read_json(names.failure(1)) == doc
    assert not [n for n in os.listdir(run.path / names.FAILURES_DIR) if names.is_temp(n)]


def test_lower_priority_reaches_every_thread_of_the_process() -> None:
    code = (
        "import os, threading, time\n"
        "from agent.proc.cpu_priority import lower_priority\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "lower_priority()\n"
        "nices = [int(open(f'/proc/self/task/{t}/stat').read().rsplit(')', 1)[1].split()[16])\n"
        "         for t in os.listdir('/proc/self/task')]\n"
        "print(len(nices), sorted(set(nices)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split(None, 1) == ["2", "[10]\n"]


def test_exit_now_flushes_what_was_buffered_and_keeps_the_code() -> None:
    code = "import sys\nfrom agent.proc.fast_exit import exit_now\nsys.stdout.write('last words')\nexit_now(3)\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (3, "last words")


def test_an_idle_reaper_and_an_agent_without_judges_import_only_what_they_use() -> None:
    """The heavy imports are loaded where they are used: jsonschema and psutil when the reaper
    acts, httpx (and ssl) only on a node that talks to a judge."""
    code = (
        "import sys\n"
        "import agent.reaper\n"
        "print(sorted(m for m in ('jsonschema', 'psutil', 'httpx') if m in sys.modules))\n"
        "import agent.cli, agent.lifecycle.agent\n"
        "print(sorted(m for m in ('httpx', 'ssl', 'http.server') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[]", "[]"]


def test_a_liveness_holds_descriptors_only_while_it_runs(tmp_path: Path) -> None:
    """Thousands of Liveness objects are built by the audit-scale generator and never run; a
    stopped one must not keep its wake pipe or inotify descriptor either."""
    before = len(os.listdir("/proc/self/fd"))
    run, live, _signal = _liveness(tmp_path, poll=60.0)
    idle = [_liveness(tmp_path / str(i), poll=60.0)[1] for i in range(50)]
    assert len(os.listdir("/proc/self/fd")) - before <= 51 + 1  # their RunDirs' dir fds only
    live.start()
    time.sleep(0.3)
    assert len(os.listdir("/proc/self/fd")) - before >= 51 + 3  # + wake pipe (2) + inotify (1)
    live.stop()
    live.join(5)
    assert len(os.listdir("/proc/self/fd")) - before <= 51 + 1
    del idle
    run.close()
