"""This replica's failure record, written the moment the failure signal trips.

From a thread of its own: peers react to the record, so it must not wait for the main thread to
wake and unwind (in a failure wave of hundreds of agents on one host that wait was most of a
record's delay), and a hung shared filesystem must not hold up anything else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agent.coord.durable import RecordKeeper
from agent.coord.failure_record import write_failure_record
from agent.ground.failure import FailureSignal
from agent.lifecycle.init import Joined
from schemas.vocab import PHASE_INIT

__all__ = ["FailureWriter"]


class FailureWriter:
    """Starts writing the record when `signal` trips; the teardown waits for it (join) a while."""

    def __init__(self, joined: Joined, signal: FailureSignal, phase: Callable[[], str]) -> None:
        self.joined = joined
        self.signal = signal
        self.phase = phase
        # Records a full disk refuses: kept node-locally, retried by the teardown.
        self.keeper = RecordKeeper(joined.run, joined.out)
        self._phase_at_trip = PHASE_INIT
        self._thread = threading.Thread(target=self._write, name="failure-record", daemon=True)
        signal.on_trip(self._start)

    def _start(self) -> None:
        self._phase_at_trip = self.phase()
        self._thread.start()

    def _write(self) -> None:
        failure = self.signal.failure
        if failure is not None:  # always: the thread starts only once the signal tripped
            j = self.joined
            write_failure_record(
                j.run, j.writer, j.ident.rank, failure, self._phase_at_trip, self.keeper, started_mono=j.started_mono
            )

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def written(self) -> bool:
        """The record's write is over (it may have been kept locally); False while it runs."""
        return not self._thread.is_alive()
