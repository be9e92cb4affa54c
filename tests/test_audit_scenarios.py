"""gym-audit on realistic run directories: verdicts, first causes, and one targeted mutation per check."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from audit.api import audit_run
from audit.cli import main
from schemas import names
from tests.harness.rundirs import SCENARIOS, RunBuilder


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunBuilder]:
    root = tmp_path_factory.mktemp("runs")
    return {name: fn(root / name) for name, fn in SCENARIOS.items()}


@pytest.fixture()
def copy_of(built: dict[str, RunBuilder], tmp_path: Path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(built[name].path, dst, symlinks=True)
        return dst

    return make


def load(path: Path, rel: str) -> dict[str, Any]:
    return json.loads((path / rel).read_text())


def patch(path: Path, rel: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite an artifact bypassing the writers' schema check (as a buggy agent might)."""
    doc = load(path, rel)
    change(doc)
    (path / rel).write_text(json.dumps(doc))


# -- the scenarios --------------------------------------------------------------------------------


def test_success_passes_clean(built: dict[str, RunBuilder]) -> None:
    result = audit_run(built["success"].path)
    assert result.verdict == "pass", [f.to_json() for f in result.findings]
    assert result.outcome == "succeeded"
    assert result.first_cause is None and result.cascade == ()
    assert not [f for f in result.findings if f.severity != "info"]
    assert result.expected_ranks == (0, 1, 2)
    assert result.plan is not None and result.plan["source"] == "launch"
    # GPU map: rank 1 (10.0.0.9) owns node 0: 4 trainer + 4 rollout; node 2 hosts the judge on GPU 7.
    maps = {m.node_index: m for m in result.gpu_maps}
    assert maps[0].rank == 1 and maps[0].is_head and maps[0].is_driver_node
    assert [c.role for c in maps[0].cells] == ["trainer"] * 4 + ["rollout"] * 4
    assert [c.role for c in maps[2].cells] == ["rollout"] * 7 + ["judge"]
    assert maps[2].cells[7].label == "general"


@pytest.mark.parametrize(
    ("scenario", "rank", "kind", "phase", "excerpt_has", "cascade"),
    [
        ("killed_replica", 1, "agent_died", "driver", "driver started", [(0, "peer_failure"), (2, "peer_failure")]),
        (
            "driver_failure",
            1,
            "driver_exit",
            "driver",
            "ValueError: loss became nan",
            [(0, "peer_failure"), (2, "peer_failure")],
        ),
        (
            "judge_failure",
            2,
            "judge_health",
            "driver",
            "CUDA error: out of memory",
            [(0, "peer_failure"), (1, "peer_failure")],
        ),
        ("peer_silent", 0, "silent", "driver", None, [(1, "peer_silent"), (2, "peer_silent")]),
    ],
)
def test_failed_runs_name_the_first_cause(
    built: dict[str, RunBuilder],
    scenario: str,
    rank: int,
    kind: str,
    phase: str,
    excerpt_has: str | None,
    cascade: list[tuple[int, str]],
) -> None:
    result = audit_run(built[scenario].path)
    assert result.verdict == "fail" and result.outcome == "failed"
    fc = result.first_cause
    assert fc is not None
    assert (fc.rank, fc.kind, fc.phase) == (rank, kind, phase)
    assert fc.wall_time is not None
    if excerpt_has:
        assert any(excerpt_has in line for line in fc.excerpt), fc.excerpt
    assert [(c.rank, c.kind) for c in result.cascade] == cascade
    assert "run.failed" in result.codes("error")
    doc = result.to_json()
    assert doc["first_cause"]["rank"] == rank and doc["verdict"] == "fail"


def test_driver_failure_excerpt_is_the_traceback(built: dict[str, RunBuilder]) -> None:
    fc = audit_run(built["driver_failure"].path).first_cause
    assert fc is not None and fc.log == "driver-1.log"
    assert fc.excerpt[0].startswith("Traceback") and fc.excerpt[-1].startswith("ValueError")


def test_killed_replica_reaper_records(built: dict[str, RunBuilder]) -> None:
    result = audit_run(built["killed_replica"].path)
    assert result.first_cause is not None and result.first_cause.writer == "reaper"
    assert "cleanup.by_reaper" in result.codes("info")
    assert "cleanup.missing" not in result.codes()


def test_peer_silent_blames_the_silent_rank(built: dict[str, RunBuilder]) -> None:
    result = audit_run(built["peer_silent"].path)
    fc = result.first_cause
    assert fc is not None and fc.reported_by == 1 and fc.file is None
    assert "cleanup.missing" in result.codes("error")  # its GPUs may still be held


# -- one mutation per check -------------------------------------------------------------------


def _rm(rel: str) -> Callable[[Path], None]:
    return lambda p: (p / rel).unlink()


def _set(rel: str, key_path: str, value: Any) -> Callable[[Path], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, leaf = key_path.split(".")
        for k in parents:
            doc = doc[k]
        doc[leaf] = value

    return lambda p: patch(p, rel, change)


def _judge_into_ray(p: Path) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["ray"]["devices"] = list(range(8))
        doc["ray"]["num_gpus"] = 8
        doc["ray"]["cuda_visible_devices"] = "0,1,2,3,4,5,6,7"

    patch(p, "placement-2.json", change)


def _policy_on_ray(p: Path) -> None:
    # A policy service's devices (seed 001) recorded on a device Ray owns.
    patch(p, "placement-0.json", lambda d: d.update(policy={"devices": [0], "cuda_visible_devices": "0"}))


def _swap_node_claims(p: Path) -> None:
    # What an agent sorting addresses as strings would do: "10.0.0.10" < "10.0.0.100" < "10.0.0.9".
    patch(p, "placement-0.json", lambda d: d.update(node_index=0))
    patch(p, "placement-1.json", lambda d: d.update(node_index=2))


def _dup_address(p: Path) -> None:
    patch(p, names.address(2), lambda d: d.update(address="10.0.0.10"))


def _extra_rank(p: Path) -> None:
    shutil.copy(p / names.address(2), p / names.address(5))
    patch(p, names.address(5), lambda d: d.update(rank=5, address="10.0.0.200"))


def _nan_loss(p: Path) -> None:
    doc = load(p, names.DRIVER_RESULT)
    doc["losses"] = [2.3, float("nan")]
    (p / names.DRIVER_RESULT).write_text(json.dumps(doc))  # Python writes NaN, which is not JSON


def _failure_on_success(p: Path) -> None:
    doc = load(p, names.ack(0))
    doc.update(
        schema="failure",
        kind="signal",
        cause="SIGTERM",
        phase="teardown",
        wall_time=1.7e9,
        monotonic_time=1.0,
        reacting_to=None,
        log=None,
    )
    del doc["outcome"]
    (p / names.failure(0)).write_text(json.dumps(doc))


def _foreign_file(p: Path) -> None:
    (p / "notes.txt").write_text("hello")


def _drop_ack(p: Path) -> None:
    (p / names.ack(2)).unlink()


def _acks_without_complete(p: Path) -> None:
    (p / names.COMPLETE).unlink()


def _edit_spec(p: Path) -> None:
    patch(p, names.SPEC, lambda d: d["spec"].update(name="edited"))


def _canary_fails(p: Path) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["bindings"][1]["passed"] = False
        doc["bindings"][1]["reason"] = "good 0.0 not above bad 0.0"

    patch(p, names.CANARIES, change)


def _registry_drops_binding(p: Path) -> None:
    patch(p, names.REGISTRY, lambda d: d["bindings"].pop("general-quality_ref"))


def _layout_differs(p: Path) -> None:
    patch(p, names.RAY_LAYOUT, lambda d: d["actual"].update({"10.0.0.100": 8.0}))


MUTATIONS: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("no cleanup", _rm("cleanup-2.json"), "cleanup.missing", "error"),
    ("no placement", _rm("placement-0.json"), "rank.missing_placement", "error"),
    ("no address", _rm(names.address(1)), "rank.missing_address", "error"),
    ("judge in ray mask", _judge_into_ray, "devices.judge_in_ray_mask", "error"),
    ("overlap", _judge_into_ray, "devices.overlap", "error"),
    ("policy overlap", _policy_on_ray, "devices.overlap", "error"),
    ("string-sorted nodes", _swap_node_claims, "placement.node_index", "error"),
    ("duplicate address", _dup_address, "address.duplicate", "error"),
    ("extra rank", _extra_rank, "rank.unexpected", "error"),
    ("ray layout", _layout_differs, "ray_layout.actual_mismatch", "error"),
    ("ray gate failed", _set(names.RAY_LAYOUT, "passed", False), "ray_layout.failed", "error"),
    ("registry", _registry_drops_binding, "registry.binding_missing", "error"),
    ("canary", _canary_fails, "canary.binding_failed", "error"),
    ("canary model", _set(names.CANARIES, "bindings", []), "canary.binding_missing", "error"),
    ("missing ack", _drop_ack, "complete.missing_acks", "error"),
    ("acks without complete", _acks_without_complete, "complete.ack_without_complete", "error"),
    ("no driver result", _rm(names.DRIVER_RESULT), "driver.no_result", "error"),
    ("no steps", _set(names.DRIVER_RESULT, "optimizer_steps", 0), "driver.no_steps", "error"),
    ("no refresh", _set(names.DRIVER_RESULT, "policy_refreshes", 0), "driver.no_policy_refresh", "error"),
    ("no judge replies", _set(names.DRIVER_RESULT, "judge_replies", 0), "driver.no_judge_replies", "error"),
    ("nan loss", _nan_loss, "driver.nonfinite_loss", "error"),
    ("nan is not json", _nan_loss, "json.nonfinite", "error"),
    ("failure on success", _failure_on_success, "failure.after_complete", "error"),
    ("leftover", _set("cleanup-0.json", "leftover_pids", [4242]), "cleanup.leftover", "error"),
    ("driver log", _rm("driver-1.log"), "log.missing", "error"),
    ("judge log", _rm("judge-general-2.log"), "log.missing", "error"),
    ("schema", _set("placement-0.json", "surprise", 1), "schema.violation", "error"),
    ("header rank", _set("placement-0.json", "rank", 2), "header.rank", "error"),
    ("foreign fingerprint", _set("cleanup-0.json", "fingerprint", "f" * 64), "header.fingerprint", "error"),
    ("spec edited", _edit_spec, "spec.fingerprint", "error"),
    ("judge endpoint", _rm("judge-general-2.json"), "judge.endpoint_missing", "error"),
    ("unknown file", _foreign_file, "file.unknown", "info"),
    ("phase state", _set("phases-0.json", "state", "FAILED"), "phases.state", "error"),
]


@pytest.mark.parametrize(("label", "mutate", "code", "severity"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_check_fires(
    copy_of: Callable[[str], Path], label: str, mutate: Callable[[Path], None], code: str, severity: str
) -> None:
    path = copy_of("success")
    mutate(path)
    result = audit_run(path)
    found = [f for f in result.findings if f.code == code]
    assert found, f"{label}: expected {code}, got {[f.to_json() for f in result.findings]}"
    assert found[0].severity == severity
    assert "audit.internal" not in result.codes()
    assert result.verdict == ("fail" if severity == "error" else "pass")


def test_schema_violation_names_file_and_json_path(copy_of: Callable[[str], Path]) -> None:
    path = copy_of("success")
    _set("placement-0.json", "ray.num_gpus", "eight")(path)
    f = next(f for f in audit_run(path).findings if f.code == "schema.violation")
    assert f.file == "placement-0.json" and f.json_path == "$.ray.num_gpus" and f.rank == 0


def test_symlinked_artifact_is_a_finding_not_followed(copy_of: Callable[[str], Path], tmp_path: Path) -> None:
    path = copy_of("success")
    secret = tmp_path / "secret.json"
    secret.write_text('{"schema": "cleanup"}')
    (path / "cleanup-1.json").unlink()
    os.symlink(secret, path / "cleanup-1.json")
    result = audit_run(path)
    assert any(f.code == "file.symlink" and f.file == "cleanup-1.json" for f in result.findings)
    assert "cleanup.missing" in result.codes()


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_exit_codes_and_json(
    built: dict[str, RunBuilder], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([str(built["success"].path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gym-audit: PASS")
    assert main([str(built["driver_failure"].path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert list(doc)[:3] == ["format", "run_dir", "verdict"]
    assert doc["verdict"] == "fail" and doc["first_cause"]["kind"] == "driver_exit"
    assert {"severity", "code", "message", "file", "rank"} <= set(doc["findings"][0])
    assert doc["ranks"]["expected"] == [0, 1, 2] and doc["plan"]["replicas"] == 3
    assert main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main([str(tmp_path / "file")]) == 2
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verdict"] == "unusable" and "spec.json" in captured.err


def test_cli_unparseable_spec_is_unusable(copy_of: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_of("success")
    (path / names.SPEC).write_bytes(b'{"schema": "spec", "spe')
    assert main([str(path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def _snapshot(path: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(path))] = (st.st_mtime_ns, p.read_bytes() if p.is_file() else b"")
    return out


def test_audit_never_writes_into_the_run_dir(
    built: dict[str, RunBuilder], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = built["judge_failure"].path
    before = _snapshot(path)
    html = tmp_path / "report.html"
    assert main([str(path), "--json", "--html", str(html)]) == 1
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert main([str(path), "--html", str(path / "report.html")]) == 2  # refused: inside the run
    assert main(["logs", str(path), "--grep", "error"]) == 0
    capsys.readouterr()
    assert _snapshot(path) == before


def test_reactions_in_a_cycle_report_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 0 was stopped (SIGSTOP) past heartbeat_timeout, then resumed and reacted to rank 1's
    silence report: every failure record is a reaction (this crashed with IndexError)."""
    b = SCENARIOS["peer_silent"](tmp_path / "cycle")
    b.react(0, 1, b.phase_start(1, "driver") + 170.0, kind="peer_failure", to_kind="peer_silent")
    html = tmp_path / "r.html"
    assert main([str(b.path)]) == 1
    text = capsys.readouterr().out
    head = "\n".join(text.splitlines()[:10])
    assert "rank 0" in head and "no failure record is a root cause" in text, text
    assert main([str(b.path), "--json", "--html", str(html)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_cause"]["rank"] == 0 and doc["first_cause"]["kind"] == "silent"
    assert "no failure record is a root cause" in html.read_text()
