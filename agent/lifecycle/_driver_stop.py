"""The driver's checkpoint grace (``[driver] checkpoint_grace``): before the teardown, the driver is
asked to checkpoint and given up to the grace to exit, while Ray and the judges still run.

On the driver's node the request is ``driver-stop.json`` (its path is the driver's GYM_STOP_FILE):
written when the run starts failing, rewritten with what the driver did. The other nodes keep their
part of the cluster up until the driver's node says the driver is done, or the grace ran out.

Both waits run in the supervisor's thread (it calls them first thing when it stops everything),
which must never block on the shared filesystem: the waits themselves only poll a pid or an event
with a bound, and every run-directory read and write is done by a helper thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agent.ground import clock
from agent.ground.failure import FailureSignal
from agent.proc.procgroup import ProcessGroup
from schemas import RunDir, Writer, names, records

__all__ = ["APPEAR_S", "DriverStop", "EXIT_POLL_S", "PEER_MARGIN_S", "await_driver_node", "log"]

log = logging.getLogger(__name__)

# After the grace, how long a node that does not run the driver still waits for the driver node's
# word (its own record write may lag): a bounded margin, not a second grace.
PEER_MARGIN_S = 5.0
# A request that has not appeared this long after the failure was not written: the driver's node
# failed before its driver ran, or died; nobody is checkpointing.
APPEAR_S = 3.0
EXIT_POLL_S = 0.05


class DriverStop:
    """Ask the local driver to checkpoint and wait for it (the driver's node)."""

    def __init__(
        self,
        run: RunDir,
        writer: Writer,
        signal: FailureSignal,
        grace: float,
        out: Callable[[str], None],
    ) -> None:
        self.run, self.writer, self.signal, self.grace, self.out = run, writer, signal, grace, out

    def _reason(self) -> str:
        failure = self.signal.failure
        return f"{failure.kind}: {failure.cause}"[:2000] if failure is not None else "the agent is stopping"

    def _write(self, outcome: str, exit_code: int | None, after: float | None) -> None:
        fields = records.driver_stop_fields(
            reason=self._reason(), grace_s=self.grace, outcome=outcome, exit_code=exit_code, after_s=after
        )
        try:
            self.run.write_artifact(names.DRIVER_STOP, self.writer, fields)
        except OSError as exc:
            log.warning("could not write %s: %s", names.DRIVER_STOP, exc)

    def wait_for(self, group: ProcessGroup) -> None:
        """Write the request, wait up to the grace for `group` (the driver) to exit, record it."""
        if not self.signal.is_set():
            return  # a success: the driver is done, there is nothing to checkpoint
        code = group.poll()
        if code is not None:
            # The driver ended first (its own failure): nobody to ask; the other nodes need not wait.
            said = threading.Thread(target=self._write, args=("already_exited", code, 0.0), daemon=True)
            said.start()
            said.join(PEER_MARGIN_S)  # the shared filesystem may hang: this thread must not
            return
        t0 = clock.mono()
        done = threading.Event()
        result: dict[str, object] = {}

        def writer() -> None:
            self._write("asked", None, None)
            self.out(f"asked the driver to checkpoint ({names.DRIVER_STOP}); it has {self.grace:g} s to exit")
            done.wait()
            self._write(str(result["outcome"]), result.get("code"), float(result["after"]))  # type: ignore[arg-type]

        thread = threading.Thread(target=writer, name="driver-stop", daemon=True)
        thread.start()
        while code is None and clock.mono() - t0 < self.grace:
            time.sleep(EXIT_POLL_S)
            code = group.poll()
        after = clock.mono() - t0
        result.update(outcome="exited" if code is not None else "grace_expired", code=code, after=after)
        done.set()
        if code is None:
            log.warning("the driver did not exit within its checkpoint grace (%gs); stopping it", self.grace)
        # The outcome reaches the run directory before the rest is stopped, within a bound.
        thread.join(PEER_MARGIN_S)


def await_driver_node(run: RunDir, signal: FailureSignal, grace: float, poll: float) -> None:
    """A node without the driver: keep this node's processes up while the driver checkpoints, until
    driver-stop.json says it is done, none appeared (nobody checkpoints), or the grace ran out."""
    if not signal.is_set():
        return
    t0 = clock.mono()
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            doc = run.read_json(names.DRIVER_STOP)
            waited = clock.mono() - t0
            if doc is None and waited > APPEAR_S + poll:
                break
            if doc is not None and doc.get("outcome") != "asked":
                break
            time.sleep(poll)
        finished.set()

    threading.Thread(target=watch, name="driver-stop-watch", daemon=True).start()
    finished.wait(grace + PEER_MARGIN_S)
    finished.set()
