"""A driver that lets credentials reach every writer (issue 47 item 3): it prints them, grades
through its judge with one in the query and the answer (the grade record quotes both, and the
judge's reply), and ends with one in its error. Nothing of it may reach a file of the run."""

from __future__ import annotations

import os
import sys

from agent import driver_api
from agent.judges._bindings import bindings_from_registry

FLAG_VALUE, TOKEN = os.environ["LEAK_FLAG_VALUE"], os.environ["LEAK_TOKEN"]


def main() -> int:
    print(f"starting train.py --api-key {FLAG_VALUE} --lr 3e-4", flush=True)
    print(f"loaded HF_TOKEN={FLAG_VALUE} and {TOKEN}", flush=True)
    driver_api.progress(1)
    sample = {"metadata": {"judge_query": f"What is the capital of France? (key {TOKEN})"}, "label": "Paris."}
    for _verifier, judge in sorted(bindings_from_registry(driver_api.registry()).items()):
        grade = judge.grade_sample(sample, f"Paris. {TOKEN} --password {FLAG_VALUE}", reference="Paris.")
        print(f"graded {grade.score}", flush=True)
    driver_api.progress(2)
    print(f"ValueError: refused token {TOKEN} for --api-key {FLAG_VALUE}", file=sys.stderr, flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main())
