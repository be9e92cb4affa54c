"""Supervises this replica's process groups from a thread that does no shared-filesystem I/O.

A hard NFS mount can block any thread that touches it; the thread that notices a dead child and
kills the others must not be one of those (docs/runtime-notes.md, "Shared filesystems").
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agent.ground.failure import Failure, FailureSignal
from agent.ground.reaper_channel import MARK_ENV, ReaperChannel
from agent.proc.procgroup import ProcessGroup, StopRecord, escaped_descendants, kill_escaped
from agent.proc.wakeup import Wakeup
from schemas import FailureKind

__all__ = ["ExitPolicy", "FALLBACK_POLL_S", "STRAY_SCAN_S", "Supervisor", "child_env", "log"]

log = logging.getLogger(__name__)

STRAY_SCAN_S = 2.0  # how often escaped descendants are looked for (and told to the reaper)
FALLBACK_POLL_S = 0.1  # how often children are looked at where pidfds are unsupported


@dataclass(frozen=True)
class ExitPolicy:
    """What a child's exit means: `fail` (kind, log) or a callback (the driver)."""

    kind: FailureKind
    log: str | None
    on_exit: Callable[[int], None] | None = None
    judge: str | None = None  # the managed judge this child is (the failure record names it)


class Supervisor:
    def __init__(
        self,
        signal: FailureSignal,
        grace: float,
        reaper: ReaperChannel,
        phase: Callable[[], str],
        spare: tuple[int, ...] = (),
        mark: str = "",
    ) -> None:
        self.mark = mark  # the agent's incarnation, in every child's environment (MARK_ENV)
        self.spare = set(spare)  # our own helpers (the reaper): never swept as escaped descendants
        self.signal = signal
        self.grace = grace
        self.reaper = reaper
        self._phase = phase
        self._groups: list[tuple[ProcessGroup, ExitPolicy]] = []
        self._lock = threading.Lock()
        self._stopped: list[StopRecord] | None = None
        self._stop_lock = threading.Lock()
        self._halt = threading.Event()
        self._before_stop: list[Callable[[], None]] = []
        self._wake = Wakeup()
        signal.on_trip(self._wake.set)
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_fd: int | None,
        policy: ExitPolicy,
        term_leader_only: bool = False,
        shell: bool = False,
        cwd: str | None = None,
    ) -> ProcessGroup:
        with self._lock:
            if self._stopped is not None or self.signal.is_set():
                raise RuntimeError("not starting a child while stopping")
            if self.mark:
                env = {**env, MARK_ENV: self.mark}
            group = ProcessGroup(
                name, argv, env=env, log_fd=log_fd, term_leader_only=term_leader_only, shell=shell, cwd=cwd
            )
            self._groups.append((group, policy))
        self._wake.set()  # watch its pidfd from now on
        self.reaper.group(name, group.session)
        return group

    def set_policy(self, group: ProcessGroup, policy: ExitPolicy) -> None:
        """Replace a group's exit policy (a Ray start leaves probation once it survived)."""
        with self._lock:
            self._groups = [(g, policy if g is group else p) for g, p in self._groups]
            exited = group.stopping and group.poll() is not None
        if exited:  # it exited while still on probation, after the caller's last look
            self._exited(group, policy, group.poll())

    def _exited(self, group: ProcessGroup, policy: ExitPolicy, code: int | None) -> None:
        """A supervised child ended on its own: that is this replica's failure."""
        self.signal.trip(
            Failure(
                kind=policy.kind,
                cause=f"{group.name} (pid {group.pid}) exited with code {code} during {self._phase()}",
                phase=self._phase(),
                log=policy.log,
                exit_code=code,
                child=group.name,
                judge=policy.judge,
            )
        )

    def _tell_reaper_strays(self, known: set[int]) -> None:
        """A setsid descendant is outside every session the reaper sweeps: name it to the reaper
        (with its start time, so a reused pid is never killed) in case we are SIGKILLed."""
        with self._lock:
            sessions = {g.session for g, _ in self._groups}
        for proc in escaped_descendants(sessions, self.spare):
            if proc.pid in known:
                continue
            known.add(proc.pid)
            try:
                self.reaper.stray(proc.pid, proc.create_time())
            except Exception:  # noqa: BLE001 - it may be gone already
                pass

    def _watch(self) -> None:
        """Sleep until something happens: a child exits (its pidfd becomes readable), the
        failure signal trips, a group is added, or the next escaped-descendant scan is due.
        Without pidfds (Linux < 5.3) it falls back to looking every FALLBACK_POLL_S."""
        strays: set[int] = set()
        next_scan = 0.0
        try:
            while not self._halt.is_set():
                with self._lock:
                    groups = list(self._groups)
                if groups and time.monotonic() >= next_scan:
                    self._tell_reaper_strays(strays)
                    next_scan = time.monotonic() + STRAY_SCAN_S
                self._check_exits(groups)
                if self.signal.is_set():
                    self.stop_all()
                    return
                live = [g for g, _ in groups if not g.stopping]
                fds = [g.pidfd for g in live if g.pidfd is not None]
                timeout = max(0.0, next_scan - time.monotonic()) if groups else None
                if len(fds) < len(live):
                    timeout = FALLBACK_POLL_S if timeout is None else min(timeout, FALLBACK_POLL_S)
                self._wake.wait(timeout, fds)
        finally:
            with self._lock:
                for g, _ in self._groups:
                    g.close_pidfd()

    def _check_exits(self, groups: list[tuple[ProcessGroup, ExitPolicy]]) -> None:
        for group, policy in groups:
            if group.stopping:
                group.close_pidfd()
                continue
            code = group.poll()
            if code is None:
                continue
            group.close_pidfd()
            if policy.on_exit is not None:
                group._stopping = True  # handled: report once
                policy.on_exit(code)
                continue
            self._exited(group, policy, code)

    def before_stop(self, hook: Callable[[], None]) -> None:
        """Run `hook` once, first thing in stop_all, while every child still runs, after the hooks
        added before it: a hang's stacks (agent/stacks/), then the driver's checkpoint grace
        (agent/lifecycle/_driver.py). Concurrent stop_all callers wait for them."""
        self._before_stop.append(hook)

    def groups(self) -> list[tuple[str, int]]:
        """(name, session) of every group started, oldest first."""
        with self._lock:
            return [(g.name, g.session) for g, _ in self._groups]

    def stop_all(self) -> list[StopRecord]:
        """Stop every group, newest first. Idempotent; concurrent callers wait for the first."""
        with self._stop_lock:
            if self._stopped is not None:
                return self._stopped
            hooks, self._before_stop = self._before_stop, []
            for hook in hooks:
                try:
                    hook()
                except Exception:  # noqa: BLE001 - a failed hook must never keep the children alive
                    log.exception("a stop hook failed; going on with the stop")
            with self._lock:
                groups = [g for g, _ in reversed(self._groups)]
            # Stop in parallel: Ray's graceful stop takes seconds, and judges need not wait for it.
            threads = []
            results: dict[int, StopRecord] = {}

            def _one(i: int, g: ProcessGroup) -> None:
                results[i] = g.stop(self.grace)

            for i, g in enumerate(groups):
                t = threading.Thread(target=_one, args=(i, g), daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
            records = [results[i] for i in range(len(groups))]
            # A descendant that called setsid left its group's session; as our subreaper-adopted
            # child (or still a descendant) it is found here, and its kill is on the record.
            escaped = kill_escaped({g.session for g in groups}, self.spare)
            if escaped is not None:
                records.append(escaped)
            self._stopped = records
            return self._stopped

    def halt(self) -> None:
        self._halt.set()
        self._wake.set()

    def finish_reaper(self) -> None:
        """Everything is cleaned and recorded: the reaper may exit without acting."""
        self.reaper.done()


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment for a child: ours without our CUDA mask (each child gets its own devices),
    our interpreter's bin first on PATH (so `python` in a driver command is ours), then `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env
