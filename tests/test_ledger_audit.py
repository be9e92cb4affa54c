"""The audit's check of the sample ledger across attempts (audit/_ledger.py), on ledger files the
real writer's format: a correct resume passes with its replay counted; a loader that restarts the
epoch has its repeats named; one that skips ahead has the gap named with its attempt and step."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from audit._ledger import check_ledger, ledger_files
from audit.safedir import SafeDir
from schemas import names

ORDER = [f"p{i:03d}" for i in range(40)]


def _line(kind: str, step: int, attempt: int, ids: list[str] | None = None, epoch: int = 0) -> bytes:
    doc: dict = {"schema": "ledger", "schema_version": 1, "kind": kind, "step": step}
    if ids is not None:
        doc |= {"epoch": epoch, "ids": ids}
    doc |= {"rank": 0, "attempt": attempt, "pid": 100 + attempt, "at": _at(attempt, step)}
    return orjson.dumps(doc) + b"\n"


def _at(attempt: int, step: int) -> str:
    """A step's time in the ledger: each (attempt, step) its own, so a report's time names its step."""
    return f"2026-12-04T18:{attempt:02d}:{step % 60:02d}.{step // 60:03d}Z"


def _attempt(root: Path, attempt: int, top: bool, steps: list[tuple[int, list[str]]], ckpts: set[int]) -> None:
    folder = root if top else root / names.attempt_dir(attempt)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / names.ledger(0), "wb") as fh:
        for step, ids in steps:
            fh.write(_line("step", step, attempt, ids))
            if step in ckpts:
                fh.write(_line("checkpoint", step, attempt))


def _batches(start: int, stop: int, first_step: int) -> list[tuple[int, list[str]]]:
    return [(first_step + k, ORDER[i : i + 4]) for k, i in enumerate(range(start, stop, 4))]


def _check(root: Path, order: Path | None) -> tuple[dict, set[str]]:
    with SafeDir(root) as safe:
        top = [p.name for p in root.iterdir() if p.is_file()]
        files = ledger_files(safe, top, 2, [1, 2])
        summary, findings = check_ledger(safe, files, str(order) if order else None)
    return summary.to_json(), {f.code for f in findings}


@pytest.fixture
def order(tmp_path: Path) -> Path:
    path = tmp_path / "order.txt"
    path.write_text("\n".join(ORDER) + "\n")
    return path


def test_a_correct_resume_passes_and_counts_the_replay(tmp_path: Path, order: Path) -> None:
    root = tmp_path / "run"
    # attempt 1: steps 1..6 (ids 0..23), checkpoint at 4, killed after 6; attempt 2 resumes at 5.
    _attempt(root, 1, False, _batches(0, 24, 1), {2, 4})
    _attempt(root, 2, True, _batches(16, 40, 5), set())
    doc, codes = _check(root, order)
    assert not codes & {"data.skipped", "data.repeated", "data.unknown"}, doc
    assert doc["replayed"] == 8 and doc["skipped"]["count"] == 0 and doc["repeated"]["count"] == 0
    assert [a["resumed_from"] for a in doc["attempts"]] == [None, 4]
    assert [a["committed_ids"] for a in doc["attempts"]] == [16, 24]


def test_a_loader_that_restarts_the_epoch_repeats_named(tmp_path: Path, order: Path) -> None:
    root = tmp_path / "run"
    _attempt(root, 1, False, _batches(0, 24, 1), {4})
    _attempt(root, 2, True, _batches(0, 24, 5), set())  # resumes at step 5 but from the epoch's start
    doc, codes = _check(root, order)
    assert "data.repeated" in codes
    assert doc["repeated"]["count"] == 16
    assert doc["repeated"]["ids"][0] == {"id": "p000", "epoch": 0, "attempt": 2, "step": 5}


@pytest.mark.parametrize(("resume_at", "code"), [(0, "data.repeated"), (24, "data.skipped")])
def test_the_first_cause_has_the_time_of_the_step_where_the_data_went_wrong(
    tmp_path: Path, order: Path, resume_at: int, code: str
) -> None:
    from schemas.timefmt import parse_iso

    root = tmp_path / "run"
    _attempt(root, 1, False, _batches(0, 24, 1), {4})
    _attempt(root, 2, True, _batches(resume_at, resume_at + 16, 5), set())  # step 5: the repeat, or the gap
    with SafeDir(root) as safe:
        summary, _ = check_ledger(safe, ledger_files(safe, [names.ledger(0)], 2, [1, 2]), str(order))
    assert summary.first_cause is not None
    assert (summary.first_cause[0], summary.first_cause[3:]) == (code, (2, parse_iso(_at(2, 5))))


def test_a_loader_that_skips_ahead_names_the_gap(tmp_path: Path, order: Path) -> None:
    root = tmp_path / "run"
    _attempt(root, 1, False, _batches(0, 24, 1), {4})
    _attempt(root, 2, True, _batches(24, 40, 5), set())  # resumes at step 5 but 8 ids further
    doc, codes = _check(root, order)
    assert "data.skipped" in codes and "data.repeated" not in codes
    gap = doc["skipped"]["gaps"][0]
    assert (doc["skipped"]["count"], gap["attempt"], gap["step"], gap["from"], gap["to"]) == (8, 2, 5, 16, 24)
    assert gap["ids"][0] == "p016"


def test_a_finished_epoch_must_cover_the_order(tmp_path: Path, order: Path) -> None:
    root = tmp_path / "run"
    _attempt(root, 2, True, _batches(0, 36, 1), set())
    with open(root / names.ledger(0), "ab") as fh:
        fh.write(_line("step", 10, 2, ORDER[:4], epoch=1))
    doc, codes = _check(root, order)
    assert "data.skipped" in codes
    assert doc["skipped"]["gaps"][0] | {"ids": None} == {
        "epoch": 0,
        "from": 36,
        "to": 40,
        "count": 4,
        "attempt": 2,
        "step": 10,
        "ids": None,
    }


def test_without_a_declared_order_nothing_is_checked(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _attempt(root, 2, True, _batches(0, 8, 1), set())
    doc, codes = _check(root, None)
    assert codes == {"data.unchecked"} and doc["checked"] is False


def test_the_bench_scenarios_find_what_each_loader_did() -> None:
    from bench.ledger import check_cost

    found = {loader: check_cost(20_000, 100, 5, loader) for loader in ("correct", "restart", "skip")}
    assert found["correct"]["codes"] == ["data.ledger"] and found["correct"]["replayed"] > 0
    assert "data.repeated" in found["restart"]["codes"] and "data.skipped" not in found["restart"]["codes"]
    assert found["skip"]["skipped"] == 10 * 100 and found["skip"]["repeated"] == 0  # 10 steps, at the first resume


def _built_run(root: Path, order: Path | None, steps: list[tuple[int, list[str]]] | None) -> Path:
    from tests.harness.rundirs import RunBuilder

    b = RunBuilder(root, overrides=(f'driver.ledger.order="{order}"',) if order else ())
    b.startup()
    b.finish()
    for r in b.ranks:
        b.phases(r)
        b.cleanup(r, "success")
    if steps is not None:
        with open(b.path / names.ledger(b.driver_rank), "wb") as fh:
            fh.writelines(_line("step", step, 1, ids) for step, ids in steps)
    return b.path


def test_a_run_that_otherwise_passed_fails_with_its_skip_as_first_cause(tmp_path: Path, order: Path) -> None:
    from audit._report_html import render
    from audit._report_text import render as text_report
    from audit.api import audit_run
    from schemas.timefmt import parse_iso

    run = _built_run(tmp_path, order, _batches(0, 8, 1) + _batches(16, 40, 3))  # ids 8..15 never trained on
    result = audit_run(run, ask_scheduler=False)
    assert result.verdict == "fail" and result.first_cause is not None
    assert (result.first_cause.kind, result.first_cause.attempt) == ("data.skipped", 1)
    assert "attempt 1 at step 3" in result.first_cause.cause
    assert result.first_cause.wall_time == parse_iso(_at(1, 3))  # the step where the gap opened
    assert "unknown time" not in text_report(result) and "18:01:03.000" in text_report(result)
    assert result.to_json()["first_cause"]["wall_time"] == result.first_cause.wall_time
    doc = result.to_json()["ledger"]
    assert doc["skipped"]["count"] == 8 and doc["skipped"]["gaps"][0]["ids"][:2] == ["p008", "p009"]
    page = render(result)
    assert 'id="ledger-stream"' in page and 'class="skipped"' in page


def test_a_correct_ledger_keeps_the_pass_and_a_run_without_one_has_no_ledger_at_all(
    tmp_path: Path, order: Path
) -> None:
    from audit.api import audit_run

    with_ledger = audit_run(_built_run(tmp_path / "a", order, _batches(0, 40, 1)), ask_scheduler=False)
    assert with_ledger.verdict == "pass" and with_ledger.first_cause is None
    assert with_ledger.to_json()["ledger"]["attempts"][0]["committed_ids"] == 40
    without = audit_run(_built_run(tmp_path / "b", order, None), ask_scheduler=False)
    assert without.verdict == "pass" and without.ledger is None
    assert not [f for f in without.findings if f.code.startswith("data.")]


def test_an_order_edited_after_the_run_started_is_said_with_both_hashes(tmp_path: Path, order: Path) -> None:
    import hashlib

    from audit.api import audit_run
    from tests.harness.agents import assert_artifacts_valid

    run = _built_run(tmp_path, order, _batches(0, 40, 1))
    assert_artifacts_valid(run)  # spec.json with the order's identity against its schema
    kept = orjson.loads((run / names.SPEC).read_bytes())["ledger_order"]
    then = hashlib.sha256(order.read_bytes()).hexdigest()
    assert kept == {"path": str(order), "sha256": then, "lines": 40}
    same = audit_run(run, ask_scheduler=False)
    assert same.verdict == "pass" and "data.order_changed" not in {f.code for f in same.findings}
    order.write_text("\n".join([*ORDER, "p040"]) + "\n")  # a line added after the run: checked as edited
    now = hashlib.sha256(order.read_bytes()).hexdigest()
    changed = [f for f in audit_run(run, ask_scheduler=False).findings if f.code == "data.order_changed"]
    assert len(changed) == 1 and changed[0].severity == "warning", changed
    assert all(w in changed[0].message for w in (str(order), then, now, "40 lines", "41 lines")), changed[0]


def test_the_launcher_records_the_order_it_starts_with(tmp_path: Path, order: Path) -> None:
    import hashlib

    from launch.backends.rundir import claim_run_dir
    from launch.spec.config import RunConfig
    from launch.spec.load import load_spec
    from tests.harness.agents import assert_artifacts_valid
    from tests.harness.rundirs import DEMO

    config = RunConfig.from_spec(load_spec(DEMO, [f'driver.ledger.order="{order}"']))
    with claim_run_dir(tmp_path / "out", "u1", config, str(DEMO), resume=False) as run:
        assert_artifacts_valid(run.path)
        kept = orjson.loads((run.path / names.SPEC).read_bytes())["ledger_order"]
    assert kept == {"path": str(order), "sha256": hashlib.sha256(order.read_bytes()).hexdigest(), "lines": 40}


def test_the_shuffle_rule_is_pinned() -> None:
    # Drivers shuffle by it and the audit recomputes it, maybe years apart: a change breaks both.
    from agent.driver_api import epoch_order

    assert epoch_order(10, 1, 0).tolist() == [3, 0, 4, 1, 9, 7, 5, 6, 8, 2]
    assert epoch_order(10, 1, 1).tolist() == [4, 1, 5, 9, 0, 8, 7, 6, 2, 3]
    assert sorted(epoch_order(1000, 5, 3).tolist()) == list(range(1000))


def _shuffled_batches(epoch: int, start: int, stop: int, first_step: int) -> list[tuple[int, list[str]]]:
    from agent.driver_api import epoch_order

    perm = epoch_order(len(ORDER), 7, epoch)
    ids = [ORDER[p] for p in perm]
    return [(first_step + k, ids[i : i + 4]) for k, i in enumerate(range(start, stop, 4))]


def _write(root: Path, attempt: int, top: bool, steps: list[tuple[int, int, list[str]]], ckpts: set[int]) -> None:
    folder = root if top else root / names.attempt_dir(attempt)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / names.ledger(0), "wb") as fh:
        for epoch, step, ids in steps:
            fh.write(_line("step", step, attempt, ids, epoch=epoch))
            if step in ckpts:
                fh.write(_line("checkpoint", step, attempt))


@pytest.mark.parametrize(("skip", "expected"), [(0, 0), (8, 8)])
def test_a_shuffled_run_over_two_epochs_is_checked_in_each_epochs_order(
    tmp_path: Path, order: Path, skip: int, expected: int
) -> None:
    root = tmp_path / "run"
    epoch0 = [(0, s, ids) for s, ids in _shuffled_batches(0, 0, 40, 1)]  # steps 1..10
    epoch1 = [(1, s, ids) for s, ids in _shuffled_batches(1, 0, 40, 11)]  # steps 11..20
    _write(root, 1, False, epoch0 + epoch1[:4], {12})  # killed at step 14, checkpoint 12
    resumed = [(1, s, ids) for s, ids in _shuffled_batches(1, 8 + skip, 32, 13)]  # ends mid-epoch
    _write(root, 2, True, resumed, set())
    with SafeDir(root) as safe:
        files = ledger_files(safe, [names.ledger(0)], 2, [1, 2])
        summary, _ = check_ledger(safe, files, str(order), shuffle_seed=7)
        plain, _ = check_ledger(safe, files, str(order))
    doc = summary.to_json()
    assert (doc["skipped"]["count"], doc["repeated"]["count"], doc["replayed"]) == (expected, 0, 8)
    if skip:
        gap = doc["skipped"]["gaps"][0]
        assert (gap["epoch"], gap["attempt"], gap["step"]) == (1, 2, 13)
    else:  # read in the file's own order, the ids the unfinished epoch has not reached yet look skipped
        assert plain.to_json()["skipped"]["count"] > 0


def test_an_attempt_that_trained_nothing_leaves_the_one_before_it_the_runs_end(tmp_path: Path, order: Path) -> None:
    root = tmp_path / "run"
    _attempt(root, 1, False, _batches(0, 40, 1), {4})
    _attempt(root, 2, True, [], set())  # resumed, then died before its first step
    doc, codes = _check(root, order)
    assert "data.skipped" not in codes and doc["replayed"] == 0
    assert [a["committed_ids"] for a in doc["attempts"]] == [40, 0]


@pytest.mark.parametrize("seed", [None, 7])
def test_ids_that_no_line_of_the_order_can_be_are_unknown_never_matched_across_lines(
    tmp_path: Path, order: Path, seed: int | None
) -> None:
    root = tmp_path / "run"
    _attempt(root, 2, True, [(1, ["p000\np001", "", "p000"]), (2, ['p001"', "p002"])], set())
    with SafeDir(root) as safe:
        summary, findings = check_ledger(safe, ledger_files(safe, [names.ledger(0)], 2, [2]), str(order), seed)
    doc = summary.to_json()
    assert doc["unknown"]["count"] == 3
    assert [u["id"] for u in doc["unknown"]["ids"]] == ["p000\np001", "", 'p001"']
    assert "audit.internal" not in {f.code for f in findings}


def test_an_epoch_only_the_replay_reached_does_not_finish_the_one_before(tmp_path: Path, order: Path) -> None:
    root = tmp_path / "run"
    epoch0 = [(0, s, ids) for s, ids in _batches(0, 40, 1)]  # steps 1..10
    epoch1 = [(1, 11, ORDER[0:4]), (1, 12, ORDER[4:8])]
    replay = [(2, 13, ORDER[0:4]), (2, 14, ORDER[4:8])]  # after checkpoint 12, then killed
    _write(root, 1, False, epoch0 + epoch1 + replay, {12})
    _write(root, 2, True, [(1, 13 + k, ORDER[i : i + 4]) for k, i in enumerate(range(8, 20, 4))], set())
    doc, codes = _check(root, order)
    assert (doc["skipped"]["count"], doc["repeated"]["count"], doc["replayed"]) == (0, 0, 8), doc["skipped"]


def _reference(attempts: dict[int, list[tuple[str, int, list[str], int]]], seed: int | None) -> tuple[int, int]:
    """(repeated, skipped) by brute force: the cut per attempt, then each epoch's ids against its order."""
    from agent.driver_api import epoch_order

    firsts = {a: next((s for k, s, _, _ in lines if k == "step"), None) for a, lines in attempts.items()}
    saved: list[int] = []
    per: dict[int, list[str]] = {}
    for a, lines in sorted(attempts.items()):
        nxt = next((firsts[m] for m in sorted(attempts) if m > a and firsts[m] is not None), None)
        saved += [s for k, s, _, _ in lines if k == "checkpoint"]
        before = [c for c in saved if nxt is not None and c < nxt]
        cut = None if nxt is None else (max(before) if before else (-1 if saved else nxt - 1))
        for kind, step, ids, epoch in lines:
            if kind == "step" and (cut is None or step <= cut):
                per.setdefault(epoch, []).extend(ids)
    repeated = skipped = 0
    for epoch, ids in per.items():
        perm = range(len(ORDER)) if seed is None else epoch_order(len(ORDER), seed, epoch).tolist()
        line_of = {ORDER[p]: k for k, p in enumerate(perm)}
        repeated += len(ids) - len(set(ids))
        limit = len(ORDER) if epoch < max(per) else max(line_of[x] + 1 for x in ids)
        skipped += sum(1 for k in range(limit) if ORDER[perm[k]] not in set(ids))
    return repeated, skipped


@pytest.mark.parametrize("seed", [None, 11])
def test_the_check_agrees_with_a_brute_force_reading_of_random_resumed_streams(
    tmp_path: Path, seed: int | None
) -> None:
    import random

    from agent.driver_api import epoch_order

    rng = random.Random(seed or 3)
    order = tmp_path / "order.txt"
    order.write_text("\n".join(ORDER) + "\n")
    for trial in range(120):
        root = tmp_path / f"run{trial}"
        attempts: dict[int, list[tuple[str, int, list[str], int]]] = {}
        step = 1
        for a in (1, 2, 3):
            step = max(1, step - rng.randrange(0, 6)) if a > 1 else step
            lines: list[tuple[str, int, list[str], int]] = []
            for _ in range(rng.randrange(0, 10)):
                epoch = rng.randrange(0, 2)
                perm = range(len(ORDER)) if seed is None else epoch_order(len(ORDER), seed, epoch).tolist()
                start, k = rng.randrange(0, len(ORDER)), rng.randrange(1, 9)
                ids = [ORDER[perm[p]] for p in range(start, min(len(ORDER), start + k))]
                lines.append(("step", step, ids if rng.random() < 0.7 else rng.sample(ORDER, k), epoch))
                if rng.random() < 0.3:
                    lines.append(("checkpoint", step, [], 0))
                step += 1
            attempts[a] = lines
            folder = root if a == 3 else root / names.attempt_dir(a)
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / names.ledger(0), "wb") as fh:
                for kind, s, ids, epoch in lines:
                    fh.write(_line(kind, s, a, ids if kind == "step" else None, epoch))
        with SafeDir(root) as safe:
            summary, _ = check_ledger(safe, ledger_files(safe, [names.ledger(0)], 3, [1, 2, 3]), str(order), seed)
        doc = summary.to_json()
        assert (doc["repeated"]["count"], doc["skipped"]["count"]) == _reference(attempts, seed), trial
