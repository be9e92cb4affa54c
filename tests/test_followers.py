"""The interactive followers are woken by events (schemas/watch.py): `gym-audit logs --follow`
prints an appended line far sooner than its poll would, `gym-launch status --watch` redraws when
a record lands; both sleep while nothing changes (the kernel's scheduler counters of every
thread of the real process say how often it ran). The poll remains where events are missing
(no watchdog) or blind (a FUSE mount written underneath, as NFS is written from other nodes)."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import names
from schemas.watch import LOCAL_FILESYSTEMS, RunDirWatch, filesystem_type
from tests.harness import BIN
from tests.harness.rundirs import RunBuilder, success

ROOT = Path(__file__).resolve().parents[1]
IDLE_S = 3.0


class Lines:
    """A child's stdout read line by line, with a deadline (never a blocking read)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def next(self, timeout: float) -> str | None:
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def next_of(self, prefix: str, timeout: float) -> str | None:
        """The next line that starts with `prefix` (rank 2's other logs are printed too)."""
        end = time.monotonic() + timeout
        while (line := self.next(max(0.0, end - time.monotonic()))) is not None:
            if line.startswith(prefix):
                return line
        return None


def runs_and_ticks(pid: int) -> tuple[int, int]:
    """(times scheduled, CPU clock ticks) summed over every thread of `pid`."""
    runs = ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                runs += int(fh.read().split()[2])
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError):
            continue  # a thread that just ended
    return runs, ticks


def idle_cost(pid: int, seconds: float = IDLE_S) -> tuple[int, int]:
    r0, t0 = runs_and_ticks(pid)
    time.sleep(seconds)
    r1, t1 = runs_and_ticks(pid)
    return r1 - r0, t1 - t0


def running_run(root: Path) -> RunBuilder:
    """A run whose rank 2 is still going: no cleanup record, its phases file says RUNNING."""
    b = success(root)
    (b.path / names.cleanup(2)).unlink()
    b.phases(2, "driver", state="RUNNING", last="running")
    b.log(names.agent_log(2), "old line\n")
    return b


@pytest.fixture()
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def _start(procs: list[subprocess.Popen[bytes]], argv: list[str]) -> tuple[subprocess.Popen[bytes], Lines]:
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE)
    procs.append(proc)
    return proc, Lines(proc)


def _append(path: Path, text: str) -> float:
    with open(path, "a") as fh:
        fh.write(text)
    return time.monotonic()


def test_logs_follow_prints_a_line_as_it_lands_and_sleeps_while_idle(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    b = running_run(tmp_path / "out")
    log = names.agent_log(2)
    # A 30 s poll: only an event can bring the appended line within the bound below.
    argv = [str(BIN / "gym-audit"), "logs", str(b.path), "--rank", "2", "--follow", "--interval", "30"]
    proc, out = _start(procs, argv)
    assert out.next_of(log, 30) == f"{log}:1:old line"
    time.sleep(1.0)  # started: watchdog's threads are up and blocked
    runs, ticks = idle_cost(proc.pid)
    # A 0.5 s poll runs the main thread at least 6 times in 3 s; blocked threads run never.
    assert runs <= 3 and ticks <= 2, (runs, ticks)
    wrote = _append(b.path / log, "new line\n")
    assert out.next_of(log, 5) == f"{log}:2:new line"
    assert time.monotonic() - wrote < 2.0
    _append(b.path / log, "partial")  # no newline yet: nothing printed
    assert out.next_of(log, 0.5) is None
    _append(b.path / log, " ends here\n")
    assert out.next_of(log, 5) == f"{log}:3:partial ends here"
    b.cleanup(2, "success")  # rank 2 finished: the follower ends by itself
    assert proc.wait(15) == 0


def test_logs_follow_without_watchdog_polls_at_its_interval(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    b = running_run(tmp_path / "out")
    log = names.agent_log(2)
    code = "import sys\nsys.modules['watchdog'] = None\nfrom audit.cli import main\nsys.exit(main())\n"
    argv = [sys.executable, "-c", code, "logs", str(b.path), "--rank", "2", "--follow", "--interval", "0.3"]
    proc, out = _start(procs, argv)
    assert out.next_of(log, 30) == f"{log}:1:old line"
    time.sleep(0.5)
    runs, _ = idle_cost(proc.pid, 1.5)
    assert runs >= 3  # the poll is its only clock
    wrote = _append(b.path / log, "new line\n")
    assert out.next_of(log, 5) == f"{log}:2:new line"
    assert time.monotonic() - wrote < 2.0
    b.cleanup(2, "success")
    assert proc.wait(15) == 0


def test_status_watch_redraws_when_a_record_lands_and_sleeps_until_then(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    b = running_run(tmp_path / "out")
    argv = [str(BIN / "gym-launch"), "status", str(b.path), "--watch", "--json", "--interval", "30"]
    proc, out = _start(procs, argv)
    first = out.next(60)
    assert first is not None and json.loads(first)["outcome"] == "running"
    time.sleep(1.0)
    runs, ticks = idle_cost(proc.pid)
    assert runs <= 3 and ticks <= 2, (runs, ticks)
    _append(b.path / names.agent_log(2), "a log line redraws nothing\n")
    assert out.next(1.0) is None
    t0 = time.monotonic()
    b.phases(2)  # rank 2 succeeded (a record renamed into place)
    b.cleanup(2, "success")
    doc = out.next(10)
    assert doc is not None and json.loads(doc)["outcome"] == "succeeded"
    assert time.monotonic() - t0 < 3.0  # its 30 s refresh would be the only other way
    assert proc.wait(15) == 0


def test_logs_follow_loses_no_line_written_while_it_starts(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The history and the new lines come from one reader: a line appended right after the
    history was printed (before the follower's first wait) is printed once."""
    b = running_run(tmp_path / "out")
    log = names.agent_log(2)
    for attempt in range(3):
        argv = [str(BIN / "gym-audit"), "logs", str(b.path), "--rank", "2", "--follow", "--interval", "30"]
        proc, out = _start(procs, argv)
        assert out.next_of(log, 30) == f"{log}:1:old line"
        _append(b.path / log, f"at once {attempt}\n")
        lines = [out.next_of(log, 5) for _ in range(attempt + 1)]
        assert lines == [f"{log}:{2 + k}:at once {k}" for k in range(attempt + 1)]
        proc.kill()
        proc.wait()


def test_filesystem_type_takes_the_longest_mount_point_and_network_ones_keep_the_poll(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "2 1 0:50 / /shared rw - nfs4 server:/export rw\n"
        "3 2 0:51 / /shared/my\\040runs rw shared:1 - lustre mgs@tcp:/fs rw\n"
        "garbage line\n"
    )
    assert filesystem_type("/shared/x/y", str(info)) == "nfs4"
    assert filesystem_type("/shared/my runs/out", str(info)) == "lustre"
    assert filesystem_type("/sharedother", str(info)) == "ext4"
    assert filesystem_type("/x", str(tmp_path / "missing")) is None
    here = filesystem_type(str(tmp_path))
    with RunDirWatch.start(tmp_path, lambda _rel: True, 0.5) as watch:
        assert watch.events
        assert watch.interval == (10.0 if here in LOCAL_FILESYSTEMS else 0.5)
    remote = RunDirWatch(str(tmp_path), lambda _rel: True, 0.5)
    remote.local = False  # what an NFS mount gives: events on, the poll stays
    remote._open(True)
    try:
        assert remote.events and remote.interval == 0.5
    finally:
        remote.close()


@pytest.fixture()
def fuse_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A FUSE view of a directory: writes made to the directory itself reach the view without
    an inotify event on it, as another node's writes reach an NFS client."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("bindfs") is None:
        pytest.skip("needs root, /dev/fuse and bindfs (apt-get install bindfs)")
    src, view = tmp_path / "src", tmp_path / "view"
    src.mkdir()
    view.mkdir()
    done = subprocess.run(["bindfs", str(src), str(view)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"bindfs mount failed: {done.stderr.strip()}")
    try:
        yield src, view
    finally:
        subprocess.run(["fusermount", "-u", str(view)], check=False, capture_output=True)


def test_logs_follow_on_a_filesystem_written_elsewhere_keeps_polling(
    fuse_mount: tuple[Path, Path], procs: list[subprocess.Popen[bytes]]
) -> None:
    src, view = fuse_mount
    b = running_run(src / "out")
    seen = view / "out" / "cluster" / b.path.name
    assert filesystem_type(str(seen)) not in LOCAL_FILESYSTEMS
    log = names.agent_log(2)
    argv = [str(BIN / "gym-audit"), "logs", str(seen), "--rank", "2", "--follow", "--interval", "0.5"]
    proc, out = _start(procs, argv)
    assert out.next_of(log, 30) == f"{log}:1:old line"
    wrote = _append(b.path / log, "written underneath\n")  # no event reaches the view
    assert out.next_of(log, 5) == f"{log}:2:written underneath"
    assert time.monotonic() - wrote < 3.0  # the poll, not the 10 s safety net of a local disk
    b.cleanup(2, "success")
    assert proc.wait(15) == 0


def test_the_agent_never_imports_watchdog_and_loads_filelock_only_to_choose_ports() -> None:
    code = (
        "import sys\n"
        "import agent.cli, agent.lifecycle.agent, agent.judges.runtime, agent.ray.node, agent.coord.liveness\n"
        "print(sorted(m for m in ('watchdog', 'filelock', 'schemas.watch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"]
