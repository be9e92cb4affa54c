"""Did the driver use its checkpoint grace? (driver-stop.json, [driver] checkpoint_grace)"""

from __future__ import annotations

from audit._context import AuditContext
from audit._model import Finding
from schemas import names

__all__ = ["check_driver_stop"]


def check_driver_stop(ctx: AuditContext) -> list[Finding]:
    f = names.DRIVER_STOP
    raw = ctx.run.doc(f)
    if raw is None:
        return []  # a driver without checkpoint grace: no record, and its type is not loaded
    from schemas.records import DriverStopRecord

    stop = DriverStopRecord.from_json(raw)
    if stop is None:
        return []
    outcome, grace, after, reason = stop.outcome, stop.grace_s, stop.after_s, stop.reason
    if outcome == "already_exited":
        return []  # the driver's own exit started the stop: there was nothing to ask
    asked = f"the driver was asked to checkpoint ({reason[:200]})"
    if outcome == "exited":
        message = (
            f"{asked} and exited after {after or 0:.1f} s of its {grace or 0:g} s grace (exit code {stop.exit_code})"
        )
        return [Finding("info", "driver.checkpoint_grace", message, f)]
    if outcome == "grace_expired":
        message = (
            f"{asked} but did not exit within its {grace or 0:g} s grace: it was stopped, its checkpoint may be partial"
        )
        return [Finding("warning", "driver.checkpoint_grace", message, f)]
    # "asked" and nothing after: the driver's node died while its driver checkpointed.
    return [Finding("warning", "driver.checkpoint_grace", f"{asked}; no outcome was recorded", f)]
