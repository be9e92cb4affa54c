"""A benchmark command for examples/nemo_gym/cpu_pool.yaml: one question to the judge service, a count
of the Ray cluster's nodes and the judge pool's hosts as driver.env passed them, printed (and kept in
$SMOKE_OUT when set)."""

from __future__ import annotations

import json
import os
import urllib.request

import ray

from schemas import DriverEnv

judge = os.environ[DriverEnv.judge_url("judge")]
body = {
    "model": "reference-judge",
    "messages": [{"role": "user", "content": "Question: What is 2 + 2?\nAnswer: 4\nReference: 4"}],
    "max_tokens": 64,
}
request = urllib.request.Request(
    judge + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
)
reply = json.loads(urllib.request.urlopen(request, timeout=60).read())
ray.init(address=os.environ[DriverEnv.ray_address("cluster")])
nodes = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
ray.shutdown()
facts = {
    "judge_model": reply.get("model"),
    "judge_said": reply["choices"][0]["message"]["content"],
    "ray_nodes": nodes,
    "bench_dir": os.environ.get("NEMO_GYM_BENCH_DIR"),
    "judge_host": os.environ.get("JUDGE_HOST"),  # driver.env: runtime:GYM_POOL_MAIN_NODES
    "judge_url": judge,
}
print("smoke:", json.dumps(facts, sort_keys=True))
if os.environ.get("SMOKE_OUT"):
    with open(os.environ["SMOKE_OUT"], "w") as f:
        json.dump(facts, f)
