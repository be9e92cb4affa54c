"""The real trainer (examples/torch_trainer.py: torch.distributed over gloo, one rank per node, at
the agent's rendezvous) under three local agents (issue 49). One rank skips one all_reduce: the
driver's node calls the hang, every node keeps its ranks' collectives (collectives-RANK.json,
schema-valid) before the teardown, and the audit's first lines name the collective and the rank
that never entered it. `make demo` runs the same trainer to an audit PASS; `make faults` runs this
row and the size-mismatch and killed-rank rows three times each."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit._report_html import render as render_html
from audit._report_text import render
from audit.api import audit_run
from schemas import names
from tests.harness import assert_artifacts_valid, assert_nothing_left, failures, launch_local, read, small_spec, uid
from tests.harness.audit_head import first_cause_problem

pytestmark = [pytest.mark.slow, pytest.mark.ray]
TRAINER = Path(__file__).resolve().parent.parent / "examples" / "torch_trainer.py"


def test_a_rank_that_skips_an_all_reduce_is_named_with_the_collective(tmp_path: Path) -> None:
    driver = (
        f'command = ["python", "{TRAINER}"]\nprogress_timeout = 8\ncollective_trace = true\n'
        'env = {TRAINER_SKIP = "1:2", TRAINER_COLLECTIVE_TIMEOUT = "300"}'
    )
    spec = small_spec(driver=driver, ray=True, heartbeat_timeout=10, startup_timeout=240)
    run = launch_local(tmp_path, spec, uid("trainer-skip"))
    assert run.wait(400) == 1, run.text[-3000:]
    recs = failures(run.run_dir)
    assert recs[0]["kind"] == "hang" and recs[0]["hang"]["last_step"] == 1, recs[0]
    for rank in range(3):  # every node asked its rank before any node tore down
        [proc] = read(run.run_dir, names.collectives(rank))["processes"]
        assert proc["rank"] == rank and proc["backend"] == "gloo" and proc["role"] == "ray_worker", proc
    assert_artifacts_valid(run.run_dir)
    result = audit_run(run.run_dir)
    assert result.collectives is not None
    [stuck] = result.collectives.stuck
    # Step 2's statistics all_reduce (#4: each step reduces the gradients, then the statistics).
    assert stuck.headline().startswith("rank 1 never entered all_reduce #4 of default_pg (sizes [2])"), stuck
    report = render(result)
    assert first_cause_problem(report, rank=0, kinds=["hang"], words=["rank 1 never entered all_reduce #4"]) is None, (
        report[:2000]
    )
    assert '<div id="collectives">' in render_html(result)
    assert result.to_json()["collectives"]["stuck"][0]["never_entered"] == [1]
    assert_nothing_left(run.run_dir)
