"""The audit's evidence of training besides driver-result.json ([driver.evidence]), on run
directories built by the real writers (tests/harness/rundirs.py): the MILES trainer's own
records, a metrics JSONL, patterns over the driver's log, `[driver] trains = false`, and the
refusals (nothing declared, nothing shown, a non-finite loss, a planted symlink)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from audit._model import AuditResult
from audit.api import audit_run
from audit.cli import main
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import load_spec
from schemas import names
from tests.harness.rundirs import DEMO, RunBuilder


def build(root: Path, *overrides: str, result: bool = False) -> RunBuilder:
    """The demo's successful run, but with `overrides` on its spec and (by default) no
    driver-result.json: a driver that leaves only its own records."""
    b = RunBuilder(root, overrides=overrides)
    b.startup()
    b.finish()
    for r in b.ranks:
        b.phases(r)
        b.cleanup(r, "success")
    if not result:
        (b.path / names.DRIVER_RESULT).unlink()
    return b


def errors(result: AuditResult) -> dict[str, str]:
    return {f.code: f.message for f in result.findings if f.severity == "error"}


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # json.dumps writes NaN for a diverged loss, as a Python trainer would.
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def miles_contract(b: RunBuilder, steps: int, *, rank: int = 0, loss: float = 0.5, save: str = "checkpoints") -> None:
    lines: list[dict[str, Any]] = [{"schema_version": 1, "rank": rank, "event": "scores", "rollout_id": 0}]
    for step in range(1, steps + 1):
        lines.append(
            {
                "schema_version": 1,
                "rank": rank,
                "event": "optimizer",
                "step": step,
                "rollout_id": step - 1,
                "optimizer_skipped": False,
                "local_policy_objective": loss,
                "published_step": step - 1,
            }
        )
    write_jsonl(b.path / save / f"training_contract_rank{rank}.jsonl", lines)


def judge_log(b: RunBuilder, chats: int, *, status: int = 200) -> None:
    """The managed judge's own access lines, as SGLang's uvicorn (and the reference judge) print them."""
    lines = ['INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK\n']
    lines += [f'INFO:     127.0.0.1:40001 - "POST /v1/chat/completions HTTP/1.1" {status} OK\n'] * chats
    lines.append('INFO:     127.0.0.1:40002 - "POST /tokenize HTTP/1.1" 200 OK\n')
    (b.path / names.judge_log("general", b.judge_rank)).write_text("".join(lines))


MILES = 'driver.evidence.preset="miles"'


def test_no_evidence_at_all_fails_naming_what_is_accepted(tmp_path: Path) -> None:
    result = audit_run(build(tmp_path).path)
    assert result.verdict == "fail"
    message = errors(result)["driver.no_result"]
    for needle in ("[driver.evidence]", 'preset = "miles"', "training_contract_rank*.jsonl", "metrics =", "step_field"):
        assert needle in message, message
    assert "log_step_pattern" in message and "trains = false" in message and "driver-result.json" in message
    assert result.training is not None and result.training["source"] == "none"


def test_the_miles_trainers_own_records_pass(tmp_path: Path) -> None:
    b = build(tmp_path, MILES)
    miles_contract(b, 3, rank=0)
    miles_contract(b, 3, rank=1)
    write_jsonl(b.path / "checkpoints" / "publication.jsonl", [{"version": 1}, {"version": 2}, {"version": 3}])
    judge_log(b, 10)
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    t = result.training
    assert t is not None and t["source"] == "evidence" and t["optimizer_steps"] == 3 and t["policy_refreshes"] == 3
    (miles,) = t["evidence"]["sources"]
    assert miles["files"] == [
        "checkpoints/training_contract_rank0.jsonl",
        "checkpoints/training_contract_rank1.jsonl",
        "checkpoints/publication.jsonl",
    ]
    assert miles["losses_checked"] == 6
    assert result.judge_replies is not None and result.judge_replies["independent"] == 10
    # The HTML report's chart: loss per step (averaged over the ranks) and the published steps.
    assert t["series"] == {"source": "miles", "points": [[1, 0.5], [2, 0.5], [3, 0.5]], "refresh_at": [1, 2]}


def test_a_nan_loss_in_the_trainers_records_fails(tmp_path: Path) -> None:
    b = build(tmp_path, MILES)
    miles_contract(b, 2, loss=math.nan)
    judge_log(b, 4)
    result = audit_run(b.path)
    assert "checkpoints/training_contract_rank0.jsonl:2" in errors(result)["driver.nonfinite_loss"]


def test_steps_without_a_refresh_fail(tmp_path: Path) -> None:
    b = build(tmp_path, MILES)
    miles_contract(b, 1)  # published_step 0 and no publication.jsonl: rollouts kept the old weights
    judge_log(b, 4)
    assert set(errors(audit_run(b.path))) == {"driver.no_policy_refresh"}


def test_declared_evidence_that_shows_nothing_fails(tmp_path: Path) -> None:
    b = build(tmp_path, MILES)
    judge_log(b, 4)
    message = errors(audit_run(b.path))["driver.no_steps"]
    assert "no checkpoints/training_contract_rank*.jsonl" in message and "Accepted:" in message
    # Records that are not optimizer steps (scores, a skipped step) are not steps either.
    write_jsonl(
        b.path / "checkpoints" / "training_contract_rank0.jsonl",
        [{"event": "scores", "step": 1}, {"event": "optimizer", "step": 1, "optimizer_skipped": True}],
    )
    assert '`event: "optimizer"` line' in errors(audit_run(b.path))["driver.no_steps"]


def test_a_symlinked_save_dir_is_not_followed(tmp_path: Path) -> None:
    b = build(tmp_path / "run", MILES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_jsonl(elsewhere / "training_contract_rank0.jsonl", [{"event": "optimizer", "step": 1}])
    (b.path / "checkpoints").symlink_to(elsewhere)
    judge_log(b, 4)
    found = errors(audit_run(b.path))
    assert "driver.no_steps" in found and "file.symlink" in found


def test_a_planted_symlink_among_the_records_is_not_read(tmp_path: Path) -> None:
    b = build(tmp_path / "run", MILES)
    secret = tmp_path / "secret.jsonl"
    write_jsonl(secret, [{"event": "optimizer", "step": 1}])
    (b.path / "checkpoints").mkdir()
    (b.path / "checkpoints" / "training_contract_rank0.jsonl").symlink_to(secret)
    judge_log(b, 4)
    assert "driver.no_steps" in errors(audit_run(b.path))  # a symlink is no regular file: not even listed


@pytest.mark.parametrize(
    ("lines", "codes"),
    [
        ([{"it": 0, "train/loss": 2.0, "policy": 0}, {"it": 1, "train/loss": 1.5, "policy": 1}], set()),
        ([{"it": 0, "train/loss": 2.0, "policy": 1}, {"it": 1, "train/loss": math.inf}], {"driver.nonfinite_loss"}),
        ([{"it": 0, "train/loss": 2.0, "policy": 0}], {"driver.no_policy_refresh"}),
        ([{"loss": 1.0}], {"driver.no_steps"}),
    ],
)
def test_a_metrics_jsonl_with_named_fields(tmp_path: Path, lines: list[dict[str, Any]], codes: set[str]) -> None:
    b = build(
        tmp_path,
        'driver.evidence.metrics="checkpoints/metrics.jsonl"',
        'driver.evidence.step_field="it"',
        'driver.evidence.loss_field="train/loss"',
        'driver.evidence.refresh_field="policy"',
    )
    write_jsonl(b.path / "checkpoints" / "metrics.jsonl", lines)
    judge_log(b, 4)
    assert set(errors(audit_run(b.path))) == codes


LOG_STEPS = r'driver.evidence.log_step_pattern="^step \\d+ loss (?P<loss>\\S+)$"'


def test_patterns_over_the_drivers_log(tmp_path: Path) -> None:
    # The builder's driver log says "step 1 loss 2.31" and "step 2 loss 2.05", and no refresh line.
    b = build(tmp_path, LOG_STEPS, r'driver.evidence.log_refresh_pattern="^refreshed policy v\\d+$"')
    judge_log(b, 4)
    assert set(errors(audit_run(b.path))) == {"driver.no_policy_refresh"}
    log = b.path / names.driver_log(b.driver_rank)
    log.write_text(log.read_text() + "refreshed policy v1\n")
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    assert result.training is not None and result.training["optimizer_steps"] == 2
    assert (result.training["policy_refreshes"], result.training["refresh"]) == (1, "required")
    log.write_text(log.read_text() + "step 3 loss nan\n")
    assert "driver.nonfinite_loss" in errors(audit_run(b.path))


# A single-node trainer whose rollouts share its GPUs: the one shape without a separate refresh.
COLOCATED = ('inference.placement_mode="colocated"', "inference.gpus=4")


def test_a_trainer_without_a_separate_refresh_says_so_and_the_audit_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = build(tmp_path, LOG_STEPS, *COLOCATED, 'driver.evidence.refresh="none"')
    judge_log(b, 4)
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    assert "driver.refresh_none" in result.codes("info")
    assert result.training is not None and result.training["refresh"] == "none"
    assert main([str(b.path)]) == 0
    assert 'no separate policy refresh (refresh = "none")' in capsys.readouterr().out
    # The choice holds for a driver-result.json too: policy_refreshes 0 is then no error.
    r = build(tmp_path / "r", *COLOCATED, 'driver.evidence.refresh="none"', result=True)
    doc = json.loads((r.path / names.DRIVER_RESULT).read_text())
    (r.path / names.DRIVER_RESULT).write_text(json.dumps({**doc, "policy_refreshes": 0}))
    result = audit_run(r.path)
    assert result.verdict == "pass" and "driver.refresh_none" in result.codes("info"), errors(result)


def test_steps_without_any_loss_value_fail(tmp_path: Path) -> None:
    b = build(
        tmp_path,
        'driver.evidence.metrics="checkpoints/metrics.jsonl"',
        'driver.evidence.loss_field="loss"',
        'driver.evidence.refresh_field="policy"',
    )
    write_jsonl(b.path / "checkpoints" / "metrics.jsonl", [{"step": 1, "policy": 1}, {"step": 2, "policy": 2}])
    judge_log(b, 4)
    message = errors(audit_run(b.path))["driver.no_losses"]
    assert "2 optimizer step(s) but no loss value" in message and "loss_field" in message


def test_a_run_that_trains_nothing_passes_and_says_so(tmp_path: Path) -> None:
    b = build(tmp_path, "driver.trains=false")
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    (info,) = [f for f in result.findings if f.code == "driver.training_not_required"]
    assert info.severity == "info" and "[driver] trains = false" in info.message
    assert result.training is not None and result.training["required"] is False


def test_an_evaluation_run_is_judged_by_its_exit_and_its_judges_replies(tmp_path: Path) -> None:
    # No trainer, rollout engines and a bound judge: no evidence of training, but a judge reply.
    b = build(tmp_path / "replied", "trainer.nodes=0")
    judge_log(b, 4)
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    (info,) = [f for f in result.findings if f.code == "driver.training_not_required"]
    assert "an evaluation run" in info.message
    silent = build(tmp_path / "silent", "trainer.nodes=0")
    judge_log(silent, 0)  # the judge answered its health checks and the canaries, never the driver
    assert set(errors(audit_run(silent.path))) == {"driver.no_judge_replies"}


def test_judge_replies_are_required_with_evidence(tmp_path: Path) -> None:
    b = build(tmp_path, MILES)
    miles_contract(b, 2)
    write_jsonl(b.path / "checkpoints" / "publication.jsonl", [{"version": 1}])
    judge_log(b, 0)  # the judge answered nothing but its health checks
    assert set(errors(audit_run(b.path))) == {"driver.no_judge_replies"}


def test_reports_carry_the_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path, MILES)
    miles_contract(b, 2)
    write_jsonl(b.path / "checkpoints" / "publication.jsonl", [{"version": 2}])
    judge_log(b, 5)
    assert main([str(b.path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["training"]["source"] == "evidence" and doc["training"]["optimizer_steps"] == 2
    assert doc["judge_replies"]["judges"]["general"]["server_answered"] == 5
    assert main([str(b.path)]) == 0
    text = capsys.readouterr().out
    assert "training evidence: [driver.evidence], 2 optimizer step(s), 2 policy refresh(es)" in text
    assert "judge replies: no claim, counted 5" in text


# -- the spec keys ---------------------------------------------------------------------------------


def _config(*overrides: str) -> RunConfig:
    return RunConfig.from_spec(load_spec(DEMO, overrides))


@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        ('driver.evidence.save_dir="../elsewhere"', "driver.evidence.save_dir", "relative to the run directory"),
        ('driver.evidence.metrics="/abs/metrics.jsonl"', "driver.evidence.metrics", "relative to the run directory"),
        ('driver.evidence.log_step_pattern="step (\\\\d+"', "driver.evidence.log_step_pattern", "regular expression"),
        ('driver.evidence.loss_field="loss"', "driver.evidence.loss_field", "set metrics"),
        ('driver.evidence.preset="megatron"', "driver.evidence.preset", '"miles"'),
        ('driver.evidence.log_refresh_pattern="refresh"', "driver.evidence.log_refresh_pattern", "declare the steps"),
        # Seed 000: declared evidence proves a refresh and finite losses, or says why not.
        ('driver.evidence.metrics="m.jsonl"', "driver.evidence.metrics", "proves no policy refresh"),
        ('driver.evidence.metrics="m.jsonl"', "driver.evidence.metrics", 'or say refresh = "none"'),
        ('driver.evidence.metrics="m.jsonl"', "driver.evidence.metrics", "declare loss_field"),
        (r'driver.evidence.log_step_pattern="^step \\d+"', "driver.evidence.log_step_pattern", "(?P<loss>"),
        ('driver.evidence.refresh="always"', "driver.evidence.refresh", '"none"'),
    ],
)
def test_bad_evidence_keys_are_refused_naming_the_key(override: str, key: str, says: str) -> None:
    with pytest.raises(SpecError) as exc:
        _config(override)
    assert key in str(exc.value) and says in str(exc.value), str(exc.value)


def test_refresh_none_beside_a_declared_refresh_is_refused() -> None:
    with pytest.raises(SpecError) as exc:
        _config(
            'driver.evidence.metrics="m.jsonl"',
            'driver.evidence.loss_field="loss"',
            'driver.evidence.refresh_field="policy"',
            'driver.evidence.refresh="none"',
        )
    assert "driver.evidence.refresh" in str(exc.value) and "keep one of them" in str(exc.value)
    ok = _config(
        'driver.evidence.metrics="m.jsonl"',
        'driver.evidence.loss_field="loss"',
        'driver.evidence.refresh="none"',
        *COLOCATED,
    )
    assert ok.driver.evidence.refresh_none


def test_a_miles_run_file_defaults_to_the_miles_preset() -> None:
    miles_file = Path(__file__).parent / "data" / "miles" / "three-node.toml"
    config = RunConfig.from_spec(load_spec(miles_file))
    assert config.driver.evidence.preset == "miles" and config.driver.evidence.save_dir == "checkpoints"
    assert config.driver.trains
    off = RunConfig.from_spec(load_spec(miles_file, ["driver.trains=false"]))
    assert off.driver.evidence.preset is None
    own = RunConfig.from_spec(
        load_spec(
            miles_file,
            [
                'driver.evidence.metrics="m.jsonl"',
                'driver.evidence.loss_field="l"',
                'driver.evidence.refresh_field="v"',
            ],
        )
    )
    assert own.driver.evidence.preset is None and own.driver.evidence.metrics == "m.jsonl"
    moved = RunConfig.from_spec(load_spec(miles_file, ['driver.evidence.save_dir="checkpoints/save"']))
    assert (moved.driver.evidence.preset, moved.driver.evidence.save_dir) == ("miles", "checkpoints/save")
    # Our own spelling declares nothing by default.
    assert not _config().driver.evidence.declared


# -- the trainer's replay and rollout records (issue 51 item 5) ------------------------------------


def _diagnostics(status: str, failed: Any = None, binding: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"status": status, "rubric_sha256": "0" * 64, "elapsed_seconds": 0.5}
    if failed is not None:
        entry["failed_attempts"] = failed
    if binding is not None:
        entry["binding"] = binding
    return entry


def test_replay_lines_and_rollout_diagnostics_are_validated_and_summarised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = build(tmp_path, MILES, 'driver.evidence.rollouts="checkpoints/rollouts"')
    miles_contract(b, 2)
    write_jsonl(b.path / "checkpoints" / "publication.jsonl", [{"version": 1}])
    judge_log(b, 4)
    replay = {"schema_version": 1, "event": "replay_routes", "rollout_id": 0, "routes": 12}
    contract = b.path / "checkpoints" / "training_contract_rank0.jsonl"
    with contract.open("a") as f:
        f.write(json.dumps({**replay, "rank": 0}) + "\n" + json.dumps({**replay, "rank": 0, "rollout_id": 1}) + "\n")
        f.write(json.dumps({**replay, "rank": 3}) + "\n")  # another rank's line in rank 0's file: not valid
    miles_contract(b, 2, rank=1)
    with (b.path / "checkpoints" / "training_contract_rank1.jsonl").open("a") as f:
        f.write(json.dumps({**replay, "rank": 1}) + "\n")
    samples: list[dict[str, Any]] = [
        {"prompt": "q1", "metadata": {"verifier_diagnostics": {"general-quality": _diagnostics("ok", [])}}},
        {
            "prompt": "q2",
            "metadata": {
                "verifier_diagnostics": {
                    "general-quality": _diagnostics("ok", [{"attempt": 1, "error": "ReadTimeout"}]),
                    "ref": _diagnostics("error", 2, binding="general-quality_ref"),
                }
            },
        },
        {"prompt": "q3", "metadata": {"label": "x"}},  # a deterministic verifier: no judge diagnostics
        {"prompt": "q4", "metadata": {"verifier_diagnostics": {"general-quality": {"raw_reply": "7"}}}},
    ]
    write_jsonl(b.path / "checkpoints" / "rollouts" / "rollout_0.jsonl", samples)
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    assert result.training is not None
    ev = result.training["evidence"]
    assert ev["replay_routes"] == {"lines": 3, "per_rank": {"0": 2, "1": 1}, "invalid": 1}
    assert ev["rollout_diagnostics"] == {
        "files": ["checkpoints/rollouts/rollout_0.jsonl"],
        "samples": 4,
        "without_diagnostics": 1,
        "bindings": {
            "general-quality": {"samples": 2, "statuses": {"ok": 2}, "failed_attempts": 1},
            "general-quality_ref": {"samples": 1, "statuses": {"error": 1}, "failed_attempts": 2},
        },
        "invalid": 1,
    }
    warnings = {f.code: f.message for f in result.findings if f.severity == "warning"}
    assert "training_contract_rank0.jsonl:" in warnings["evidence.replay_invalid"]
    assert (
        "rollout_0.jsonl:4: metadata.verifier_diagnostics.general-quality has no status"
        in (warnings["evidence.rollout_invalid"])
    )
    assert main([str(b.path)]) == 0
    text = capsys.readouterr().out
    assert "replay routes: 3 line(s) on 2 rank(s)" in text
    assert "general-quality_ref: 1 sample(s) (error 1), 2 failed attempt(s)" in text


def test_a_run_without_replay_or_rollout_records_reports_none_and_no_finding(tmp_path: Path) -> None:
    b = build(tmp_path, MILES, 'driver.evidence.rollouts="checkpoints/rollouts"')  # declared, never written
    miles_contract(b, 2)
    write_jsonl(b.path / "checkpoints" / "publication.jsonl", [{"version": 1}])
    judge_log(b, 4)
    result = audit_run(b.path)
    assert result.verdict == "pass", errors(result)
    assert result.training is not None
    ev = result.training["evidence"]
    assert (ev["replay_routes"], ev["rollout_diagnostics"]) == (None, None)
    assert not [f for f in result.findings if f.code.startswith("evidence.")]
