"""A driver that grades with plain HTTP, no judge client library: it only knows GYM_JUDGE_URL_<NAME>.

    JUDGE=ext CALLS=3 python tests/data/plain_http_driver.py

Posts CALLS chat completions to the judge's URL, checks each reply, and writes driver-result.json.
Nothing of ours records these grades: only the judge's gateway sees them.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request

from agent import driver_api
from schemas import DriverEnv

QUESTION = "<question>\nWhat is the capital of France?\n</question>\n\n"
ANSWER = "<candidate_answer>\nThe capital of France is Paris.\n</candidate_answer>"


def main() -> int:
    base = os.environ[DriverEnv.judge_url(os.environ.get("JUDGE", "ext"))]
    calls = int(os.environ.get("CALLS", "3"))
    for _ in range(calls):
        body = {
            "model": os.environ.get("MODEL", "judge-model"),
            "messages": [{"role": "user", "content": QUESTION + ANSWER}],
        }
        request = urllib.request.Request(
            base + "/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            reply = json.load(response)
        assert reply["choices"][0]["finish_reason"] == "stop", reply
    driver_api.write_result(
        optimizer_steps=1, final_loss=0.5, policy_version=1, policy_refreshes=1, judge_replies=calls
    )
    time.sleep(float(os.environ.get("LINGER", "0")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
