"""A driver that grades GRADES times (default 20) through every binding of its registry and
catches every judge error, as a careless trainer would, then writes driver-result.json and exits
0. The run must still fail when its judge degrades: the agent reads the alarm, not the exit code.

DEGRADED=raise lets JudgeDegraded end the driver (exit 1, its traceback in the log);
DEGRADED=linger catches it and then sleeps a minute before exiting 0, so only the agent's watch
can stop the run in time; DEGRADED=strict lets any judge error end it, as seed 000 asks of a trainer.
RESULT=0 writes no driver-result.json: a benchmark driver of an evaluation run, which trains nothing."""

from __future__ import annotations

import os
import signal
import sys
import time

from agent import driver_api
from agent.judges._bindings import bindings_from_registry
from agent.judges.client import InvalidGrade, JudgeDegraded, JudgeError

SAMPLE = {"metadata": {"judge_query": "What is the capital of France?"}, "label": "Paris."}
ANSWER = "<think>France... its capital.</think>The capital of France is Paris."


def main() -> int:
    count = int(os.environ.get("GRADES", "20"))
    mode = os.environ.get("DEGRADED", "swallow")
    degraded = False
    if mode == "raise":
        # The agent stops the driver (SIGTERM) as soon as it reads the alarm, which the client
        # writes just before it raises: this driver, like a trainer that finishes its step on
        # SIGTERM, lets the exception end it either way, so its log always has the traceback.
        signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    bound = bindings_from_registry(driver_api.registry())
    replies = errors = 0
    for i in range(count):
        for verifier, judge in sorted(bound.items()):
            try:
                grade = judge.grade_sample(SAMPLE, ANSWER, reference=SAMPLE["label"])
            except JudgeError as exc:
                if mode == "strict":
                    raise
                if isinstance(exc, JudgeDegraded):
                    if mode == "raise":
                        raise
                    degraded = True
                errors += 1
                replies += isinstance(exc, InvalidGrade)  # the judge replied: not a grade, still a reply
                print(f"grade {i} via {verifier}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                continue
            replies += 1
            print(f"grade {i} via {verifier}: {grade.score}", flush=True)
    if degraded and mode == "linger":
        print("degraded; lingering", flush=True)
        time.sleep(60)
    if os.environ.get("RESULT", "1") != "0":
        driver_api.write_result(
            optimizer_steps=1, final_loss=0.5, policy_version=1, policy_refreshes=1, judge_replies=replies
        )
    print(f"done: {replies} grades, {errors} judge errors", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
