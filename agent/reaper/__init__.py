"""The reaper sidecar: records (first) and cleans up after an agent that was SIGKILLed, fences a hung one.

`python -m agent.reaper` runs it; the agent talks to it through `ReaperChannel`.
"""

from agent.reaper.sidecar import ReaperChannel, ReaperState, main

__all__ = ["ReaperChannel", "ReaperState", "main"]
