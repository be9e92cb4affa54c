"""gym-launch render --backend beaker: every rendered spec is loaded with beaker-py's own model
(BeakerExperimentSpec.from_file) and its fields are checked from that model. Nothing is mocked:
rendering is pure, and beaker-py's loader needs no Beaker account."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from beaker import BeakerExperimentSpec
from beaker.types import BeakerJobPriority
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from launch.backends.beaker._render import render
from launch.cli import main
from launch.spec.load import SPEC_JSON_ENV, load_spec, load_spec_record
from launch.spec.resolve import looks_like_credential
from schemas.vocab import ResumeEnv
from tests.harness.replay import generated_request

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NS = 1_000_000_000


def load(path: Path) -> BeakerExperimentSpec:
    with warnings.catch_warnings():
        # beaker-py warns that context.preemptible is its legacy field; rendering it is on purpose.
        warnings.simplefilter("ignore", DeprecationWarning)
        return BeakerExperimentSpec.from_file(path)


def render_cli(tmp_path: Path, spec: Path | str, *args: str) -> BeakerExperimentSpec:
    out = tmp_path / "job.beaker.yaml"
    assert main(["render", str(spec), "--backend", "beaker", "-o", str(out), *args]) == 0
    return load(out)


def env_of(task) -> dict[str, tuple[str | None, str | None]]:
    return {e.name: (e.value, e.secret) for e in task.env_vars}


def mounts(task) -> list[tuple[str, str]]:
    # beaker-py 2.8 leaves a mount's source as the dict it read (snake_case keys).
    return [(d.mount_path, d.source["weka"] if isinstance(d.source, dict) else d.source.weka) for d in task.datasets]


def assert_carries(task, fingerprint: str) -> None:
    """The task carries exactly the spec with this fingerprint, and its command expects it."""
    value, secret = env_of(task)[SPEC_JSON_ENV]
    assert secret is None
    assert load_spec_record(value, "inline").fingerprint == fingerprint
    i = task.command.index("--expect-fingerprint")
    assert task.command[i + 1] == fingerprint


def test_three_node_example(tmp_path: Path) -> None:
    spec = REPO / "examples" / "three-node.toml"
    loaded = render_cli(tmp_path, spec, "--uuid", "run-1")
    assert loaded.budget == "your-org/your-budget"
    [task] = loaded.tasks
    assert task.replicas == 3 and task.leader_selection is True and task.host_networking is True
    assert task.propagate_failure is True and task.propagate_preemption is True
    assert task.synchronized_start_timeout == 1200 * NS  # launch.coordination.startup_timeout
    assert task.resources.gpu_count == 8 and task.resources.shared_memory == "200 GiB"
    assert task.image.beaker == "your-team/gym-agent"
    assert task.constraints.cluster == ["your-org/gpu-cluster"] and task.constraints.hostname is None
    assert task.context.priority == BeakerJobPriority.high
    assert task.timeout == 8 * 3600 * NS
    assert mounts(task) == [("/weka", "training")]
    fp = load_spec(spec).fingerprint
    assert task.command == ["gym-agent", "--uuid", "run-1", "--output-root", "/weka/runs", "--expect-fingerprint", fp]
    assert_carries(task, fp)
    text = (tmp_path / "job.beaker.yaml").read_text()
    assert "OUTPUT ROOT /weka/runs MUST BE A SHARED FILESYSTEM" in text


def test_miles_three_node_fixture(tmp_path: Path) -> None:
    spec = REPO / "tests" / "data" / "miles" / "three-node.toml"
    image = 'launch.beaker.image="team/miles-image"'
    loaded = render_cli(tmp_path, spec, "--set", image, "--uuid", "m1")
    assert loaded.budget == "team/compute"
    [task] = loaded.tasks
    assert task.replicas == 3 and task.leader_selection and task.propagate_failure and task.propagate_preemption
    assert task.synchronized_start_timeout == 1800 * NS
    assert task.constraints.cluster == ["gpu-cluster-a"]
    assert task.context.priority == BeakerJobPriority.high
    assert task.context.min_runtime == 3600 * NS and task.context.auto_resume is False
    assert task.timeout == 8 * 3600 * NS
    assert mounts(task) == [("/weka", "training")]
    env = env_of(task)
    assert env["NCCL_SOCKET_IFNAME"] == ("ib", None)
    # A secret by name only: Beaker puts the value in; the spec never holds it.
    assert env["WANDB_API_KEY"] == (None, "team-wandb-key")
    assert task.command[:5] == ["gym-agent", "--uuid", "m1", "--output-root", "/weka/runs/miles-three-node"]
    assert_carries(task, load_spec(spec, [image]).fingerprint)


def test_single_replica_has_no_replica_group(tmp_path: Path) -> None:
    spec = REPO / "tests" / "data" / "miles" / "node.toml"
    image, cluster = 'launch.beaker.image="i"', 'launch.beaker.cluster="c"'
    loaded = render_cli(tmp_path, spec, "--set", image, "--set", cluster, "--output-root", "/weka/r")
    [task] = loaded.tasks
    assert task.replicas is None and task.synchronized_start_timeout is None
    assert task.command[-4:] == ["--rank", "0", "--replicas", "1"]


def without_cluster(tmp_path: Path) -> Path:
    text = (REPO / "examples" / "three-node.toml").read_text()
    path = tmp_path / "no-cluster.toml"
    path.write_text(text.replace('cluster = "your-org/gpu-cluster"\n', ""))
    return path


def test_hostname_allowlist_is_the_constraint(tmp_path: Path) -> None:
    hosts = 'launch.hostnames=["n1", "n2", "n3", "n4"]'
    loaded = render_cli(tmp_path, without_cluster(tmp_path), "--set", hosts)
    assert loaded.tasks[0].constraints.hostname == ["n1", "n2", "n3", "n4"]
    assert loaded.tasks[0].constraints.cluster is None


REFUSALS = [
    (["--set", 'launch.hostnames=["a", "b", "c"]'], "launch.beaker.cluster: and launch.hostnames are both set"),
    (["--set", 'launch.beaker.image=""'], "launch.beaker.image"),
    (["--demo", "--set", "launch.gpus_per_replica=4", "--set", "launch.node_gpus=4"], "launch.gpus_per_replica: is 4"),
    (["--demo", "--set", "launch.gpus_per_replica=4", "--set", "launch.node_gpus=4"], "launch.node_gpus: Beaker"),
    (["--output-root", "out"], "output.root: is relative ('out')"),
    (["--output-root", "/scratch/runs"], "output.root: /scratch/runs is not inside any launch.weka_mounts"),
    (["--set", "launch.beaker.preemptible=true", "--set", 'launch.beaker.min_runtime="1h"'], "preemptible"),
    (["--set", 'launch.env.BEAKER_REPLICA_RANK="0"'], "launch.env.BEAKER_REPLICA_RANK: is set by the Beaker"),
    (["--set", 'launch.secrets.GYM_RUN_SPEC_JSON="x"'], "launch.secrets.GYM_RUN_SPEC_JSON"),
    (["--no-cluster", "--set", 'launch.hostnames=["a"]'], "launch.hostnames: lists 1 host"),
    (["--no-cluster"], "launch.beaker.cluster: is required for Beaker (or set launch.hostnames)"),
]


@pytest.mark.parametrize(("args", "message"), REFUSALS)
def test_refusals_name_the_key(tmp_path: Path, args: list[str], message: str) -> None:
    spec = str(REPO / "examples" / "three-node.toml")
    if args[0] == "--no-cluster":
        spec, args = str(without_cluster(tmp_path)), args[1:]
    elif args[0] == "--demo":  # a local spec rendered for Beaker: the resolver's Beaker rules did not run
        spec, args = str(REPO / "examples" / "demo.toml"), args[1:]
    result = subprocess.run(
        [str(BIN / "gym-launch"), "render", spec, "--backend", "beaker", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""


def test_render_writes_no_credential_value() -> None:
    """The resolver refuses a credential in [launch] env; the renderer never gets one to write."""
    spec = str(REPO / "examples" / "three-node.toml")
    result = subprocess.run(
        [str(BIN / "gym-launch"), "render", spec, "--backend", "beaker", "--set", 'launch.env.HF_TOKEN="hf_abc"'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "launch.env.HF_TOKEN: looks like a credential" in result.stderr
    assert "hf_abc" not in result.stdout


# --- property-generated specs -------------------------------------------------------------------

ENV_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(lambda s: s.strip())


@st.composite
def beaker_specs(draw: st.DrawFn) -> tuple[dict, str]:
    rollout_nodes = draw(st.integers(0, 5))
    startup = draw(st.one_of(st.integers(1, 7 * 86400), st.floats(1, 86400, allow_nan=False)))
    env = draw(st.dictionaries(ENV_NAME, TEXT, max_size=4))
    secrets = draw(st.dictionaries(ENV_NAME, st.from_regex(r"[a-z][a-z0-9/_-]{0,20}", fullmatch=True), max_size=3))
    assume(not set(env) & set(secrets))
    assume(not any(looks_like_credential(k, v) or k.startswith("BEAKER_") for k, v in env.items()))
    assume(not any(k.startswith("BEAKER_") or k.startswith("GYM_") for k in secrets))
    replicas = 1 + rollout_nodes
    beaker: dict = {"image": draw(st.from_regex(r"[a-z]+/[a-z0-9-]{1,20}", fullmatch=True))}
    hostnames: list[str] = []
    if draw(st.booleans()):
        beaker["cluster"] = draw(st.lists(st.from_regex(r"[a-z]+/[a-z0-9-]{1,12}", fullmatch=True), min_size=1))
    else:
        hostnames = [f"node-{i}.example" for i in range(replicas + draw(st.integers(0, 2)))]
    for k, strat in (
        ("budget", st.from_regex(r"[a-z]+/[a-z-]{1,12}", fullmatch=True)),
        ("priority", st.sampled_from(["low", "normal", "high", "urgent"])),
        ("timeout", st.sampled_from(["90m", "3h", "1h30m", "2d", "1.5d", "0.25s", "7 h 3 m", "10us"])),
        ("shared_memory", st.sampled_from(["10 GiB", "200 GiB"])),
    ):
        if draw(st.booleans()):
            beaker[k] = draw(strat)
    if draw(st.booleans()):
        beaker["preemptible"] = draw(st.booleans())
    else:
        if draw(st.booleans()):
            beaker["min_runtime"] = draw(st.sampled_from(["0s", "1h", "45m", "1d", "500ms"]))
        if draw(st.booleans()):
            beaker["auto_resume"] = draw(st.booleans())
    data = {
        "name": draw(st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True)),
        "output": {"root": "/weka/runs/x"},
        "launch": {
            "gpus_per_replica": 8,
            "hostnames": hostnames,
            "env": env,
            "secrets": secrets,
            "weka_mounts": [{"weka": "training", "mount_path": "/weka"}],
            "coordination": {"startup_timeout": startup},
            "beaker": beaker,
        },
        "trainer": {"nodes": 1, "gpus_per_node": 8},
        "inference": {"gpus": 8 * rollout_nodes},
        "driver": {"command": ["python", "train.py"]},
    }
    return data, draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,30}", fullmatch=True))


def beaker_ns(text: str) -> int:
    """Our duration grammar, evaluated independently of the renderer: what Beaker must get."""
    units = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9, "d": 86400e9}
    return math.ceil(sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)\s*([a-z]+)", text)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(beaker_specs())
def test_property_generated_specs_load_in_beaker_py(tmp_path_factory: pytest.TempPathFactory, case) -> None:
    data, uuid = case
    request = generated_request(data, uuid, "/weka/runs/x")
    config, plan = request.config, request.plan
    rendered = render(request)
    path = tmp_path_factory.mktemp("p") / "job.beaker.yaml"
    path.write_text(rendered.text, encoding="utf-8")
    [task] = load(path).tasks
    b = data["launch"]["beaker"]
    assert task.image.beaker == b["image"]
    assert task.resources.gpu_count == 8 and task.host_networking is True
    if plan.replicas > 1:
        assert (task.replicas, task.leader_selection, task.propagate_failure, task.propagate_preemption) == (
            plan.replicas,
            True,
            True,
            True,
        )
        startup = data["launch"]["coordination"]["startup_timeout"]
        # Whole seconds, rounded up: never shorter than the agents' own startup deadline.
        assert task.synchronized_start_timeout == math.ceil(startup) * NS >= startup * NS
    else:
        assert task.replicas is None and task.command[-4:] == ["--rank", "0", "--replicas", "1"]
    if "cluster" in b:
        assert task.constraints.cluster == b["cluster"] and task.constraints.hostname is None
    else:
        assert task.constraints.hostname == data["launch"]["hostnames"] and task.constraints.cluster is None
    assert task.context.priority == (BeakerJobPriority.from_any(b["priority"]) if "priority" in b else None)
    assert task.context.auto_resume == b.get("auto_resume")
    assert task.resources.shared_memory == b.get("shared_memory")
    assert task.timeout == (beaker_ns(b["timeout"]) if "timeout" in b else None)
    assert task.context.min_runtime == (beaker_ns(b["min_runtime"]) if "min_runtime" in b else None)
    env = env_of(task)
    for k, v in data["launch"]["env"].items():
        assert env[k] == (v, None)  # any text reads back exactly
    for k, v in data["launch"]["secrets"].items():
        assert env[k] == (None, v)
    assert set(env) == {*data["launch"]["env"], *data["launch"]["secrets"], SPEC_JSON_ENV, ResumeEnv.RESUME}
    assert_carries(task, config.fingerprint)
    assert json.loads(env[SPEC_JSON_ENV][0])["spec"] == data


# --- the agent side of the carried spec ----------------------------------------------------------


def test_agent_refuses_a_spec_with_another_fingerprint(tmp_path: Path) -> None:
    spec = load_spec(REPO / "examples" / "three-node.toml")
    from launch.spec.load import spec_record

    env = {
        **os.environ,
        SPEC_JSON_ENV: json.dumps(spec_record(spec, "x")),
        "GYM_REPLICA_RANK": "0",
        "GYM_REPLICA_COUNT": "3",
    }
    cmd = [str(BIN / "gym-agent"), "--uuid", "u", "--output-root", str(tmp_path), "--expect-fingerprint", "0" * 64]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"the spec's fingerprint is {spec.fingerprint}, not {'0' * 64}" in result.stderr
    assert not list(tmp_path.iterdir())  # refused before the run directory exists


def test_loopback_hostname_is_still_refused_and_the_test_hook_is_loopback_only() -> None:
    from agent.coord.identity import TEST_ADDRESS_ENV, IdentityError, resolve_address

    with pytest.raises(IdentityError, match="resolves to loopback"):
        resolve_address(None, {"BEAKER_NODE_HOSTNAME": "127.0.0.5"})
    assert resolve_address(None, {"BEAKER_NODE_HOSTNAME": "127.0.0.5", TEST_ADDRESS_ENV: "127.0.0.3"}) == (
        "127.0.0.3",
        True,
    )
    with pytest.raises(IdentityError, match="loopback addresses only"):
        resolve_address(None, {TEST_ADDRESS_ENV: "10.1.2.3"})
    # A rendered job cannot carry the hook.
    from launch.backends.beaker._render import RESERVED_ENV

    assert TEST_ADDRESS_ENV in RESERVED_ENV


def test_every_task_restarts_by_itself_and_resume_continues_another_launchs_run(tmp_path: Path) -> None:
    """Beaker retries a task with the same command and envVars: GYM_RESUME=restart in every task lets a
    retry start the next attempt; --resume (on the command) also continues a run another launch began."""
    spec = REPO / "tests" / "data" / "miles" / "node.toml"
    image, cluster = 'launch.beaker.image="i"', 'launch.beaker.cluster="c"'
    plain = render_cli(tmp_path, spec, "--set", image, "--set", cluster, "--output-root", "/weka/r")
    assert env_of(plain.tasks[0])[ResumeEnv.RESUME] == (ResumeEnv.RESTART, None)
    assert "--resume" not in plain.tasks[0].command
    resumed = render_cli(tmp_path, spec, "--set", image, "--set", cluster, "--output-root", "/weka/r", "--resume")
    assert env_of(resumed.tasks[0])[ResumeEnv.RESUME] == (ResumeEnv.RESTART, None)
    assert resumed.tasks[0].command[-1] == "--resume"


@pytest.mark.parametrize(
    ("key", "value", "retries"),
    [
        (None, None, None),
        ("launch.max_retries", 0, 0),
        ("launch.max_retries", 4, 4),
        ("launch.beaker.max_retries", 2, 2),
    ],
)
def test_max_retries_is_beakers_allowed_task_retries(tmp_path: Path, key: str | None, value: int, retries: int) -> None:
    spec = REPO / "tests" / "data" / "miles" / "node.toml"
    sets = ["--set", 'launch.beaker.image="i"', "--set", 'launch.beaker.cluster="c"', "--output-root", "/weka/r"]
    if key is not None:
        sets += ["--set", f"{key}={value}"]
    loaded = render_cli(tmp_path, spec, *sets)
    text = (tmp_path / "job.beaker.yaml").read_text()
    if retries is None:
        assert loaded.retry is None and "Beaker's own retry default applies" in text
    else:
        assert loaded.retry is not None and loaded.retry.allowed_task_retries == retries
        assert f"Beaker retries the task up to {retries} time(s)" in text
    # Whatever Beaker counts, the agents count from the run directory: said in the job itself.
    assert "# a resubmission resets Beaker's count, not theirs." in text
