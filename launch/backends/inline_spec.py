"""The run spec carried inside a job (Beaker, SkyPilot): the spec record as one environment variable
(``GYM_RUN_SPEC_JSON``) beside a command that pins its fingerprint, so every replica loads exactly
these bytes or refuses to start and nothing has to be readable from the submitting machine.
"""

from __future__ import annotations

from launch.backends.base import RenderRequest
from launch.spec.errors import Problem, SpecError
from launch.spec.load import SPEC_JSON_ENV, canonical_json, spec_record

__all__ = ["MAX_INLINE_SPEC", "RESERVED_ENV", "inline_spec"]

# A Linux environment string is at most 128 KiB (MAX_ARG_STRLEN); leave room for the name.
MAX_INLINE_SPEC = 120 * 1024
# Names the job itself sets (or its scheduler sets for each replica): [launch] env/secrets may not.
RESERVED_ENV = (
    SPEC_JSON_ENV,
    "GYM_RUN_SPEC",
    "GYM_REPLICA_RANK",
    "GYM_REPLICA_COUNT",
    "CUDA_VISIBLE_DEVICES",
    "GYM_TEST_REPLICA_ADDRESS",  # agent.coord.identity's loopback test hook: never in a real job
)


def inline_spec(request: RenderRequest, carrier: str, problems: list[Problem]) -> str:
    """The spec record as canonical JSON (``carrier``: what carries it, for the message). Raises
    SpecError with the render's ``problems`` and, when it is too big for one variable, that too."""
    text = canonical_json(spec_record(request.config.spec, request.spec_path))
    if len(text.encode("utf-8")) > MAX_INLINE_SPEC:
        problems = problems + [
            Problem(
                "(spec)",
                f"the run spec is {len(text) // 1024} KiB as JSON; {carrier} carries it in one environment "
                f"variable of at most {MAX_INLINE_SPEC // 1024} KiB: shorten the run file",
            )
        ]
    if problems:
        raise SpecError(problems)
    return text
