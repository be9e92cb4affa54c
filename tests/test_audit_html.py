"""The HTML report rendered by a real headless Chromium: the timeline and the GPU map are in the DOM
after rendering, a screenshot is produced, and the page fetches nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from audit._report_html import PHASE_COLORS, ROLE_COLORS, render
from audit.api import audit_run
from tests.harness.rundirs import judge_failure, success

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
    bars = re.findall(r'<rect class="phase phase-(\w+)(?: first-cause)?" data-phase="(\w+)"', dom)
    if name == "success":
        recorded = success(tmp_path / "again").lifecycle  # each rank's phases, from the step table
        assert len(bars) == sum(map(len, recorded.values())) and {o for o, _ in bars} == {"ok"}
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


def _replica_group(dom: str, rank: int) -> str:
    m = re.search(rf'<g class="replica" data-rank="{rank}">(.*?)</g>', dom, re.S)
    assert m, f"no timeline row for rank {rank}"
    return m.group(1)


def test_first_cause_is_highlighted_not_the_reactions(reports: dict[str, Path], tmp_path: Path) -> None:
    proc = chromium(tmp_path, "--dump-dom", reports["judge_failure"].as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    first = re.findall(r'<rect class="phase phase-failed first-cause" data-phase="(\w+)"', dom)
    assert first == ["driver"], first  # exactly one bar: the root cause's
    culprit = next(int(m) for m in re.findall(r'data-rank="(\d)">(?:(?!</g>).)*first-cause"', dom, re.S))
    assert 'class="first-cause-label"' in _replica_group(dom, culprit)
    for rank in {0, 1, 2} - {culprit}:
        row = _replica_group(dom, rank)
        assert "first-cause" not in row
        reacting = re.findall(r'<rect class="phase phase-failed"[^>]*>', row)
        assert reacting and all("fill-opacity" in r and "#c62828" not in r for r in reacting), reacting
    assert dom.count("first-cause-marker") == 1


def test_page_shows_start_and_total_duration(reports: dict[str, Path], tmp_path: Path) -> None:
    proc = chromium(tmp_path, "--dump-dom", reports["success"].as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    start = re.search(r'<span id="run-start">([^<]+)</span>', proc.stdout)
    took = re.search(r'<span id="run-duration">([\d.]+) s</span>', proc.stdout)
    assert start and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", start.group(1))
    assert took and float(took.group(1)) > 0


@pytest.mark.parametrize("width", [640, 1600])
def test_timeline_fits_the_page_width(reports: dict[str, Path], tmp_path: Path, width: int) -> None:
    """Measured in the browser: the copy gets a probe script (the report itself has none and its
    CSP forbids scripts, so the probe's copy drops the CSP) that writes the laid-out widths into the DOM."""
    page = reports["judge_failure"].read_text()
    page = re.sub(r"<meta http-equiv=\"Content-Security-Policy\"[^>]*>", "", page)
    probe = (
        "<script>window.addEventListener('load',()=>{const s=document.querySelector('svg.timeline')"
        ".getBoundingClientRect();const p=document.createElement('pre');p.id='probe';"
        "p.textContent=JSON.stringify({svg:s.width,right:s.right,view:document.documentElement.clientWidth,"
        "scroll:document.documentElement.scrollWidth});document.body.appendChild(p);});</script>"
    )
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe + "</body>"))
    proc = chromium(tmp_path, f"--window-size={width},900", "--virtual-time-budget=3000", "--dump-dom", probed.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="probe">([^<]+)</pre>', proc.stdout)
    assert m, proc.stdout[-1500:]
    import json

    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["right"] <= got["view"] + 1, got  # the chart ends inside the viewport
    assert got["scroll"] <= got["view"] + 1, got  # and nothing makes the page scroll sideways
    assert got["svg"] >= 0.6 * got["view"], got  # it uses the width it has (no fixed 1070 px)


def test_role_colours_differ_from_phase_colours() -> None:
    assert not set(ROLE_COLORS.values()) & set(PHASE_COLORS.values())


def _with_gateway_log(root: Path) -> Path:
    """The success run plus its judge's gateway log: 24 training replies over three minutes (their
    latency rising), 4 canaries and a timeout, as the gateway writes them."""
    import orjson

    from schemas import names
    from schemas.timefmt import iso_ms
    from tests.harness.rundirs import T0

    run = success(root)
    lines = []
    for i in range(30):
        canary, timeout = i < 4, i == 29
        lines.append(
            {
                "schema": "judge-gateway",
                "schema_version": 1,
                "seq": i + 1,
                "writer": "0123456789ab",
                "at": iso_ms(T0 + 20 + i * 6),
                "judge": "general",
                "rank": run.judge_rank,
                "attempt": 1,
                "fingerprint": run.fingerprint,
                "caller": "10.0.0.9:40000",
                "method": "POST",
                "path": "/v1/chat/completions",
                "generation": True,
                "canary": canary,
                "stream": False,
                "status": 504 if timeout else 200,
                "outcome": "timeout" if timeout else "replied",
                "latency_ms": 100.0 + 10 * i,
                "queue_ms": float(i % 5),
                "first_byte_ms": None if timeout else 90.0,
                "prompt_tokens": None if timeout else 120,
                "completion_tokens": None if timeout else 30,
                "finish_reason": None if timeout else "stop",
                "request_sha256": "0" * 64,
                "bytes_in": 500,
                "bytes_out": 300,
                "error": "no answer within the judge's timeout 60 s" if timeout else None,
            }
        )
    (run.path / names.gateway_log("general")).write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return run.path


def test_judge_and_training_charts_render_in_chromium(tmp_path: Path) -> None:
    result = audit_run(_with_gateway_log(tmp_path / "gw"))
    assert result.verdict == "pass", [f.code for f in result.errors]
    g = result.judge_gateways["general"]  # type: ignore[index]
    assert (g["requests"], g["replies"], g["canary"], g["errors"]) == (30, 25, 4, {"timeout": 1})
    assert g["latency_ms"]["p50"] == 240.0 and g["latency_ms"]["p99"] == 380.0
    # The same account in the text and JSON reports.
    from audit import _report_json as report_json
    from audit import _report_text as report_text

    text = report_text.render(result)
    assert "judge general (gateway): 30 request(s), 25 replies (+4 canary); errors: timeout 1" in text
    assert "latency p50 240 ms, p90 360 ms, p99 380 ms; queue wait p50 2 ms" in text
    assert json.loads(report_json.render(result))["judge_gateways"]["general"]["queue_ms"]["max"] == 4.0
    page = tmp_path / "report.html"
    page.write_text(render(result), encoding="utf-8")
    proc = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'id="judges"' in dom and 'id="judge-stats"' in dom and "timeout 1" in dom
    bars = re.findall(r'<rect class="bar" data-value="(\d+)"', dom)
    assert sum(map(int, bars)) == 30 and len(bars) == 3  # requests per minute, three minutes
    latency = dom.split('id="judge-general-latency"', 1)[1].split("</svg>", 1)[0]
    assert latency.count('class="point"') == 3
    loss = dom.split('id="training-loss"', 1)[1].split("</svg>", 1)[0]
    assert loss.count('class="point"') == 3  # driver-result.json's three losses
    assert 'id="training-summary"' in dom and "3 optimizer step(s)" in dom
    shot = tmp_path / "charts.png"
    proc = chromium(tmp_path, "--window-size=1280,2600", f"--screenshot={shot}", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
