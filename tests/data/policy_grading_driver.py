"""A driver of an evaluation run: asks the policy service (GYM_POLICY_URL) one question, then grades
its answer through every binding of the registry, as a trainer grades rollouts. It records what it
got in the file named by POLICY_REPLY (the policy's answer, each binding's outcome) and exits 0:
with random weights the judge's replies are not grades, and the run says so in its grades file."""

from __future__ import annotations

import json
import os
import sys
import urllib.request

from agent import driver_api
from agent.judges._bindings import bindings_from_registry
from agent.judges.client import InvalidGrade

QUESTION = "What is the capital of France?"
SAMPLE = {"metadata": {"judge_query": QUESTION}, "label": "Paris."}


def ask(url: str, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 16, "seed": 1}
    request = urllib.request.Request(
        f"{url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


def main() -> int:
    url = os.environ["GYM_POLICY_URL"]
    answer = ask(url, os.environ.get("POLICY_MODEL", "tiny-policy"))
    outcomes = {}
    for verifier, judge in sorted(bindings_from_registry(driver_api.registry()).items()):
        try:
            outcomes[verifier] = f"score {judge.grade_sample(SAMPLE, answer, reference=SAMPLE['label']).score}"
        except InvalidGrade as exc:  # the judge replied, with no grade in it
            outcomes[verifier] = type(exc).__name__
    with open(os.environ["POLICY_REPLY"], "w", encoding="utf-8") as f:
        json.dump({"url": url, "answer": answer, "outcomes": outcomes}, f)
    print(f"policy answered {answer!r}; graded: {outcomes}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
