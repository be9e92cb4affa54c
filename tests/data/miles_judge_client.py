"""A stand-in for the MILES trainer's judge client, built from its contract (never its code).

The facts it follows (open-instruct's `open_instruct/miles`, notes/miles-judges.md):
- the named judges come from ONE environment variable, OI_MILES_JUDGE_REGISTRY: JSON with
  schema_version 1 (anything else is refused), judges with an `endpoint` ending in /v1, rubrics
  {profile, max_response_tokens, temperature}, bindings {judge, rubric};
- graders run in Ray actors on any node and read the variable from their own environment (the
  launcher put it in every node's `ray start` environment);
- one request per grade: POST {endpoint}/chat/completions with {model, messages: [ONE user
  message], temperature, max_tokens, seed} and `Authorization: Bearer EMPTY`; a managed judge's
  request is first counted with POST {base}/tokenize {model, messages, add_generation_prompt: true}
  and refused when count + max_tokens > max_context_length;
- a reply whose finish_reason is not "stop" is an error; the score is read from a SCORE.

As the driver it grades one sample per binding inside an actor on another node than its own, checks
what it got, and writes driver-result.json (the trainer's own records are not what this tests).
Called as the trainer is (`... train RUN_FILE`), it also reads the run file it was handed and
reports its digest and the trainer's sections.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tomllib
import urllib.request

import ray

from agent import driver_api

REGISTRY_ENV = "OI_MILES_JUDGE_REGISTRY"  # the trainer's spelling, on purpose: this is its contract
QUESTION = "What is the capital of France?"
ANSWER = "<think>Paris, surely.</think>The capital of France is Paris."
REFERENCE = "Paris."
# One user message in this project's tagged sections, which the reference judge reads back.
TEMPLATE = (
    "<question>\n{input}\n</question>\n\n"
    "{reference}"
    "<candidate_answer>\n{output}\n</candidate_answer>\n\n"
    "Reply with a reason, then a last line `SCORE: N`, an integer from 0 to 10."
)
SCORE = re.compile(r"^\s*SCORE\s*:\s*(\d+(?:\.\d+)?)\s*$", re.MULTILINE)


def read_registry() -> dict:
    raw = os.environ.get(REGISTRY_ENV)
    if not raw:
        raise RuntimeError("Named judges require the managed launcher (or a resolved registry)")
    value = json.loads(raw)
    if value.get("schema_version") != 1:
        raise ValueError("Unsupported named judge registry")
    return value


def post(url: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer EMPTY", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def grade(registry: dict, verifier: str) -> dict:
    binding = registry["bindings"][verifier]
    service, rubric = registry["judges"][binding["judge"]], registry["rubrics"][binding["rubric"]]
    answer = ANSWER.split("</think>", 1)[-1].strip()  # the answer after the reasoning block
    reference = (
        ""
        if rubric["profile"].endswith("general-quality")
        else f"<reference_answer>\n{REFERENCE}\n</reference_answer>\n\n"
    )
    messages = [{"role": "user", "content": TEMPLATE.format(input=QUESTION, output=answer, reference=reference)}]
    endpoint = service["endpoint"].rstrip("/")
    if not endpoint.endswith("/v1"):
        raise ValueError(f"endpoint {endpoint} does not end in /v1")
    counted = None
    if service["mode"] == "managed":
        tokens = post(
            endpoint.removesuffix("/v1") + "/tokenize",
            {"model": service["model"], "messages": messages, "add_generation_prompt": True},
            service["timeout"],
        )
        counted = tokens["count"]
        if counted + rubric["max_response_tokens"] > service["max_context_length"]:
            raise RuntimeError(f"judge context overflow: {counted} prompt tokens")
    body = {
        "model": service["model"],
        "messages": messages,
        "temperature": rubric["temperature"],
        "max_tokens": rubric["max_response_tokens"],
        "seed": 1,
    }
    payload = post(endpoint + "/chat/completions", body, service["timeout"])
    choice = payload["choices"][0]
    if choice.get("finish_reason") != "stop":
        raise RuntimeError(f"judge response did not complete normally: {choice}")
    found = SCORE.findall(choice["message"]["content"])
    if len(found) != 1:
        raise RuntimeError(f"no unambiguous SCORE in {choice['message']['content']!r}")
    sent = hashlib.sha256(json.dumps(body).encode()).hexdigest()  # the bytes post() sent
    return {"verifier": verifier, "score": float(found[0]) / 10, "prompt_tokens": counted, "request_sha256": sent}


@ray.remote(num_cpus=0)
class Grader:
    def environment(self) -> dict:
        return {
            k: os.environ.get(k)
            for k in (REGISTRY_ENV, "RAY_NODE_IP_ADDRESS", "OI_MILES_REPLICA_RANK", "OI_MILES_REPLICA_COUNT")
        }

    def where(self) -> str:
        return ray.util.get_node_ip_address()

    def grade_all(self) -> list[dict]:
        registry = read_registry()  # this actor's own environment: the raylet's
        return [grade(registry, verifier) for verifier in sorted(registry["bindings"])]


# The run file's sections the trainer reads (the launcher's are its own business).
TRAINER_SECTIONS = ("training", "optimizer", "async", "tracking", "core", "miles")


def read_run_file(argv: list[str]) -> dict | None:
    """`train RUN_FILE`, as the trainer takes it: the file's digest and its trainer sections."""
    if argv[:1] != ["train"] or len(argv) != 2:
        return None
    with open(argv[1], "rb") as f:
        raw = f.read()
    doc = tomllib.loads(raw.decode("utf-8"))
    return {
        "path": argv[1],
        "sha256": hashlib.sha256(raw).hexdigest(),
        "sections": {k: doc[k] for k in TRAINER_SECTIONS if k in doc},
    }


def main(argv: list[str]) -> int:
    run_file = read_run_file(argv)
    mine = read_registry()
    here = os.environ["RAY_NODE_IP_ADDRESS"]
    ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=here, logging_level="ERROR")
    others = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] != here)
    target = others[-1]
    actor = Grader.options(resources={f"node:{target}": 0.001}).remote()
    where, env = ray.get([actor.where.remote(), actor.environment.remote()])
    report = {
        "driver_node": here,
        "actor_node": where,
        "actor_env": env,
        "driver_env_registry": os.environ[REGISTRY_ENV],
        "run_file": run_file,
    }
    if where == here or env["RAY_NODE_IP_ADDRESS"] != where:
        raise RuntimeError(f"the grader is not on another node with its own Ray environment: {report}")
    if json.loads(env[REGISTRY_ENV] or "null") != mine:
        raise RuntimeError(f"the actor's registry differs from the driver's: {report}")
    grades = ray.get(actor.grade_all.remote())
    report["grades"] = grades
    print("MILES-CLIENT " + json.dumps(report, sort_keys=True, default=str), flush=True)
    if len(grades) != len(mine["bindings"]) or not all(0.3 <= g["score"] <= 1 for g in grades):
        raise RuntimeError(f"unexpected grades: {grades}")
    driver_api.write_result(
        optimizer_steps=1, final_loss=0.5, policy_version=1, policy_refreshes=1, judge_replies=len(grades)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
