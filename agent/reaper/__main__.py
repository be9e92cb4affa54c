"""`python -m agent.reaper`: the sidecar's entry point."""

import sys

from agent.proc.fast_exit import exit_now
from agent.reaper._sidecar import main
from schemas.errors import GymError

try:
    code = main()
except GymError as exc:  # e.g. a run directory it cannot open: one line in the agent's log, no traceback
    print(f"gym-agent-reaper: error: {exc}", file=sys.stderr, flush=True)
    code = exc.exit_code
exit_now(code)  # no interpreter finalization: see exit_now
