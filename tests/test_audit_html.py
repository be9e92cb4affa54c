"""The HTML report rendered by a real headless Chromium: the timeline and the GPU map are in the DOM
after rendering, a screenshot is produced, and the page fetches nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from audit_rundirs import judge_failure, success

from audit.api import audit_run
from audit.report_html import render

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`; `make test` installs it)"
)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("html")
    out = {}
    for name, build in (("success", success), ("judge_failure", judge_failure)):
        result = audit_run(build(root / name).path)
        page = root / f"{name}.html"
        page.write_text(render(result), encoding="utf-8")
        out[name] = page
    return out


@pytest.mark.parametrize("name", ["success", "judge_failure"])
def test_timeline_and_gpu_map_render(reports: dict[str, Path], tmp_path: Path, name: str) -> None:
    proc = chromium(tmp_path, "--dump-dom", reports[name].as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # The timeline: one row per replica, one bar per recorded phase.
    assert 'id="timeline"' in dom and "<svg" in dom
    assert len(re.findall(r'<g class="replica" data-rank="\d"', dom)) == 3
    bars = re.findall(r'<rect class="phase phase-(\w+)" data-phase="(\w+)"', dom)
    if name == "success":
        assert len(bars) == 3 * 14 and {o for o, _ in bars} == {"ok"}
    else:
        assert ("failed", "driver") in bars
        assert 'class="failure-marker"' in dom
    # The GPU map: three nodes of eight cells; 4 trainer, 19 rollout, 1 judge.
    assert len(re.findall(r'<div class="node" data-node="\d"', dom)) == 3
    roles = re.findall(r'class="gpu gpu-(\w+)" data-device', dom)
    assert len(roles) == 24
    assert (roles.count("trainer"), roles.count("rollout"), roles.count("judge")) == (4, 19, 1)
    assert 'id="verdict"' in dom


def test_screenshot(reports: dict[str, Path], tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    proc = chromium(tmp_path, "--window-size=1280,1400", f"--screenshot={shot}", reports["judge_failure"].as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses far smaller


def test_page_is_self_contained(reports: dict[str, Path]) -> None:
    page = reports["judge_failure"].read_text()
    assert "<script" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "default-src 'none'" in page  # CSP: the browser may not fetch anything
