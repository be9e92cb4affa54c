"""Grade a finished run's saved answers again: the command of a `gym-launch regrade` job.

    python examples/regrade_answers.py OUTPUT/cluster/UUID GRADES.json

Reads the run's driver-result.json (``judge_samples``: verifier, question, reference, answer,
score, as the demo driver saves them), grades every answer again through the judges the agent
started and checked (the registry in this driver's environment), and writes the new grades
beside the old ones to GRADES.json. Exits 1 when a saved sample cannot be graded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent import driver_api
from agent.judges._bindings import bindings_from_registry
from schemas import RunDir, names


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    source, out = Path(argv[0]), Path(argv[1])
    run = RunDir.open(source)
    try:
        result = run.read_json(names.DRIVER_RESULT)
    finally:
        run.close()
    if not result or not result.get("judge_samples"):
        print(f"{source}: no saved judge_samples in {names.DRIVER_RESULT}", file=sys.stderr)
        return 1
    bound = bindings_from_registry(driver_api.registry())
    grades = []
    for saved in result["judge_samples"]:
        judge = bound.get(saved["verifier"])
        if judge is None:
            print(f"verifier {saved['verifier']!r} has no binding in this job's registry", file=sys.stderr)
            return 1
        sample = {"metadata": {"judge_query": saved["question"]}, "label": saved["reference"]}
        grade = judge.grade_sample(sample, saved["answer"], reference=saved["reference"])
        grades.append({**saved, "judge": judge.judge, "regraded_score": grade.score})
        print(f"judge {judge.judge} via {saved['verifier']}: {saved['answer']!r} {saved['score']} -> {grade.score}")
    out.write_text(json.dumps({"source": str(source), "grades": grades}, indent=2))
    print(f"regraded {len(grades)} saved answer(s) of {source.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
