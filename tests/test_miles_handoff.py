"""The MILES hand-off: the trainer's judge client finds our judges through OI_MILES_JUDGE_REGISTRY.

The e2e test runs a MILES run file (tests/data/miles/three-node.toml, unedited) on a real 3-node
local run with a managed reference judge. Its driver is a stand-in for the trainer and its judge
client (tests/data/miles_judge_client.py, built from the trainer's contract), called as the
trainer is, with the run file: it reports the file it was handed, grades one sample per binding
inside a Ray actor on another node, from that actor's own environment (the raylet's), and the run
passes the audit.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import resolved_from_dict
from launch.spec.miles_handoff import judge_registry, openai_base
from schemas import DriverEnv, names
from tests.harness import (
    assert_artifacts_valid,
    assert_nothing_left,
    audit,
    judge_spec,
    kill_tree_by_session,
    launch_local,
    open_instruct_stand_in,
    read,
    uid,
)


def _config(text: str) -> RunConfig:
    return RunConfig.from_spec(resolved_from_dict(tomllib.loads(text)))


def test_the_registry_has_the_trainers_shape_and_only_bound_judges() -> None:
    spare = '\n[judges.spare]\nmode = "external"\nmodel = "m"\nendpoint = "http://10.0.0.9:8000/v1"\n'
    spec = judge_spec().replace('profile = "general-quality"\n', 'profile = "open-instruct/general-quality"\n') + spare
    config = _config(spec)
    reg = judge_registry(config, {"general": "http://127.0.0.3:4000"})
    assert reg["schema_version"] == 1
    assert set(reg["judges"]) == {"general"}  # spare is bound by nothing
    general = reg["judges"]["general"]
    assert general["endpoint"] == "http://127.0.0.3:4000/v1"
    assert (general["mode"], general["model"], general["max_context_length"]) == ("managed", "reference-judge", 8192)
    assert (general["max_concurrent_calls"], general["timeout"]) == (4, 30)
    assert reg["rubrics"]["general-quality"] == {
        "profile": "open-instruct/general-quality",
        "max_response_tokens": 256,
        "temperature": 1.0,
    }
    # This project's own profile keeps its name: the trainer refuses it by name, never grades other words.
    assert reg["rubrics"]["general-quality-ref"]["profile"] == "general-quality-ref"
    assert reg["bindings"] == {
        "general-quality": {"judge": "general", "rubric": "general-quality"},
        "general-quality_ref": {"judge": "general", "rubric": "general-quality-ref"},
    }
    with pytest.raises(KeyError, match="general"):
        judge_registry(config, {})
    assert openai_base("http://h:1/v1/") == openai_base("http://h:1") == "http://h:1/v1"


@pytest.mark.parametrize("var", [DriverEnv.MILES_JUDGE_REGISTRY, DriverEnv.MILES_REPLICA_RANK])
def test_a_spec_may_not_set_what_the_launcher_hands_over(var: str) -> None:
    spec = judge_spec().replace("[driver]\n", f'[driver]\nenv = {{ {var} = "x" }}\n')
    with pytest.raises(SpecError) as exc:
        _config(spec)
    assert f"driver.env.{var}" in str(exc.value) and "MILES launcher" in str(exc.value)


MILES = Path(__file__).resolve().parent / "data" / "miles"
# The MILES launcher's own driver line (launch/spec/_miles.py), the trainer swapped for its stand-in.
TRAINER = 'exec python tests/data/miles_judge_client.py train "$GYM_RUN_FILE"'


@pytest.mark.slow
@pytest.mark.ray
def test_a_miles_file_runs_its_trainer_with_the_file_byte_for_byte_grading_in_a_ray_actor(tmp_path: Path) -> None:
    text = (MILES / "three-node.toml").read_text()
    (tmp_path / "data").mkdir()
    for f in (MILES / "data").iterdir():
        (tmp_path / "data" / f.name).write_bytes(f.read_bytes())
    # The judge is the reference judge (SGLang needs a GPU). The file itself is not edited:
    # overrides are command-line flags.
    args = (
        "--set",
        f"driver.command='{TRAINER}'",
        "--set",
        "judges.general.backend=reference",
        "--set",
        "ray.num_cpus=1",
        "--set",
        "ray.object_store_memory=80000000",
        "--set",
        "launch.coordination.heartbeat_interval=0.5",
        "--set",
        "launch.coordination.poll_interval=0.25",
        "--set",
        "launch.coordination.heartbeat_timeout=30",
        # The file names the cluster's InfiniBand interface (NCCL_SOCKET_IFNAME = "ib"), which this
        # machine has not: the preflight's network check would (rightly) fail the run; here it warns.
        "--set",
        'launch.preflight.network="warn"',
    )
    # The open-instruct profiles' texts come from the installed package: a stand-in one here.
    site = open_instruct_stand_in.write(tmp_path / "site")
    run = launch_local(tmp_path, text, uid("miles"), env=open_instruct_stand_in.env(site), args=args)
    try:
        assert run.wait(240) == 0, run.text[-4000:]
    finally:
        kill_tree_by_session(run.proc)
    d = run.run_dir
    assert_artifacts_valid(d)
    line = next(x for x in (d / names.driver_log(0)).read_text().splitlines() if x.startswith("MILES-CLIENT "))
    report = json.loads(line.split(" ", 1)[1])

    # The trainer was handed the file byte for byte, and reads its own sections from it.
    assert (d / "run-file.toml").read_bytes() == text.encode()
    assert report["run_file"]["sha256"] == hashlib.sha256(text.encode()).hexdigest(), report["run_file"]
    original = tomllib.loads(text)
    sections = {k: original[k] for k in ("training", "optimizer", "async", "tracking", "core", "miles")}
    assert report["run_file"]["sections"] == json.loads(json.dumps(sections, default=str))
    rubric = read(d, names.REGISTRY)["rubrics"]["quality"]
    assert rubric["profile"] == "open-instruct/general-quality" and rubric["template"] == open_instruct_stand_in.QUALITY
    assert rubric["digest"] == rubric["pinned"] == open_instruct_stand_in.sha256(open_instruct_stand_in.QUALITY)

    addresses = {read(d, names.address(r))["address"]: r for r in range(3)}
    # The grader ran on another node, with that node's own Ray environment (not the driver's).
    actor, env = report["actor_node"], report["actor_env"]
    assert actor != report["driver_node"] and env["RAY_NODE_IP_ADDRESS"] == actor
    assert env["OI_MILES_REPLICA_RANK"] == str(addresses[actor]) and env["OI_MILES_REPLICA_COUNT"] == "3"
    registry = json.loads(env["OI_MILES_JUDGE_REGISTRY"])
    assert registry == json.loads(report["driver_env_registry"])
    # Every endpoint handed out is the judge's gateway (on the judge's node, rank 2).
    gateway = read(d, names.gateway_record("general"))
    assert gateway["rank"] == 2 and gateway["upstream"] == read(d, names.judge_endpoint("general", 2))["endpoint"]
    assert read(d, names.REGISTRY)["judges"]["general"]["endpoint"] == gateway["endpoint"]
    assert registry["judges"]["general"]["endpoint"] == openai_base(gateway["endpoint"])
    graded = {g["verifier"]: g for g in report["grades"]}
    assert set(graded) == {"general-quality", "general-quality_ref"}
    assert all(g["prompt_tokens"] > 0 for g in graded.values())  # a managed judge's /tokenize was asked
    # The gateway passed the actor's requests on byte for byte, and the canaries marked as such.
    lines = [json.loads(x) for x in (d / names.gateway_log("general")).read_text().splitlines()]
    chats = [x for x in lines if x["generation"]]
    ours = [x for x in chats if not x["canary"]]
    assert sorted(x["request_sha256"] for x in ours) == sorted(g["request_sha256"] for g in report["grades"])
    assert len(chats) - len(ours) == 12  # 2 bindings x 3 repetitions x good and bad
    assert_nothing_left(d)
    result = audit(d, verdict="pass")
    assert result.judge_replies is not None and result.judge_replies["judges"]["general"]["gateway_replied"] == 2
