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
    doc |= {"rank": 0, "attempt": attempt, "pid": 100 + attempt, "at": "2026-12-04T18:00:00.000Z"}
    return orjson.dumps(doc) + b"\n"


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
