"""The policy service (issue 48, item 2; seed 001): a managed OpenAI-compatible server for the policy,
pinned to a pool, started, gated and stopped by the agents, its URL handed to the driver, which runs on
the policy's first node.

The spec, plan and render cases are pure. The run is real agents on this machine (gym-launch local)
around the SGLang stand-in of tests/stand_in_sglang (a mock: SGLang needs a GPU; it refuses flags the
pinned SGLang lacks and serves the reference server's OpenAI-compatible endpoints), as the engine.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launch.cli import main
from launch.spec import sglang_argv, vllm_argv
from launch.spec.plan import plan as make_plan
from launch.spec.policy_argv import PolicyNode, policy_command
from launch.spec.sglang_argv import argv_flags
from launch.spec.vllm_argv import ENGINE_PYTHON_ENV
from schemas import names, port_grid
from tests.harness import (
    LocalRun,
    assert_artifacts_valid,
    assert_nothing_left,
    failures,
    kill_tree_by_session,
    launch_local,
    read,
    uid,
)
from tests.harness.engines import ENGINE_ENV, require_engine, tiny_model
from tests.harness.specs import judge_tables
from tests.test_pools import config_of, plan_of, problems_of
from tests.test_vllm_argv import _PARSE_SCRIPT as PARSE_SCRIPT

REVISION = "0123456789abcdef0123456789abcdef01234567"
STAND_IN = Path(__file__).parent / "stand_in_sglang"

POLICY = f"""
[policy]
mode = "managed"
backend = "sglang"
model = "my-org/policy-model"
revision = "{REVISION}"
prepared_dir = "/models/policy"
"""

# An evaluation run (no trainer, no rollout engines) of 8-GPU nodes; the policy serves it.
EVALUATION = """
[launch]
gpus_per_replica = 8
node_gpus = 8
[trainer]
nodes = 0
gpus_per_node = 1
[inference]
gpus = 0
[driver]
command = ["python", "bench.py"]
trains = false
"""

# Seed 001's example: the policy over its pool's two nodes (TP 16), the judge on the third.
SEED_001 = f"""
name = "seed001"
{EVALUATION}{POLICY}tensor_parallel_size = 16
node_pool = "policy"
[judges.judge]
mode = "managed"
model = "my-org/judge-model"
revision = "{REVISION}"
prepared_dir = "/models/judge"
gpus = 8
node_pool = "judge"
[rubrics.q]
profile = "general-quality"
[judging.bindings."general-quality"]
judge = "judge"
rubric = "q"
[pools.policy]
nodes = 2
gpus_per_node = 8
[pools.judge]
nodes = 1
gpus_per_node = 8
"""

# No pools: an evaluation run of a one-GPU policy and a one-GPU judge on one node.
ONE_NODE = 'name = "onenode"\n' + EVALUATION + POLICY + judge_tables()


# --- plan --------------------------------------------------------------------------------------


def test_seed_001_policy_spans_its_pools_two_nodes_and_the_driver_runs_on_the_first(tmp_path: Path) -> None:
    p = plan_of(tmp_path, SEED_001)
    assert p.policy_nodes == (0, 1) and p.driver_node == 0 and p.driver_placement == "policy"
    assert [(n.pool, n.policy_gpus, dict(n.judges)) for n in p.nodes] == [
        ("policy", 8, {}),
        ("policy", 8, {}),
        ("judge", 0, {"judge": 8}),
    ]
    assert p.nodes[0].policy_devices == tuple(range(8)) and p.nodes[0].ray_gpus == 0


def test_policy_and_judge_share_one_node_on_their_own_devices_and_ports(tmp_path: Path) -> None:
    config = config_of(tmp_path, ONE_NODE)
    p = make_plan(config)
    assert p.replicas == 1 and p.policy_nodes == (0,) and p.driver_node == 0
    node = p.nodes[0]
    assert node.policy_devices == (0,) and node.judge_devices["general"] == (1,)
    assert config.policy.port == 8000  # seed 001's default
    argv = policy_command(config.policy, PolicyNode()).argv
    policy_ports = {int(argv[argv.index(f) + 1]) for f in ("--port", "--nccl-port")}
    assert policy_ports == {8000, 8001}
    # Judges (and Ray) take blocks of the agents' port grid, which starts above every policy port.
    assert all(port < port_grid.PORT_FLOOR for port in policy_ports)
    assert problems_of(tmp_path, ONE_NODE, "policy.port=10050")["policy.port"]


# Each engine's own multi-node flags, and where node 0 is named: (backend, flags, the leader's flag and value).
MULTI_NODE = {
    "sglang": (sglang_argv, "--tp-size", ("--dist-init-addr", "10.0.0.0:8002")),
    "vllm": (vllm_argv, "--tensor-parallel-size", ("--master-addr", "10.0.0.0")),
}


@pytest.mark.parametrize("backend", sorted(MULTI_NODE))
def test_a_multi_node_policy_gets_the_engines_own_multi_node_flags_on_each_node(tmp_path: Path, backend: str) -> None:
    module, tp_flag, (leader_flag, leader) = MULTI_NODE[backend]
    config = config_of(tmp_path, SEED_001, f'policy.backend="{backend}"')
    p = make_plan(config)
    commands = [
        policy_command(config.policy, PolicyNode(rank, len(p.policy_nodes), f"10.0.0.{i}", "10.0.0.0")).argv
        for rank, i in enumerate(p.policy_nodes)
    ]
    for rank, argv in enumerate(commands):
        assert set(argv_flags(argv)) <= module.recorded_flags(), argv  # the pinned release's own parser's flags
        assert argv[argv.index(tp_flag) + 1] == "16"
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index(leader_flag) + 1] == leader
        assert argv[argv.index("--host") + 1] == f"10.0.0.{rank}"
    if backend == "vllm":
        assert "--headless" not in commands[0] and "--headless" in commands[1]  # only node 0 serves HTTP
    single = config_of(tmp_path, ONE_NODE, f'policy.backend="{backend}"').policy
    assert "--nnodes" not in policy_command(single, PolicyNode()).argv


def test_the_vllm_policys_commands_parse_with_vllms_own_parser(tmp_path: Path) -> None:
    python = require_engine()
    config = config_of(tmp_path, SEED_001, 'policy.backend="vllm"', 'policy.extra_args=["--load-format", "dummy"]')
    argvs = [policy_command(config.policy, PolicyNode(rank, 2, f"10.0.0.{rank}", "10.0.0.0")).argv for rank in (0, 1)]
    proc = subprocess.run(
        [python, "-c", PARSE_SCRIPT],
        input=json.dumps([list(argv[3:]) for argv in argvs]),  # without "python -m MODULE"
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank, ns in enumerate(json.loads(proc.stdout)):
        assert (ns["model"], ns["served_model_name"]) == ("/models/policy", ["my-org/policy-model"])
        assert (ns["host"], ns["port"], ns["tensor_parallel_size"]) == (f"10.0.0.{rank}", 8000, 16)
        assert (ns["nnodes"], ns["node_rank"], ns["master_addr"], ns["master_port"]) == (2, rank, "10.0.0.0", 8002)
        assert ns["headless"] is (rank == 1) and ns["load_format"] == "dummy"


@pytest.mark.parametrize("backend", ["slurm", "beaker", "skypilot"])
def test_seed_001_renders_for_every_scheduler(tmp_path: Path, backend: str) -> None:
    spec = tmp_path / "seed001.toml"
    spec.write_text(SEED_001)
    settings = {
        "slurm": [],
        "beaker": ["--set", 'launch.beaker.image="team/img"', "--set", 'launch.beaker.cluster="c"'],
        "skypilot": [
            *("--set", 'launch.skypilot.accelerators="H100"'),
            *("--set", 'launch.skypilot.mount.path="/shared"', "--set", 'launch.skypilot.mount.volume="v"'),
        ],
    }[backend]
    root = "/shared/out" if backend != "slurm" else str(tmp_path / "out")
    out = tmp_path / f"job.{backend}"
    args = ["render", str(spec), "--backend", backend, "--output-root", root, "-o", str(out), *settings]
    assert main(args) == 0
    text = out.read_text()
    assert ("--nodes=3" in text) if backend == "slurm" else ("3" in text)


def test_plan_json_and_table_show_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "seed001.toml"
    spec.write_text(SEED_001)
    assert main(["plan", str(spec), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy_nodes"] == [0, 1] and [n["policy_gpus"] for n in doc["nodes"]] == [8, 8, 0]
    assert main(["plan", str(spec)]) == 0
    table = capsys.readouterr().out
    assert "policy" in table.splitlines()[4].split() and "total" in table


# --- refusals: each names its key, exit 2 ------------------------------------------------------

REFUSALS = [
    (('policy.mode="external"',), "policy.mode", "managed"),
    (("trainer.nodes=1", "trainer.gpus_per_node=4"), "policy.mode", "trainer.nodes"),
    (("inference.gpus=2",), "inference.gpus", "[policy]"),
    (('policy.backend="reference"',), "policy.backend", "vllm"),
    (("policy.tensor_parallel_size=12",), "policy.tensor_parallel_size", "multiple of 8"),
    (("policy.tensor_parallel_size=24",), "pools.policy.nodes", "need 3 nodes"),
    (('policy.node_pool="nope"',), "policy.node_pool", "[pools.NAME]"),
    (('policy.extra_args=["--port", "9000"]',), "policy.extra_args.0", "--port"),
    (('policy.extra_args=["--tp-size=2"]',), "policy.extra_args.0", "--tp-size"),
    (('policy.backend="vllm"', 'policy.extra_args=["-x", "--master-addr=h"]'), "policy.extra_args.1", "--master-addr"),
    (('policy.extra_args=["--api-key", "sk-abcdefabcdefabcdef0123"]',), "policy.extra_args.1", "credential"),
    (("policy.gpus=8",), "policy.gpus", "tensor_parallel_size"),
    (('policy.endpoint="http://x:8000"',), "policy.endpoint", "managed"),
    (("policy.port=80",), "policy.port", ""),
]


@pytest.mark.parametrize(("overrides", "key", "words"), REFUSALS)
def test_each_unsupported_policy_combination_is_refused_naming_its_key(
    tmp_path: Path, overrides: tuple[str, ...], key: str, words: str
) -> None:
    problems = problems_of(tmp_path, SEED_001, *overrides)
    assert key in problems, problems
    assert words in problems[key]


def test_required_policy_keys_and_keys_without_a_mode_are_refused(tmp_path: Path) -> None:
    bare = ONE_NODE.replace('backend = "sglang"\n', "").replace('model = "my-org/policy-model"\n', "")
    problems = problems_of(tmp_path, bare)
    assert "is required for a managed policy" in problems["policy.backend"]
    assert "is required for a managed policy" in problems["policy.model"]
    no_mode = ONE_NODE.replace('mode = "managed"\nbackend = "sglang"', 'backend = "sglang"', 1)
    assert "has no mode" in problems_of(tmp_path, no_mode)["policy.backend"]


def test_a_credential_passed_by_reference_is_a_variable_the_run_needs(tmp_path: Path) -> None:
    config = config_of(tmp_path, SEED_001, 'policy.extra_args=["--api-token", "${runtime:POLICY_TOKEN}"]')
    assert config.environment_references() == {"POLICY_TOKEN": "policy.extra_args.1"}


def test_validate_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "seed001.toml"
    spec.write_text(SEED_001)
    assert main(["validate", str(spec), "--set", 'policy.mode="external"']) == 2
    assert "policy.mode" in capsys.readouterr().err


# --- a real run ----------------------------------------------------------------------------------

# Reads GYM_POLICY_URL, asks the policy one question and keeps its reply (the file named by POLICY_REPLY).
ASKING_DRIVER = """
import json, os, urllib.request
url = os.environ["GYM_POLICY_URL"]
body = {"model": "tiny-policy", "messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 64}
req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
reply = json.loads(urllib.request.urlopen(req, timeout=30).read())
with open(os.environ["POLICY_REPLY"], "w") as f:
    json.dump({"url": url, "reply": reply}, f)
"""


def free_policy_port() -> int:
    """A port below the agents' grid whose next one is free too (SGLang binds both)."""
    for port in random.sample(range(8000, 9990, 2), 200):
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("", p))
        except OSError:
            continue
        return port
    raise AssertionError("no free port pair below 10000")


def run_policy(
    tmp_path: Path, tag: str, env: dict[str, str], engine: tuple[str, Path, str] | None = None
) -> tuple[LocalRun, int, Path]:
    """Two replicas: the policy and the driver on node 0, a reference judge on node 1. The policy is the
    SGLang stand-in, or ``engine`` (backend, prepared directory, revision). Returns the run, its exit
    code (every agent ended) and the prepared directory."""
    if engine is None:
        prepared = tmp_path / "hub" / "models--tiny-policy" / "snapshots" / REVISION
        prepared.mkdir(parents=True)
        engine = ("sglang", prepared, REVISION)
    backend, prepared, revision = engine
    # vLLM's CPU build starts in 68-126 s here (docs/development/tests.md, issue 48); the stand-in in about one.
    startup, extra = (600, '["--load-format", "dummy"]') if backend == "vllm" else (120, "[]")
    driver = tmp_path / "ask_policy.py"
    driver.write_text(ASKING_DRIVER)
    spec = f"""
name = "policy"
[launch]
gpus_per_replica = 1
node_gpus = 1
[launch.coordination]
startup_timeout = {startup}
heartbeat_timeout = 6
heartbeat_interval = 0.5
poll_interval = 0.25
teardown_grace = 4.0
ack_timeout = 20.0
[trainer]
nodes = 0
gpus_per_node = 1
[inference]
gpus = 0
[driver]
command = ["{sys.executable}", "{driver}"]
trains = false
[ray]
enabled = false
[policy]
mode = "managed"
backend = "{backend}"
model = "tiny-policy"
revision = "{revision}"
prepared_dir = "{prepared}"
port = {free_policy_port()}
extra_args = {extra}
""" + judge_tables()
    run = launch_local(tmp_path, spec, uid(tag), env={"PYTHONPATH": str(STAND_IN), **env})
    try:
        code = run.wait(startup + 120)
    finally:
        kill_tree_by_session(run.proc)
    return run, code, prepared


@pytest.mark.slow
def test_a_two_replica_run_hands_the_driver_the_managed_policy_and_leaves_nothing(tmp_path: Path) -> None:
    record, reply = tmp_path / "starts.jsonl", tmp_path / "reply.json"
    env = {"GYM_STAND_IN_SGLANG_RECORD": str(record), "POLICY_REPLY": str(reply)}
    run, code, prepared = run_policy(tmp_path, "policy", env)
    assert code == 0, (failures(run.run_dir), run.text[-3000:])
    placement, judge_node = read(run.run_dir, names.placement(0)), read(run.run_dir, names.placement(1))
    assert placement["is_driver_node"] is True and placement["judges"] == {}
    assert placement["policy"]["devices"] == [0] and "policy" not in judge_node
    assert judge_node["judges"]["general"]["devices"] == [0]
    (start,) = [json.loads(line) for line in record.read_text().splitlines()]
    argv = start["argv"]
    port = argv[argv.index("--port") + 1]
    assert argv[argv.index("--model-path") + 1] == str(prepared)
    got = json.loads(reply.read_text())
    assert got["url"] == f"http://{argv[argv.index('--host') + 1]}:{port}/v1"
    assert got["reply"]["model"] == "tiny-policy" and got["reply"]["choices"][0]["message"]["content"]
    assert "policy ready at" in (run.run_dir / names.agent_log(0)).read_text()
    assert (run.run_dir / names.policy_log(0)).exists()
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)


@pytest.mark.slow
def test_a_policy_server_that_exits_while_loading_fails_the_run_naming_it_and_leaves_nothing(tmp_path: Path) -> None:
    # The stand-in's lost port race: it prints the bind error and exits 1 before it serves.
    run, code, _ = run_policy(tmp_path, "policy-exit", {"GYM_STAND_IN_SGLANG_LOSE_RACES": "9"})
    assert code != 0
    failure = failures(run.run_dir)[0]
    assert failure["kind"] == "child_exit" and failure["exit_code"] == 1, failure
    assert "policy server exited with code 1 before it was ready" in failure["cause"]
    assert failure["log"] == names.policy_log(0)
    assert "address already in use" in (run.run_dir / names.policy_log(0)).read_text()
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)


@pytest.mark.engines
def test_a_real_vllm_policy_serves_the_driver_under_the_agents_and_nothing_is_left(tmp_path: Path) -> None:
    python = require_engine()
    model, revision = tiny_model(python)
    reply = tmp_path / "reply.json"
    env = {**ENGINE_ENV, ENGINE_PYTHON_ENV: python, "POLICY_REPLY": str(reply)}
    run, code, _ = run_policy(tmp_path, "vllm-policy", env, engine=("vllm", model, revision))
    assert code == 0, (failures(run.run_dir), run.text[-3000:])
    got = json.loads(reply.read_text())
    assert got["reply"]["model"] == "tiny-policy" and got["reply"]["choices"][0]["finish_reason"] in ("stop", "length")
    log = (run.run_dir / names.policy_log(0)).read_text()
    assert "vllm" in log.lower()
    assert_artifacts_valid(run.run_dir)
    assert_nothing_left(run.run_dir)
