"""Hostile run directories: every kind of broken artifact is a finding, never a traceback.

The fuzz test mutates copies of the realistic scenarios (truncate, flip bytes, wrong types,
deleted keys, symlinks, huge and sparse files, non-UTF-8, FIFOs, directories in place of files,
deep nesting) and runs the whole audit and every renderer with no safety net: the only allowed
exception is UnusableRunDir (when spec.json itself was destroyed), and the internal seat belt
(`audit.internal`) must never fire.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit import _report_html as report_html
from audit import _report_json as report_json
from audit import _report_text as report_text
from audit.api import audit_run
from audit.safedir import UnusableRunDir
from schemas.safe_io import MAX_ARTIFACT_BYTES
from tests.harness.rundirs import SCENARIOS, RunBuilder

BASES: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunBuilder]:
    root = tmp_path_factory.mktemp("bases")
    built = {name: fn(root / name) for name, fn in SCENARIOS.items()}
    BASES.update({name: b.path for name, b in built.items()})
    return built


def files_of(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and not p.is_symlink())


WRONG_VALUES: list[Any] = [None, True, -1, 2**80, 1.5e308, "", "x" * 300, [], {}, [1, "a"], {"a": {"b": []}}]


def _json_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _json_paths(v, (*prefix, i))
    return out


def _edit_json(target: Path, data: st.DataObject, delete: bool) -> None:
    try:
        doc = json.loads(target.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return
    paths = _json_paths(doc)
    if not paths:
        return
    where = data.draw(st.sampled_from(paths))
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = data.draw(st.sampled_from(WRONG_VALUES))
    target.write_text(json.dumps(doc))


MUTATIONS = [
    "truncate",
    "flip",
    "wrong_type",
    "delete_key",
    "symlink",
    "huge",
    "non_utf8",
    "empty",
    "fifo",
    "directory",
    "deep",
    "array",
    "nan",
    "symlink_dir",
]


def mutate(path: Path, data: st.DataObject) -> str:
    files = files_of(path)
    rel = data.draw(st.sampled_from(files))
    kind = data.draw(st.sampled_from(MUTATIONS))
    target = path / rel
    raw = target.read_bytes()
    if kind == "truncate":
        target.write_bytes(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)))])
    elif kind == "flip":
        buf = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 8))):
            if buf:
                i = data.draw(st.integers(0, len(buf) - 1))
                buf[i] = data.draw(st.integers(0, 255))
        target.write_bytes(bytes(buf))
    elif kind in ("wrong_type", "delete_key"):
        _edit_json(target, data, delete=kind == "delete_key")
    elif kind == "symlink":
        target.unlink()
        os.symlink(
            data.draw(st.sampled_from(["/dev/zero", "/etc/hostname", str(path / "spec.json"), "nowhere"])), target
        )
    elif kind == "huge":
        with open(target, "r+b") as fh:  # sparse: big to the reader, cheap to make
            fh.truncate(MAX_ARTIFACT_BYTES + data.draw(st.integers(1, 4096)))
    elif kind == "non_utf8":
        target.write_bytes(raw[: len(raw) // 2] + b"\xff\xfe\xc3" + raw[len(raw) // 2 :])
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "fifo":
        target.unlink()
        os.mkfifo(target)
    elif kind == "directory":
        target.unlink()
        target.mkdir()
    elif kind == "deep":
        n = data.draw(st.sampled_from([10, 1000, 100_000]))
        target.write_bytes(b"[" * n + b"]" * n)
    elif kind == "array":
        target.write_bytes(b'[{"schema": "spec"}]')
    elif kind == "nan":
        target.write_bytes(raw.replace(b"0", b"NaN", 1))
    elif kind == "symlink_dir":
        sub = target.parent
        if sub != path:
            shutil.rmtree(sub)
            os.symlink("/tmp", sub)
    return f"{kind} {rel}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), scenario=st.sampled_from(sorted(SCENARIOS)), rounds=st.integers(1, 4))
def test_fuzzed_run_dirs_never_crash(data: st.DataObject, scenario: str, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run"
        shutil.copytree(BASES[scenario], path, symlinks=True)
        done = [mutate(path, data) for _ in range(rounds)]
        try:
            result = audit_run(path)
        except UnusableRunDir as exc:
            assert "spec.json" in str(exc), done
            return
        assert "audit.internal" not in result.codes(), (done, [f.to_json() for f in result.findings])
        assert result.verdict in ("pass", "fail")
        report_text.render(result)
        doc = json.loads(report_json.render(result))
        assert doc["verdict"] == result.verdict
        assert report_html.render(result).startswith("<!DOCTYPE html>")


HOSTILE_CASES = {
    "fifo": lambda p: (os.unlink(p / "registry.json"), os.mkfifo(p / "registry.json")),
    "huge": lambda p: open(p / "complete.json", "r+b").truncate(MAX_ARTIFACT_BYTES * 2),  # noqa: SIM115
    "spec_symlink": lambda p: (os.unlink(p / "spec.json"), os.symlink("/etc/hostname", p / "spec.json")),
    "escape_codes": lambda p: (p / "\x1b[31mred.json").write_text("{}"),
    "non_utf8_name": lambda p: (p / os.fsdecode(b"\xff\xfe.json")).write_text("{}"),
    "deep": lambda p: (p / "placement-0.json").write_bytes(b"[" * 200_000 + b"]" * 200_000),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CASES))
def test_cli_subprocess_exit_codes_without_traceback(case: str, tmp_path: Path) -> None:
    path = tmp_path / "run"
    shutil.copytree(BASES["success"], path, symlinks=True)
    HOSTILE_CASES[case](path)
    html = tmp_path / "r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "audit.cli", str(path), "--html", str(html)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 1, 2)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    assert b"\x1b" not in proc.stdout  # terminal escape sequences from file names are neutralised
    if case == "spec_symlink":
        assert proc.returncode == 2
    elif case in ("escape_codes", "non_utf8_name"):
        assert proc.returncode == 0 and b"file.unknown" in proc.stdout  # unknown files are not fatal
    else:
        assert proc.returncode == 1 and html.exists()
