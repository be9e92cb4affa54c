"""Attempts of a run (resume): join (or start) one attempt of a run in its run directory.

The attempt number is claimed by creating attempts/N/claim.json exclusively (link(2): atomic on
NFSv3+ too). Replicas of one launch carry the same token and join the same attempt; a launch with
another token that finds the number taken is refused before it writes anything. The claimant moves
the previous attempt's files into attempts/N-1/ and then writes attempts/N/ready.json; joiners wait
for it, so no replica of attempt N ever lists a file of attempt N-1. Records of another attempt
that appear later (a straggler, something planted) are ignored by RunDir.read_json.

Two modes (schemas.vocab.ResumeEnv): ``--resume`` (GYM_RESUME=1) joins the attempt of its own
token or starts the next one; ``GYM_RESUME=restart`` is a launch whose scheduler restarts it under
the same token (_decide.py says how the run directory tells a restart from a joiner).

One entry point, `enter_attempt` (_enter.py), which the agent's INIT calls; `_mode.py` reads how this
replica enters (no I/O), `_decide.py` holds the decisions and the restart caps (no I/O), `_files.py`
what they read and write.
"""

from agent.coord.attempts._decide import AttemptRefused, Caps, Timing
from agent.coord.attempts._enter import AttemptEntered, enter_attempt
from agent.coord.attempts._mode import ResumeMode, attempt_token, resume_mode

__all__ = [
    "AttemptEntered",
    "AttemptRefused",
    "Caps",
    "ResumeMode",
    "Timing",
    "attempt_token",
    "enter_attempt",
    "resume_mode",
]
