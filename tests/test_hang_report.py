"""The audit of a hang (a realistic run directory, tests/harness/rundirs.py `hang`): first cause
`hang` on the driver's rank with how long and the last step, the stacks grouped across ranks with
the odd one out named, in text, --json and the HTML report, which a real headless Chromium renders
(screenshot, DOM). The grouping rules on their own: tests/test_audit_stacks.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from audit._report_html import render as render_html
from audit._report_text import render as render_text
from audit.api import audit_run
from tests.harness import BIN
from tests.harness.rundirs import hang
from tests.test_audit_html import CHROMIUM, chromium


def test_the_audit_names_the_hang_and_the_odd_one_out(tmp_path: Path) -> None:
    b = hang(tmp_path, stuck_rank=2)
    result = audit_run(b.path)
    fc = result.first_cause
    assert fc is not None and fc.kind == "hang" and fc.rank == b.driver_rank
    assert fc.hang is not None and fc.hang["last_step"] == 3 and fc.hang["idle_seconds"] == 600.4
    text = render_text(result)
    block = text[text.index("First cause:") :].splitlines()[:6]
    assert f"rank {b.driver_rank}, hang" in block[1] and "no progress for 600.4s" in block[1] and "step 3" in block[1]
    # Where the run was stuck, right under the headline (the grouped stacks follow the log).
    assert block[2].strip() == "odd one out: rank 2, Ray worker pid 4713: load_weights ← run", block
    assert "ranks 0–1, 2 Ray workers: barrier ← run" in text
    cli = subprocess.run([str(BIN / "gym-audit"), str(b.path), "--json"], capture_output=True, text=True, check=False)
    doc = json.loads(cli.stdout)
    assert cli.returncode == 1 and doc["first_cause"]["kind"] == "hang" and doc["first_cause"]["rank"] == b.driver_rank
    assert doc["stacks"]["odd_ones_out"] == ["rank 2, Ray worker pid 4713: load_weights ← run"]
    assert doc["stacks"]["ranks"] == [0, 1, 2] and doc["stacks"]["missing_ranks"] == []


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`; `make browser`)")
def test_the_html_report_shows_the_grouped_stacks_in_a_browser(tmp_path: Path) -> None:
    b = hang(tmp_path / "run", stuck_rank=2)
    page = tmp_path / "hang.html"
    page.write_text(render_html(audit_run(b.path)), encoding="utf-8")
    proc = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'id="stacks"' in dom and dom.count('<tr class="odd">') == 1
    odd = dom[dom.index('<tr class="odd">') :]
    odd = odd[: odd.index("</tr>")]
    assert "rank 2, Ray worker pid 4713" in odd and "load_weights ← run" in odd
    assert "barrier ← run" in dom and "train ← &lt;module&gt;" in dom
    shot = tmp_path / "hang.png"
    proc = chromium(tmp_path, "--window-size=1280,1100", f"--screenshot={shot}", page.as_uri())
    assert proc.returncode == 0 and shot.stat().st_size > 10_000, proc.stderr[-2000:]
