"""The reaper sidecar: records (first) and cleans up after an agent that was SIGKILLed, fences a hung one.

`python -m agent.reaper` runs it; the agent talks to it through `agent.ground.reaper_channel.ReaperChannel`.
"""

from agent.reaper._sidecar import main

__all__ = ["main"]
