"""Did the driver use its checkpoint grace? (driver-stop.json, [driver] checkpoint_grace)"""

from __future__ import annotations

from audit.context import AuditContext
from audit.model import Finding
from audit.views import as_num, as_str
from schemas import names


def check_driver_stop(ctx: AuditContext) -> list[Finding]:
    f = names.DRIVER_STOP
    doc = ctx.run.doc(f)
    if doc is None:
        return []
    outcome = as_str(doc.get("outcome"))
    grace = as_num(doc.get("grace_s"))
    after = as_num(doc.get("after_s"))
    reason = as_str(doc.get("reason")) or "?"
    if outcome == "already_exited":
        return []  # the driver's own exit started the stop: there was nothing to ask
    asked = f"the driver was asked to checkpoint ({reason[:200]})"
    if outcome == "exited":
        code = doc.get("exit_code")
        message = f"{asked} and exited after {after or 0:.1f} s of its {grace or 0:g} s grace (exit code {code})"
        return [Finding("info", "driver.checkpoint_grace", message, f)]
    if outcome == "grace_expired":
        message = (
            f"{asked} but did not exit within its {grace or 0:g} s grace: it was stopped, its checkpoint may be partial"
        )
        return [Finding("warning", "driver.checkpoint_grace", message, f)]
    # "asked" and nothing after: the driver's node died while its driver checkpointed.
    return [Finding("warning", "driver.checkpoint_grace", f"{asked}; no outcome was recorded", f)]
