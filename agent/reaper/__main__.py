"""`python -m agent.reaper`: the sidecar's entry point."""

from agent.proc.fast_exit import exit_now
from agent.reaper.sidecar import main

exit_now(main())  # no interpreter finalization: see exit_now
