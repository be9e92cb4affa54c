"""The documentation site (issue 53): README is a front page; every failure kind and audit finding
code has its troubleshooting entry; the generated pages are current; the commands the guides
mark runnable run; every measurement says its date, commit and machine. (`mkdocs build --strict`
itself runs in `make lint`.)"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from docsgen import pages, troubleshooting
from docsgen.audit_codes import audit_codes
from schemas.vocab import FailureKind

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RUNNABLE = re.compile(r"<!-- runnable[^>]*-->\s*\n\s*```console\n(.*?)\n\s*```", re.S)


def test_every_failure_kind_has_a_troubleshooting_entry() -> None:
    entries = troubleshooting.kind_entries()
    kinds = {k.value for k in FailureKind}
    missing, unknown = sorted(kinds - entries.keys()), sorted(entries.keys() - kinds)
    assert not missing, f"failure kinds without an entry in docsgen/{troubleshooting.KINDS_FILE.name}: {missing}"
    assert not unknown, f"entries in docsgen/{troubleshooting.KINDS_FILE.name} for no failure kind: {unknown}"


def test_every_audit_code_has_a_troubleshooting_entry() -> None:
    entries = troubleshooting.code_entries()
    codes = set(audit_codes())
    assert len(codes) > 100  # the scan still finds the audit's codes
    missing, unknown = sorted(codes - entries.keys()), sorted(entries.keys() - codes)
    assert not missing, f"finding codes without an entry in docsgen/{troubleshooting.CODES_FILE.name}: {missing}"
    assert not unknown, f"entries in docsgen/{troubleshooting.CODES_FILE.name} for no finding code: {unknown}"


def test_audit_code_scan_finds_a_new_finding(tmp_path: Path) -> None:
    """A code the audit starts reporting is found without a list to update."""
    (tmp_path / "audit").mkdir()
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "safe_io.py").write_text('CODE = "file.bad_name"\n')
    (tmp_path / "audit" / "_new.py").write_text(
        'from audit._model import Finding\nNAME = "spec.json"\n\n'
        'def check() -> list[Finding]:\n    return [Finding("warning", "data.skipped", "x")]\n'
    )
    assert audit_codes(tmp_path) == ["data.skipped", "file.bad_name"]


def test_generated_pages_are_current() -> None:
    assert pages.stale() == [], "run python -m docsgen"


def test_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    assert lines[3].startswith("make demo") and lines[4].startswith("make test")
    for target in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (REPO / target).is_file(), target


def _runnable_commands() -> list[tuple[str, str]]:
    found = []
    for page in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for block in RUNNABLE.findall(page.read_text()):
            for line in block.splitlines():
                if line.strip().startswith("$ "):
                    found.append((str(page.relative_to(REPO)), line.strip()[2:]))
    return found


COMMANDS = _runnable_commands()


def test_the_guides_have_runnable_commands() -> None:
    pages_with = {page for page, _ in COMMANDS}
    assert {
        "README.md",
        "docs/guides/local-run.md",
        "docs/guides/slurm.md",
        "docs/guides/nemo-gym.md",
        "docs/guides/sample-ledger.md",
    } <= pages_with


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_a_guide_command_runs(page: str, command: str) -> None:
    argv = shlex.split(command)
    assert argv[0] in {"gym-launch", "gym-agent", "gym-audit"}, f"{page}: only the project's commands run here"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("GYM_RUN_SPEC", None)
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{page}: `{command}` exited {done.returncode}:\n{done.stderr[-2000:]}"


def test_every_measurement_says_when_where_and_what() -> None:
    records = sorted((REPO / "measurements").glob("*.json"))
    assert {"faults.json", "tests.json"} <= {p.name for p in records}
    for path in records:
        doc = json.loads(path.read_text())
        for key in ("title", "command", "date", "commit", "machine"):
            assert doc.get(key), f"{path.name}: no {key}"
        assert "text" in doc or (doc["columns"] and all(len(r) == len(doc["columns"]) for r in doc["rows"])), path.name
