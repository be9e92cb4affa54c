"""Heartbeats, peer watching and failure discovery through the run directory.

Rules (docs/runtime-notes.md, "Liveness"):
- clock skew: a peer's heartbeat is aged by THIS agent's monotonic clock since it last saw the
  peer's sequence number change; no two hosts' wall clocks are ever compared;
- O(N): each agent writes its own heartbeat and reads only its K ring successors' (K = 2), and
  lists the small `failures/` directory once per poll interval: O(N) operations per interval for
  the whole cluster instead of every node reading every heartbeat;
- NFS: peers' state is read by opening and reading content, new failure records are found by
  listing a directory (no exists(), no mtimes);
- one bad read (partial JSON, EACCES, ESTALE) is retried and never by itself fails the run.
A failure record reaches every agent within one poll interval; on a local filesystem inotify
(agent/coord/_dirwatch.py) wakes the loop within milliseconds. Between rounds the thread sleeps in one
poll(2) on that descriptor and a wake pipe: no other timer, no helper thread. A failure rung on
the doorbell (agent/coord/doorbell.py) gets the same reaction as a listed record (`_react`).

Liveness beside the files: a watched peer's `alive` beacons on the doorbell (agent/coord/doorbell.py)
keep it alive while its heartbeat file does not change - its mount stalled, or our view of the
file lags. Such a peer is ridden out up to fs_stall_timeout (its own stall watch names the stall
first); past that the run fails as fs_stall, never as a silent rank. While every watched peer's
beacons arrive the doorbell is known to work, so the files are only the backstop: failures/ is
listed once per heartbeat interval instead of every poll interval, and a peer's heartbeat file is
read every heartbeat_timeout / 2 instead of every interval (files-only runs poll as before).

A frozen node (kernel hang, power loss, a SIGSTOPped agent) stops both signals at once. A watched
peer whose beacons, once seen, have stopped for beacon_timeout AND whose heartbeat file has not
changed for as long has failed (peer_silent: "no beacon and no heartbeat for N s"), in seconds
instead of heartbeat_timeout. Either signal alone keeps it alive (a stalled filesystem still
beacons, a lost network path still writes files): heartbeat_timeout stays the backstop. While a
beacon is late the loop wakes every poll interval and reads that peer's file; a beacon's heartbeat
seq says whether the file moved since it, so a file read rarely while beacons flowed is not taken
for a live one. A pause of this agent itself (a loaded host) is ridden out, not blamed on peers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from agent.coord._dirwatch import DirWatch
from agent.coord.doorbell_msg import Notice, NoticeType, Ring
from agent.coord.heartbeat_age import HeartbeatAge
from agent.ground import clock
from agent.ground.failure import Failure, FailureSignal
from agent.proc.wakeup import Wakeup
from schemas import FailureKind, RunDir, Writer, names, records
from schemas.safe_io import Sync

__all__ = [
    "FOLLOW_HOPS",
    "FsTimer",
    "Liveness",
    "RING_WATCHERS",
    "StallWatch",
    "WARNING_LEAF",
    "log",
    "watched_peers",
    "watchers_of",
]

WARNING_LEAF = names.leaf(names.WALLTIME_WARNING)

log = logging.getLogger(__name__)
_T = TypeVar("_T")
RING_WATCHERS = 2
FOLLOW_HOPS = 3  # how far a reaction's record is followed to the failure it names


@dataclass(frozen=True)
class PeerFailure:
    """A peer's failure as this agent learns of it, from its record or its doorbell ring."""

    kind: str | None
    cause: str | None
    incarnation: str | None


def watched_peers(rank: int, count: int, k: int = RING_WATCHERS) -> tuple[int, ...]:
    """The ranks this agent watches: its next k successors on the ring of ranks."""
    return tuple((rank + i) % count for i in range(1, min(k, count - 1) + 1))


def watchers_of(rank: int, count: int, k: int = RING_WATCHERS) -> tuple[int, ...]:
    """The ranks that watch this one (its k predecessors): where its alive beacons go."""
    return tuple((rank - i) % count for i in range(1, min(k, count - 1) + 1))


@dataclass
class _PeerView:
    age: HeartbeatAge  # how long its heartbeat file has stood still (the rule its reaper applies too)
    read_at: float | None = None  # when its heartbeat file was last read
    beacon_at: float | None = None  # when its last alive beacon arrived
    beacon_seq: int = 0  # the heartbeat seq that beacon carried
    beacon_fs_busy: float = 0.0  # how long its filesystem call had hung then
    riding: bool = False  # said once per episode: its file is still, its beacons arrive
    late_said: bool = False  # said once per episode: its beacons stopped, its file is watched closely


class FsTimer:
    """The liveness thread's shared-filesystem calls, timed. What runs since when is read by the
    stall watch (another thread, no I/O of its own); the longest call since the last look is how
    the loop knows that a stall kept it from seeing its peers."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.busy: tuple[float, str] | None = None  # (started, what) of the call in progress
        self.slowest: tuple[float, str] | None = None  # (seconds, what) since take_slowest()

    def call(self, what: str, fn: Callable[[], _T]) -> _T:
        start = self.now()
        self.busy = (start, what)
        try:
            return fn()
        finally:
            took = self.now() - start
            self.busy = None
            if self.slowest is None or took > self.slowest[0]:
                self.slowest = (took, what)

    def take_slowest(self) -> tuple[float, str] | None:
        out, self.slowest = self.slowest, None
        return out


class StallWatch(threading.Thread):
    """Fails the run with fs_stall when one shared-filesystem call of the liveness loop has not
    returned for fs_stall_timeout. A thread of its own because the loop itself is the one stuck;
    it does no I/O and wakes a few times per bound."""

    def __init__(
        self, timer: FsTimer, timeout: float, signal: FailureSignal, phase: Callable[[], str], where: str
    ) -> None:
        super().__init__(name="fs-stall-watch", daemon=True)
        self.timer, self.timeout, self.signal, self.phase, self.where = timer, timeout, signal, phase, where
        self.halt = threading.Event()

    def run(self) -> None:
        every = max(0.25, min(self.timeout / 4, 30.0))
        while not self.halt.wait(every):
            busy = self.timer.busy
            if busy is None or self.signal.is_set():
                continue
            stalled = self.timer.now() - busy[0]
            if stalled > self.timeout:
                self.signal.trip(
                    Failure(
                        kind=FailureKind.FS_STALL,
                        cause=f"the shared filesystem has not answered for {stalled:.0f}s ({busy[1]} in "
                        f"{self.where}; fs_stall_timeout {self.timeout:g}s)",
                        phase=str(self.phase()),
                    )
                )


class Liveness(threading.Thread):
    """Runs beside the lifecycle; trips the FailureSignal on a peer failure or silence."""

    def __init__(
        self,
        run: RunDir,
        writer: Writer,
        rank: int,
        count: int,
        *,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        poll_interval: float,
        signal: FailureSignal,
        phase: Callable[[], str],
        now: Callable[[], float] = clock.mono,
        local_events: bool = True,
        fs_stall_timeout: float | None = None,
        completed: threading.Event | None = None,
        beacon_timeout: float = 0.0,
    ) -> None:
        super().__init__(name=f"liveness-{rank}", daemon=True)
        self.run_dir = run
        self.writer = writer
        self.rank = rank
        self.count = count
        self.hb_interval = heartbeat_interval
        self.hb_timeout = heartbeat_timeout
        self.poll = poll_interval
        self.signal = signal
        self.phase = phase
        self.now = now  # monotonic; a test passes a fake clock and calls tick() itself
        self.seq = 0
        self._write_failing_since: float | None = None  # our own heartbeat writes fail (disk full)
        self._next_beat: float | None = None
        self._watch: dict[int, _PeerView] = {}
        self._seen_failures: set[str] = set()
        self._watching = threading.Event()
        self._halt = threading.Event()
        self._wakeup: Wakeup | None = None  # created by run(): a Liveness that never runs holds no fds
        self.local_events = local_events  # inotify on failures/ (off: the polling bound of NFS hosts)
        self._dirwatch: DirWatch | None = None
        self.fs = FsTimer(now)
        self.fs_stall_timeout = fs_stall_timeout  # None: no stall watch (unit tests on a fake clock)
        self._stall_watch: StallWatch | None = None
        self._beacons = False  # set_beacons(): watched peers send alive beacons
        # Beacons stopped and the heartbeat file still for this long: a frozen peer (0: files only).
        self.beacon_timeout = beacon_timeout
        self._last_tick: float | None = None  # when tick() last ran: our own pause is not the peers'
        # The walltime warning's failure, as the agent's wiring sees it (a stuck driver makes it a
        # hang); more heartbeat fields (the driver's node: how long without progress). No I/O in either
        # but the one read the walltime hook may do.
        self.on_walltime: Callable[[Failure], Failure] = lambda failure: failure
        self._warned = False  # a peer rang with the walltime warning: this thread handles it as its own
        self.heartbeat_extra: Callable[[], dict[str, Any]] = dict
        # Set when the driver's node sends `complete` (a wake-up for the wait on its ack only).
        self.completed = completed if completed is not None else threading.Event()

    # -- control --------------------------------------------------------------------------------

    def start_watching(self) -> None:
        """Begin aging peers' heartbeats (after rendezvous: before it, the startup deadline rules)."""
        now = self.now()
        self._watch = {
            p: _PeerView(HeartbeatAge(now, self.hb_timeout / 2)) for p in watched_peers(self.rank, self.count)
        }
        self._watching.set()

    def set_beacons(self, on: bool) -> None:
        """Whether the watched peers' doorbells send alive beacons (the doorbell is armed and they
        published a port): without beacons the files are polled as always."""
        self._beacons = on

    def status(self) -> tuple[int, float]:
        """(heartbeat seq, seconds the filesystem call in progress has hung): the beacon's content,
        read by the doorbell thread without any I/O."""
        busy = self.fs.busy
        return self.seq, (self.now() - busy[0]) if busy is not None else 0.0

    def notice_received(self, notice: Notice) -> None:
        """A verified notice from a peer (doorbell thread): a watched peer's beacon, or the
        driver's completion wake-up."""
        if notice.type is NoticeType.COMPLETE:
            self.completed.set()
            return
        view = self._watch.get(notice.sender)
        if view is not None:
            view.beacon_at = self.now()
            view.beacon_seq = notice.hb_seq
            view.beacon_fs_busy = notice.fs_busy

    def corrupt_heartbeats(self) -> dict[int, int]:
        """Watched peers whose heartbeat file read corrupt, and how often (the cleanup record's)."""
        return {p: v.age.corrupt_reads for p, v in self._watch.items() if v.age.corrupt_reads}

    def doorbell_carries(self) -> bool:
        """Every watched peer's beacon arrived within heartbeat_timeout: the doorbell works, the
        files need only be the backstop."""
        if not self._beacons or not self._watching.is_set() or not self._watch:
            return False
        now = self.now()
        return all(v.beacon_at is not None and now - v.beacon_at <= self.hb_timeout for v in self._watch.values())

    def stop_watching(self) -> None:
        """Peers may exit once every replica acknowledged: their silence is no longer a failure."""
        self._watching.clear()

    def stop(self) -> None:
        self._halt.set()
        if self._stall_watch is not None:
            self._stall_watch.halt.set()
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.set()

    def _open_dirwatch(self) -> None:
        if not self.local_events:
            return
        try:
            self._dirwatch = DirWatch.open(str(self.run_dir.path / names.FAILURES_DIR))
        except OSError as exc:
            # Not a problem (polling is the ground truth), but the bound changes: say so in our log.
            log.info("%s; finding failure records by listing every %gs (poll_interval)", exc, self.poll)

    def _close_dirwatch(self) -> None:
        watch, self._dirwatch = self._dirwatch, None
        if watch is not None:
            watch.close()

    def _sleep(self, wakeup: Wakeup, pause: float) -> bool:
        """Sleep up to `pause`, or until a record lands in failures/ (on this host) or stop().
        True when woken by news (a record on this host, stop()), False when the pause ran out."""
        end = time.monotonic() + pause
        while True:
            watch = self._dirwatch
            ready = wakeup.wait(max(0.0, end - time.monotonic()), [watch.fileno()] if watch else [])
            if not ready:
                return False
            if watch is None or watch.new_names(lambda n: not names.is_temp(n)):
                return True
            # Only a writer's temp file appeared: not news yet (its rename will be).

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        wakeup = self._wakeup = Wakeup()
        if self.fs_stall_timeout is not None:
            where = str(self.run_dir.path)
            self._stall_watch = StallWatch(self.fs, self.fs_stall_timeout, self.signal, self.phase, where)
            self._stall_watch.start()
        self._open_dirwatch()
        news = True
        try:
            while not self._halt.is_set():
                if self.signal.is_set():
                    # Stopping: nothing left to watch. Drop the directory watch too: in a failure
                    # wave every peer's record would otherwise still wake us. Keep beating: our
                    # reaper fences an agent whose heartbeat stops (a hang), and a teardown is not one.
                    self._close_dirwatch()
                    now = self.now()
                    if self._next_beat is None or now >= self._next_beat:
                        self._beat()
                        self._next_beat = now + self.hb_interval
                    wakeup.wait(self.poll)
                    continue
                try:
                    pause = self.tick(news)
                except Exception as exc:  # noqa: BLE001 - the liveness thread must never die
                    log.warning("liveness tick failed (%s: %s); retrying", type(exc).__name__, exc)
                    pause = self.poll
                news = self._sleep(wakeup, pause)
        finally:
            self._close_dirwatch()
            wakeup.close()

    def tick(self, news: bool = True) -> float:
        """One round: beat and age the watched peers when a heartbeat is due, then look for
        failure records (`news`: something woke us that a listing may explain). Returns how long
        to sleep before the next round. The thread calls it in a loop; a test calls it directly
        on a fake clock."""
        if self.signal.is_set():
            return self.poll
        if self._warned:
            self._warned = False
            self._walltime_warning()
            return self.poll
        now = self.now()
        self._ride_out_own_pause(now)
        beat = self._next_beat is None or now >= self._next_beat
        if beat:
            self._beat()
            self._ride_out_stall()
            if self._watching.is_set():
                self._check_peers()
            self._next_beat = now + self.hb_interval
        late = self._check_frozen()
        carried = self.doorbell_carries()
        if beat or news or not carried:
            self._check_failures()
        to_beat = max(0.0, (self._next_beat or now) - self.now())
        return to_beat if carried and not late else min(self.poll, to_beat)

    def _ride_out_stall(self) -> bool:
        """A call of ours that took longer than a heartbeat interval means the shared filesystem
        stalled: meanwhile we could see no peer's heartbeat change (and they could not write
        them), so peers are aged from now, not blamed for the stall. True when one was seen."""
        slowest = self.fs.take_slowest()
        if slowest is None or slowest[0] <= self.hb_interval:
            return False
        log.warning(
            "the shared filesystem stalled for %.1fs (%s); peers' heartbeats are aged from now (fs_stall_timeout %ss)",
            slowest[0],
            slowest[1],
            "none" if self.fs_stall_timeout is None else f"{self.fs_stall_timeout:g}",
        )
        now = self.now()
        for view in self._watch.values():
            view.age.changed_at = now
        return True

    def _beat(self) -> None:
        self.seq += 1
        fields = records.heartbeat_fields(
            seq=self.seq,
            phase=str(self.phase()),
            fs_ops={k: int(self.run_dir.ops[k]) for k in ("read", "write", "list")},
            extra=self.heartbeat_extra(),
        )
        try:
            self.fs.call(
                f"writing {names.heartbeat(self.rank)}",
                # Rewritten every interval; a crash makes it worthless anyway: no sync.
                lambda: self.run_dir.write_artifact(names.heartbeat(self.rank), self.writer, fields, sync=Sync.NONE),
            )
            self._write_failing_since = None
        except OSError as exc:
            log.warning("heartbeat write failed (%s: %s)", type(exc).__name__, exc)
            self._own_writes_fail(exc)

    def _own_writes_fail(self, exc: OSError) -> None:
        """Our own writes failing is OUR failure: say so before peers, who only see our silence
        after heartbeat_timeout, blame it on us as a silent (healthy-looking) rank."""
        from agent.coord.durable import describe, fs_condition

        now = self.now()
        if self._write_failing_since is None:
            self._write_failing_since = now
        failing = now - self._write_failing_since
        if failing >= self.hb_timeout / 2:
            cause = (
                f"{describe(exc)} (this agent's heartbeat writes failed for {failing:.1f}s; "
                "free space on, or fix, the run directory's filesystem)"
            )
            self._trip(Failure(kind=FailureKind.RUN_DIR, cause=cause, fs_condition=fs_condition(exc)))

    def _ride_out_own_pause(self, now: float) -> None:
        """This loop did not run for a while (a loaded host, a stopped process, a suspended VM):
        beacons sat in the socket meanwhile and files were not read. Age the peers from now: our
        own pause is not their silence."""
        last, self._last_tick = self._last_tick, now
        if last is None or self.beacon_timeout <= 0 or now - last <= max(self.beacon_timeout / 2, 2 * self.hb_interval):
            return
        log.warning("the liveness loop did not run for %.1fs; peers are aged from now", now - last)
        for view in self._watch.values():
            view.age.changed_at = now
            if view.beacon_at is not None:
                view.beacon_at = now

    def _beacon_late(self, view: _PeerView, now: float) -> bool:
        """Its beacons were seen and have stopped for two intervals: watch its file closely."""
        return (
            self.beacon_timeout > 0
            and self._beacons
            and view.beacon_at is not None
            and now - view.beacon_at > min(self.beacon_timeout, 2 * self.hb_interval)
        )

    def _check_frozen(self) -> bool:
        """Every round: a watched peer whose beacons stopped has its heartbeat file read (once per
        poll interval), and fails once neither signal moved for beacon_timeout. True while some
        watched peer's beacons are late (the loop then wakes every poll interval)."""
        if not self._watching.is_set():
            return False
        late = False
        for peer, view in self._watch.items():
            now = self.now()
            if not self._beacon_late(view, now):
                view.late_said = False
                continue
            late = True
            if view.read_at is not None and now - view.read_at < self.poll:
                continue
            rel = names.heartbeat(peer)
            read = self.fs.call(f"reading {rel}", partial(self.run_dir.read_json_checked, rel))
            if self._ride_out_stall():
                return True  # our own filesystem stalled: no age of this round is the peer's
            now = self.now()
            before, view.read_at = view.read_at, now
            age = view.age
            if age.observe(read, now) and age.seq is not None:
                # When did the file last change? It was read rarely while beacons flowed. A seq its
                # last beacon already carried was written before that beacon; a newer one after it,
                # and after our previous read, but (were the node stopped) within one interval of
                # that beacon: a live peer that lost its network path writes again, which the next
                # reads see. The latest such time is taken, so stillness is never overstated.
                assert view.beacon_at is not None
                if age.seq <= view.beacon_seq:
                    age.changed_at = min(now, view.beacon_at)
                else:
                    age.changed_at = min(now, max(view.beacon_at + self.hb_interval, before or 0.0))
            still = now - max(age.changed_at, view.beacon_at or age.changed_at)
            if still > self.beacon_timeout:
                self._silent(
                    peer,
                    f"rank {peer}: no beacon and no heartbeat for {still:.1f}s (beacon_timeout "
                    f"{self.beacon_timeout:g}s; its last beacon carried heartbeat seq {view.beacon_seq}, "
                    f"its file shows seq {age.seq}){age.describe_corrupt()}",
                )
                return True
            if not view.late_said:
                view.late_said = True
                log.info(
                    "rank %d's beacons stopped %.1fs ago; its heartbeat file is read every %gs (beacon_timeout %gs)",
                    peer,
                    now - (view.beacon_at or now),
                    self.poll,
                    self.beacon_timeout,
                )
        return late

    def _beacon_fresh(self, view: _PeerView, now: float) -> bool:
        return self._beacons and view.beacon_at is not None and now - view.beacon_at <= self.hb_timeout

    def _check_peers(self) -> None:
        for peer, view in self._watch.items():
            now = self.now()
            fresh = self._beacon_fresh(view, now)
            if fresh and view.read_at is not None and now - view.read_at < self.hb_timeout / 2:
                continue  # alive on the doorbell: its file is read only as the backstop
            rel = names.heartbeat(peer)
            read = self.fs.call(f"reading {rel}", partial(self.run_dir.read_json_checked, rel))
            if self._ride_out_stall():
                return  # this round's ages are the stall's, not the peers'
            now = self.now()
            view.read_at = now
            age = view.age
            if read.corrupt and age.corrupt_reads == 0:
                log.warning(
                    "rank %d's heartbeat file holds bytes its agent never writes (another writer, or the storage "
                    "corrupting it): it counts as still until it reads clean for %.1fs",
                    peer,
                    age.distrust,
                )
            if age.observe(read, now):
                if view.riding:
                    view.riding = False
                    log.info("rank %d's heartbeat file changes again", peer)
            elif age.still_for(now) > self.hb_timeout and self._watching.is_set():
                if self._beacon_fresh(view, now):
                    self._ride_out_still_file(peer, view, now)
                    continue
                self._silent(
                    peer,
                    f"rank {peer}'s heartbeat has not changed for {age.still_for(now):.1f}s "
                    f"(heartbeat_timeout {self.hb_timeout:g}s); last seq {age.seq}{age.describe_corrupt()}",
                )

    def _ride_out_still_file(self, peer: int, view: _PeerView, now: float) -> None:
        """A peer alive on the doorbell whose heartbeat file has not changed: its filesystem (or
        our view of it) stalls. Ridden out up to fs_stall_timeout plus one heartbeat_timeout (the
        peer's own stall watch, which names the path, goes first); past it: fs_stall."""
        still = view.age.still_for(now)
        busy = view.beacon_fs_busy
        hung = f"its filesystem call has hung {busy:.0f}s" if busy else "no call of its own reported hanging"
        bound = (self.fs_stall_timeout if self.fs_stall_timeout is not None else 300.0) + self.hb_timeout
        if still > bound:
            cause = (
                f"rank {peer} answers on the doorbell ({hung}, heartbeat seq {view.beacon_seq}) but its "
                f"heartbeat file in {self.run_dir.path} has not changed for {still:.0f}s: the shared "
                f"filesystem does not carry its writes to this host (fs_stall_timeout "
                f"{bound - self.hb_timeout:g}s){view.age.describe_corrupt()}"
            )
            self._trip(Failure(kind=FailureKind.FS_STALL, cause=cause, peers=(peer,)))
            return
        if not view.riding:
            view.riding = True
            log.warning(
                "rank %d's heartbeat file has not changed for %.1fs but it answers on the doorbell (%s); "
                "riding the stall out for up to %.0fs%s",
                peer,
                still,
                hung,
                bound - still,
                view.age.describe_corrupt(),
            )

    def _check_failures(self) -> None:
        if self.signal.is_set():
            return  # already stopping: further records cannot change what we do (and N agents
            # re-reading N records on every peer's write would be O(N^2) work in a failure wave)
        listed = self.fs.call(f"listing {names.FAILURES_DIR}/", lambda: self.run_dir.listdir(names.FAILURES_DIR))
        for name in listed:
            if name in self._seen_failures:
                continue
            if name == WARNING_LEAF:
                self._seen_failures.add(name)
                self._walltime_warning()
                return
            peer = names.rank_in(names.FAILURES_DIR, name)
            if peer is None or peer == self.rank:
                continue
            rec = records.read_failure(self.run_dir.read_json, peer)
            if rec is None:
                continue  # partial or unreadable: seen again next poll
            self._seen_failures.add(name)
            if rec.fingerprint != self.writer.fingerprint:
                continue  # not this run's record
            peer, heard = self._first_cause(rec)
            self._react(peer, heard)
            return

    def _react(self, peer: int, failed: PeerFailure, *, heard: bool = False) -> None:
        """Stop for rank `peer`'s failure: read from failures/, or rung on the doorbell
        (ring_received). One reaction, whichever way it came. A peer's time_limit is the
        scheduler's walltime warning, which concerns this node as much: it stops for the warning
        itself (on_walltime decides what that is here: a stuck driver makes it a hang), from this
        thread (a ring arrives on the doorbell's, which does no I/O)."""
        if failed.kind == FailureKind.TIME_LIMIT:
            if heard:
                self._warned = True
                if self._wakeup is not None:
                    self._wakeup.set()
            else:
                self._walltime_warning()
            return
        self._trip(
            Failure(
                kind=FailureKind.PEER_FAILURE,
                cause=f"rank {peer} failed ({failed.kind}): {failed.cause}",
                reacting_to={"rank": peer, "incarnation": str(failed.incarnation), "kind": str(failed.kind)},
                peers=(peer,),
                reacted_cause=str(failed.cause),
                heard_on_doorbell=heard,
            )
        )

    def ring_received(self, ring: Ring) -> None:
        """A peer rang the doorbell (agent/coord/doorbell.py, verified): react as if its failure
        record had been listed. The ring names the failure itself, not a reaction to it."""
        if self.signal.is_set() or ring.failed_rank == self.rank:
            return
        self._react(ring.failed_rank, PeerFailure(ring.kind, ring.cause, ring.failed_incarnation), heard=True)

    def _walltime_warning(self) -> None:
        """The batch job was warned that its time limit is near (Slurm --signal, the rendered
        script's trap): every agent stops now, the driver within its checkpoint grace."""
        try:
            said = self.run_dir.read_bytes(names.WALLTIME_WARNING)[:200].decode(errors="replace").strip()
        except OSError:
            said = ""
        failure = Failure(
            kind=FailureKind.TIME_LIMIT,
            cause="the scheduler warned that the job's time limit is near"
            + (f" ({names.WALLTIME_WARNING}: {said})" if said else "")
            + "; stopping before it, the driver within its checkpoint grace",
            phase=str(self.phase()),
        )
        try:
            failure = self.on_walltime(failure)
        except Exception as exc:  # noqa: BLE001 - the warning still stops the run
            log.warning("walltime warning: %s: %s", type(exc).__name__, exc)
        self.signal.trip(failure)

    def _trip(self, failure: Failure) -> None:
        """This agent's failure, in the phase it is in now."""
        self.signal.trip(replace(failure, phase=str(self.phase())))

    def _silent(self, peer: int, cause: str) -> None:
        """A watched peer went silent: a reaction naming it, so the audit follows it to that rank."""
        reaction = {"rank": peer, "kind": str(FailureKind.PEER_SILENT)}
        self._trip(Failure(kind=FailureKind.PEER_SILENT, cause=cause, reacting_to=reaction, peers=(peer,)))

    def _first_cause(self, rec: records.FailureRecord) -> tuple[int, PeerFailure]:
        """A record that only reacts to another (peer_failure) is followed to the one it names, a
        few hops at most: in a fast wave the first record listed is often a reaction, and the
        record we write should name the failure itself."""
        peer = rec.rank
        for _ in range(FOLLOW_HOPS):
            target = rec.reacting_to
            if rec.kind != FailureKind.PEER_FAILURE or target is None or target in (self.rank, peer):
                break
            found = records.read_failure(self.run_dir.read_json, target)
            if found is None and rec.reacting_to_kind:
                # Not visible yet (its writer is slower: a killed agent's reaper, a loaded host):
                # the reaction names it (rank, incarnation, kind) and quotes its cause.
                quoted = rec.cause.removeprefix(f"rank {target} failed ({rec.reacting_to_kind}): ")
                return target, PeerFailure(rec.reacting_to_kind, quoted, rec.reacting_to_incarnation)
            if found is None or found.fingerprint != self.writer.fingerprint:
                break
            peer, rec = target, found
        return peer, PeerFailure(rec.kind, rec.cause, rec.incarnation)
