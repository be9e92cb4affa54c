"""Stacks of the processes an agent supervises: taken before a hang's teardown (stacks-RANK.json),
and on request while the run is healthy (gym-launch stacks). py-spy first, the driver API's
faulthandler fallback where py-spy cannot attach; never local variables."""

from agent.stacks._targets import Target, supervised
from agent.stacks.capture import Capture, StackReason, capture

__all__ = ["Capture", "StackReason", "Target", "capture", "supervised"]
