"""Live stacks on demand: the agent's side of `gym-launch stacks`.

gym-launch writes stack-requests/request-ID.json and rings each agent's doorbell with the request
id (a `stacks` message, agent/coord/doorbell_msg.py); a launcher whose datagrams cannot reach this
node (a login node behind a firewall) is still answered: this thread lists stack-requests/ every
LIST_EVERY_S itself. Each request is answered once, one at a time, with stacks-RANK-ID.json
(py-spy without pausing the processes); gym-launch removes both files once it read the answers.
Nothing else of the run changes, and nothing is answered once the agent is stopping.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from agent.ground.failure import FailureSignal
from agent.proc.supervisor import Supervisor
from agent.stacks._targets import supervised
from agent.stacks.capture import capture
from schemas import RunDir, Writer, names
from schemas.vocab import StackReason

__all__ = ["LIST_EVERY_S", "LiveStacks", "MAX_PROCESSES", "REMEMBERED", "log"]

log = logging.getLogger(__name__)

LIST_EVERY_S = 10.0  # the slow path; the doorbell wakes the thread at once
MAX_PROCESSES = 256
REMEMBERED = 64  # request ids answered (a replayed datagram is not answered twice)


class LiveStacks(threading.Thread):
    def __init__(
        self,
        run: RunDir,
        writer: Writer,
        rank: int,
        supervisor: Supervisor,
        signal: FailureSignal,
        timeout: float,
        local_dir: str | None,
    ) -> None:
        super().__init__(name="live-stacks", daemon=True)
        self.run_dir, self.writer, self.rank = run, writer, rank
        self._supervisor, self._signal = supervisor, signal
        self.timeout, self.local_dir = timeout, local_dir
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._asked: set[str] = set()
        self._lock = threading.Lock()
        self._done: deque[str] = deque(maxlen=REMEMBERED)

    def ask(self, request: str) -> None:
        """The doorbell's thread: a request arrived (no I/O here)."""
        with self._lock:
            self._asked.add(request)
        self._wake.set()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()

    def _is_stopping(self) -> bool:
        return self._halt.is_set() or self._signal.is_set()

    def run(self) -> None:
        while not self._is_stopping():
            woken = self._wake.wait(LIST_EVERY_S)
            self._wake.clear()
            if self._is_stopping():
                return
            with self._lock:
                asked, self._asked = self._asked, set()
            if not woken:
                asked |= self._listed()
            for request in sorted(asked):
                if request in self._done or self._is_stopping():
                    continue
                try:
                    self._answer(request)
                except Exception as exc:  # noqa: BLE001 - a request must never take the agent down
                    log.warning("gym-launch stacks request %s: %s: %s", request, type(exc).__name__, exc)
                self._done.append(request)

    def _listed(self) -> set[str]:
        found = (names.stacks_request_id(leaf) for leaf in self.run_dir.listdir(names.STACK_REQUESTS_DIR))
        return {request for request in found if request is not None}

    def _answer(self, request: str) -> None:
        doc = self.run_dir.read_json(names.stacks_request(request))
        if doc is None or doc.get("fingerprint") != self.writer.fingerprint:
            return  # not (yet) readable, or not this run's: a listing finds it again if it appears
        ranks = doc.get("ranks")
        if isinstance(ranks, list) and self.rank not in ranks:
            return
        targets, more = supervised(self._supervisor.groups(), MAX_PROCESSES)
        taken = capture(
            targets,
            reason=StackReason.REQUEST,
            timeout=self.timeout,
            dump_dir=self.local_dir,
            more=more,
            request=request,
            nonblocking=True,  # the run is healthy: read the processes without pausing them
        )
        if self._is_stopping():
            return
        self.run_dir.write_artifact(names.live_stacks(self.rank, request), self.writer, taken.fields)
        log.info("gym-launch stacks: answered request %s (%d process(es))", request, taken.processes)
