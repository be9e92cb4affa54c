"""gym-launch render|submit --backend skypilot: every rendered task is loaded with SkyPilot's own task
loader (sky.Task.from_yaml: its JSON schema, its resources and volume parsing) and checked from the
loaded Task; identity and the attempt token from SkyPilot's environment; the refusals. Nothing is
mocked but SkyPilot's API server in the one submission test (no cloud can be reached here): rendering
is pure, and SkyPilot's loader needs no server or account.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent.coord.attempts import attempt_token
from agent.coord.identity import IdentityError
from agent.coord.identity import resolve as resolve_identity
from launch.backends.skypilot._render import render, run_command
from launch.cli import main
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import SPEC_JSON_ENV, load_spec, load_spec_record
from launch.spec.plan import plan as make_plan
from launch.spec.resolve import looks_like_credential
from schemas import names
from schemas.validation import violations
from schemas.vocab import ResumeEnv
from tests.harness.replay import generated_request

if TYPE_CHECKING:
    import sky  # imported where used: ~3 s of CPU in every worker that collects this module

REPO = Path(__file__).resolve().parent.parent
ALL_SPECS = sorted({*REPO.glob("examples/**/*.toml"), *REPO.glob("tests/data/miles/*.toml")})


def _valid(path: Path) -> bool:
    try:
        make_plan(RunConfig.from_spec(load_spec(path)))
    except SpecError:
        return False  # a fixture of a refusal (tests/data/miles/partial-node.toml), refused for every backend
    return True


SPECS = [p for p in ALL_SPECS if _valid(p)]
K8S = ('launch.skypilot.infra="k8s/team-ctx"', 'launch.skypilot.accelerators="H100"')


def sets(*pairs: str) -> list[str]:
    return [a for p in pairs for a in ("--set", p)]


def fixes_for(path: Path) -> list[str]:
    """What an example written for Beaker needs to run through SkyPilot: its Weka datasets become
    one volume, and a secret is named as the variable (SkyPilot's rule). The refusals of the file as
    it is are tested below."""
    spec = load_spec(path)
    launch = spec.data.get("launch", {})
    out = []
    if launch.get("weka_mounts"):
        out.append("launch.weka_mounts=[]")
    for var in launch.get("secrets", {}):
        out.append(f'launch.secrets.{var}="{var}"')
    return out


def render_cli(tmp_path: Path, spec: Path, *args: str, root: str = "/shared/runs") -> sky.Task:
    import sky

    out = tmp_path / "task.yaml"
    argv = ["render", str(spec), "--backend", "skypilot", "--uuid", "run-1", "--output-root", root, "-o", str(out)]
    assert main([*argv, *args]) == 0
    return sky.Task.from_yaml(str(out))


def assert_carries(task: sky.Task, fingerprint: str) -> None:
    assert load_spec_record(task.envs[SPEC_JSON_ENV], "inline").fingerprint == fingerprint
    assert task.envs[ResumeEnv.RESUME] == ResumeEnv.RESTART
    assert f"--expect-fingerprint {fingerprint}" in task.run
    assert task.run.startswith("unset RAY_ADDRESS RAY_JOB_ID RAY_CLIENT_MODE; exec gym-agent ")


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_and_miles_file_loads_in_skypilots_task_loader(tmp_path: Path, spec: Path) -> None:
    mount = sets('launch.skypilot.mount.path="/shared"', 'launch.skypilot.mount.volume="gym-runs"')
    task = render_cli(tmp_path, spec, *sets(*K8S, *fixes_for(spec)), *mount)
    config = RunConfig.from_spec(load_spec(spec, [*K8S, *fixes_for(spec), *mount[1::2]]))
    plan = make_plan(config)
    assert task.num_nodes == plan.replicas
    [res] = list(task.resources)
    assert res.accelerators == {"H100": plan.gpus_per_replica}
    assert str(res.cloud) == "Kubernetes" and res.region == "team-ctx"
    assert task.volumes == {"/shared": "gym-runs"}
    assert_carries(task, config.fingerprint)
    assert set(task.envs) == {*config.launch.env, SPEC_JSON_ENV, ResumeEnv.RESUME}
    assert [r.name for r in task.managed_secret_refs] == sorted(config.launch.secrets)


def test_the_beaker_shaped_examples_are_refused_naming_what_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    spec = REPO / "examples" / "miles" / "three-node.toml"
    assert main(["render", str(spec), "--backend", "skypilot", *sets(*K8S)]) == 2
    err = capsys.readouterr().err
    assert "launch.weka_mounts: are Beaker's Weka datasets" in err
    assert "launch.secrets.WANDB_API_KEY: names SkyPilot secret 'team-wandb-key'" in err
    assert "launch.skypilot.mount: is required for 3 nodes" in err


def test_slurm_host_path_mount_and_an_unmanaged_cluster(tmp_path: Path) -> None:
    args = sets(
        'launch.skypilot.infra="slurm/lab"',
        'launch.skypilot.accelerators="A100:8"',
        'launch.skypilot.mount.path="/lustre"',
        'launch.skypilot.mount.host_path="/lustre/team"',
        "launch.skypilot.managed=false",
        'launch.skypilot.setup="pip install gym-agent"',
        "launch.max_retries=3",
    )
    task = render_cli(
        tmp_path, REPO / "examples" / "three-node.toml", *args, "--set", "launch.weka_mounts=[]", root="/lustre/runs"
    )
    assert task.setup == "pip install gym-agent"
    task.resolve_and_validate_volumes()  # SkyPilot's own check of an inline host path (Slurm only)
    [vol] = task.volume_mounts
    assert vol.path == "/lustre" and vol.volume_config.config == {"host_path": "/lustre/team", "mode": "rw"}
    [res] = list(task.resources)
    # Not managed: nothing restarts the task, so no recovery is written.
    assert res.job_recovery is None and str(res.cloud) == "Slurm"


def test_max_retries_is_skypilots_max_restarts_on_errors(tmp_path: Path) -> None:
    args = sets(*K8S, 'launch.skypilot.recovery="EAGER_NEXT_REGION"', "launch.max_retries=2", "launch.weka_mounts=[]")
    args += sets(
        'launch.skypilot.mount.path="/weka"', 'launch.skypilot.mount.volume="weka-pvc"', "launch.skypilot.use_spot=true"
    )
    task = render_cli(tmp_path, REPO / "examples" / "three-node.toml", *args, root="/weka/runs")
    [res] = list(task.resources)
    assert res.job_recovery == {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 2}
    assert res.use_spot is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (['launch.skypilot.mount.bucket="s3://team-runs"'], "launch.skypilot.mount.bucket: is refused: a bucket mount"),
        (['launch.skypilot.mount.source="gs://x"'], "no atomic rename"),
        (["launch.skypilot.num_nodes=3"], "launch.skypilot.num_nodes: is the plan's replica count"),
        (['launch.skypilot.cloud="aws"'], 'launch.skypilot.cloud: is part of infra: write infra = "aws"'),
        (['launch.skypilot.run="echo"'], "launch.skypilot.run: is gym-agent's command"),
        (["launch.skypilot.max_restarts_on_errors=2"], "is [launch] max_retries"),
        (
            ['launch.skypilot.mount.path="/shared"', 'launch.skypilot.mount.host_path="/nfs"'],
            "bound by SkyPilot only for tasks on Slurm",
        ),
        (
            ['launch.skypilot.mount.path="/elsewhere"', 'launch.skypilot.mount.volume="v"'],
            "is not inside launch.skypilot.mount.path",
        ),
        (['launch.skypilot.accelerators="H100:4"'], "asks for 4 per node but the plan places 8"),
        (['launch.skypilot.cluster="c1"'], "launch.skypilot.cluster: names sky.launch's cluster"),
        (['launch.hostnames=["a", "b", "c"]'], "launch.hostnames: cannot be pinned through SkyPilot"),
        (['launch.env.SKYPILOT_NODE_RANK="0"'], "launch.env.SKYPILOT_NODE_RANK: is set by the SkyPilot task"),
    ],
)
def test_refusals_name_the_key(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ['launch.skypilot.infra="k8s/ctx"', "launch.weka_mounts=[]", 'launch.skypilot.mount.path="/shared"']
    if not any("mount." in a and "path" not in a for a in args):
        base.append('launch.skypilot.mount.volume="v"')
    if "accelerators" not in " ".join(args):
        base.append('launch.skypilot.accelerators="H100"')
    spec = REPO / "examples" / "three-node.toml"
    code = main(["render", str(spec), "--backend", "skypilot", "--output-root", "/shared/r", *sets(*base, *args)])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err


def test_a_single_node_needs_no_mount_and_no_gpus_need_no_accelerator(tmp_path: Path) -> None:
    spec = tmp_path / "cpu.toml"
    spec.write_text(
        'name = "cpu"\n[launch]\ngpus_per_replica = 1\nnode_gpus = 1\n[trainer]\nnodes = 1\ngpus_per_node = 1\n'
        '[inference]\ngpus = 0\n[driver]\ncommand = ["true"]\ntrains = false\n[ray]\nenabled = false\n'
    )
    task = render_cli(tmp_path, spec, *sets('launch.skypilot.accelerators="L4"'), root="/tmp/x")
    assert task.num_nodes == 1 and task.volumes == {}
    assert list(task.resources)[0].accelerators == {"L4": 1}


# --- property-generated specs -------------------------------------------------------------------

ENV_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(lambda s: s.strip())


@st.composite
def skypilot_specs(draw: st.DrawFn) -> tuple[dict, str]:
    rollout_nodes = draw(st.integers(0, 5))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    env = draw(st.dictionaries(ENV_NAME, TEXT, max_size=4))
    secrets = draw(st.lists(ENV_NAME, max_size=3, unique=True))
    assume(not set(env) & set(secrets))
    assume(not any(looks_like_credential(k, v) or k.startswith(("SKYPILOT_", "GYM_")) for k, v in env.items()))
    assume(not any(k.startswith(("SKYPILOT_", "GYM_")) for k in secrets))
    infra = draw(st.sampled_from(["k8s/ctx-a", "kubernetes", "runpod", "slurm/lab", "aws/us-east-1", None]))
    sky_table: dict = {"accelerators": draw(st.sampled_from(["H100", "A100-80GB", "L4", "H200"]))}
    if infra:
        sky_table["infra"] = infra
    if infra and infra.startswith("slurm"):
        sky_table["mount"] = {"path": "/shared", "host_path": "/lustre/gym"}
    elif infra is None or infra.startswith(("k8s", "kubernetes", "runpod")):
        sky_table["mount"] = {"path": "/shared", "volume": draw(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True))}
    else:
        assume(rollout_nodes == 0)  # a cloud VM's volume is not shared: one node only
    for k, strat in (
        ("image", st.from_regex(r"[a-z]+/[a-z0-9-]{1,12}:[0-9]", fullmatch=True)),
        ("cpus", st.sampled_from(["8", "32+"])),
        ("memory", st.sampled_from(["64", "256+"])),
        ("use_spot", st.booleans()),
        ("recovery", st.sampled_from(["FAILOVER", "EAGER_NEXT_REGION"])),
        ("setup", TEXT),
    ):
        if draw(st.booleans()):
            sky_table[k] = draw(strat)
    launch: dict = {
        "gpus_per_replica": gpus,
        "node_gpus": gpus,
        "env": env,
        "secrets": {s: s for s in secrets},
        "skypilot": sky_table,
    }
    if draw(st.booleans()):
        launch["max_retries"] = draw(st.integers(0, 20))
    data = {
        "name": draw(st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True)),
        "output": {"root": "/shared/runs"},
        "launch": launch,
        "trainer": {"nodes": 1, "gpus_per_node": gpus},
        "inference": {"gpus": gpus * rollout_nodes},
        "driver": {"command": ["python", "train.py"]},
    }
    return data, draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,30}", fullmatch=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(skypilot_specs())
def test_property_generated_specs_load_in_skypilot(tmp_path_factory: pytest.TempPathFactory, case) -> None:
    import sky

    data, uuid = case
    request = generated_request(data, uuid, "/shared/runs")
    config, plan = request.config, request.plan
    path = tmp_path_factory.mktemp("p") / "task.yaml"
    path.write_text(render(request).text, encoding="utf-8")
    task = sky.Task.from_yaml(str(path))
    s = data["launch"]["skypilot"]
    assert task.num_nodes == plan.replicas and task.run == run_command(request)
    [res] = list(task.resources)
    assert res.accelerators == {s["accelerators"]: plan.gpus_per_replica}
    if "image" in s:
        assert f"docker:{s['image']}" in (res.image_id or {}).values()
    assert res.use_spot == s.get("use_spot", False)
    recovery = {"strategy": s.get("recovery"), "max_restarts_on_errors": data["launch"].get("max_retries")}
    recovery = {k: v for k, v in recovery.items() if v is not None}
    if recovery:
        assert {k: v for k, v in (res.job_recovery or {}).items() if v is not None} == recovery
    else:
        assert res.job_recovery is None
    assert task.setup == s.get("setup")
    if "mount" in s:
        m = s["mount"]
        want = m["volume"] if "volume" in m else {"host_path": m["host_path"], "mode": "rw"}
        assert task.volumes == {"/shared": want}
    for k, v in data["launch"]["env"].items():
        assert task.envs[k] == v  # any text reads back exactly
    assert [r.name for r in task.managed_secret_refs] == sorted(data["launch"]["secrets"])
    assert_carries(task, config.fingerprint)
    assert json.loads(task.envs[SPEC_JSON_ENV])["spec"] == data


# --- identity and the attempt token from SkyPilot's environment ---------------------------------


def sky_env(rank: int, ips: list[str], **extra: str) -> dict[str, str]:
    return {
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NUM_NODES": str(len(ips)),
        "SKYPILOT_NODE_IPS": "\n".join(ips) + "\n",
        "SKYPILOT_NUM_GPUS_PER_NODE": "8",
        "SKYPILOT_TASK_ID": "sky-managed-2026-12-01-17-00-00-000000_gym-3_7-0",
        **extra,
    }


def test_identity_from_skypilots_environment() -> None:
    ips = ["10.0.0.12", "10.0.0.5", "10.0.1.9"]
    ident = resolve_identity(None, None, None, sky_env(2, ips))
    assert (ident.rank, ident.count, ident.address, ident.address_explicit) == (2, 3, "10.0.1.9", False)
    assert ident.visible_devices == tuple(str(i) for i in range(8))
    assert ident.scheduler_job is not None
    job = ident.scheduler_job.to_json()
    assert job == {"scheduler": "skypilot", "job": sky_env(0, ips)["SKYPILOT_TASK_ID"], "node": "rank-2"}
    # Ray's CUDA_VISIBLE_DEVICES (SkyPilot's Ray runtime sets it) wins over the count.
    assert resolve_identity(None, None, None, sky_env(0, ips, CUDA_VISIBLE_DEVICES="3,4")).visible_devices == ("3", "4")


def test_skypilot_comes_before_the_slurm_job_it_runs_in() -> None:
    """A SkyPilot task on Slurm runs in a Slurm job: the task's rank and token are SkyPilot's, and a
    managed job's recovery (a new Slurm job) keeps the token."""
    ips = ["10.1.0.1", "10.1.0.2"]
    slurm = {"SLURM_JOB_ID": "41", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_RESTART_COUNT": "0"}
    env = {**slurm, **sky_env(1, ips)}
    ident = resolve_identity(None, None, None, env)
    assert (ident.rank, ident.address) == (1, "10.1.0.2")
    assert attempt_token(env) == "skypilot-" + env["SKYPILOT_TASK_ID"]
    assert attempt_token({**env, "SLURM_JOB_ID": "42"}) == attempt_token(env)
    assert attempt_token({**env, ResumeEnv.TOKEN: "mine"}) == "mine"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NUM_NODES": "3"}, "lists 2 address(es)"),
        ({"SKYPILOT_NODE_IPS": "node-a\nnode-b", "SKYPILOT_NUM_NODES": "2"}, "not an IP address"),
        ({"SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.2", "SKYPILOT_NUM_NODES": "2"}, "is loopback address 127.0.0.1"),
    ],
)
def test_bad_skypilot_addresses_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(IdentityError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_identity(None, None, None, {"SKYPILOT_NODE_RANK": "0", **env})


# --- submit: without SkyPilot, without a server, and through its API -----------------------------


def submit_argv(tmp_path: Path, uuid: str) -> list[str]:
    spec = REPO / "examples" / "three-node.toml"
    extra = sets(*K8S, "launch.weka_mounts=[]", 'launch.skypilot.mount.path="/"', 'launch.skypilot.mount.volume="v"')
    return [
        "submit",
        str(spec),
        "--backend",
        "skypilot",
        "--uuid",
        uuid,
        "--output-root",
        str(tmp_path / "out"),
        *extra,
    ]


def test_submit_without_skypilot_prints_the_task_and_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sky", None)  # as if the extra were not installed
    assert main(submit_argv(tmp_path, "no-sky")) == 2
    out, err = capsys.readouterr()
    assert "SkyPilot is not installed: pip install 'gym-agent[skypilot]'" in err
    assert "# gym-launch submit runs the equivalent of: sky jobs launch --name three-node-no-sky --yes " in out
    assert "num_nodes: 3" in out and not (tmp_path / "out").exists()


def test_submit_without_an_api_server_prints_the_task_and_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A port nothing listens on: SkyPilot's own health check answers, and nothing is started.
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:9")
    from sky.server import common

    common.get_server_url.cache_clear()
    try:
        assert main(submit_argv(tmp_path, "no-server")) == 2
    finally:
        common.get_server_url.cache_clear()
    out, err = capsys.readouterr()
    assert "no SkyPilot API server answers at http://127.0.0.1:9" in err and "sky api start" in err
    assert "sky jobs launch --name three-node-no-server" in out and not (tmp_path / "out").exists()


def test_submit_launches_a_managed_job_through_skypilots_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot's API server and a cloud cannot exist here: its health answer and its two calls
    (sky.jobs.launch, sky.stream_and_get) are stood in for; the Task handed to them is the one
    SkyPilot's loader made of the rendered file in the run directory."""
    import sky
    from sky.server import common

    class Healthy:
        status = common.ApiServerStatus.HEALTHY

    monkeypatch.setattr(common, "get_api_server_status", lambda *_a, **_k: Healthy())
    launched: list[tuple[sky.Dag, str]] = []
    monkeypatch.setattr(sky.jobs, "launch", lambda dag, name: launched.append((dag, name)) or "request-1")
    monkeypatch.setattr(sky, "stream_and_get", lambda request: ([17], None) if request == "request-1" else None)
    monkeypatch.setenv("HF_TOKEN", "value-from-the-shell")
    argv = submit_argv(tmp_path, "sky-ok") + sets('launch.secrets.HF_TOKEN="HF_TOKEN"')
    assert main(argv) == 0
    [(dag, name)] = launched
    [task] = dag.tasks
    run_dir = tmp_path / "out" / "cluster" / "sky-ok"
    assert name == "three-node-sky-ok" and task.num_nodes == 3
    # The value reached SkyPilot in memory only (an inline secret, as --secret makes it), never the
    # run directory.
    assert task.secrets["HF_TOKEN"].get_secret_value() == "value-from-the-shell"
    assert not task.managed_secret_refs
    for f in run_dir.rglob("*"):
        assert f.is_dir() or b"value-from-the-shell" not in f.read_bytes(), f
    sub = json.loads((run_dir / names.SUBMISSION).read_text())
    assert not violations("submission", sub), violations("submission", sub)
    assert (sub["backend"], sub["job_id"], sub["job_file"]) == ("skypilot", "17", names.job_file(".skypilot.yaml"))
    assert sub["command"][:5] == ["sky", "jobs", "launch", "--name", "three-node-sky-ok"]
    assert sub["command"][5:7] == ["--secret", "HF_TOKEN"]


def test_resume_continues_another_launchs_run_and_every_task_restarts_by_itself(tmp_path: Path) -> None:
    mount = sets('launch.skypilot.mount.path="/shared"', 'launch.skypilot.mount.volume="v"', *K8S)
    plain = render_cli(tmp_path, REPO / "examples" / "demo.toml", *mount)
    resumed = render_cli(tmp_path, REPO / "examples" / "demo.toml", *mount, "--resume")
    assert "--resume" not in plain.run.split() and resumed.run.split()[-1] == "--resume"
    assert plain.envs[ResumeEnv.RESUME] == resumed.envs[ResumeEnv.RESUME] == ResumeEnv.RESTART
