"""The stacks summary's rules (audit/stacks.py): same innermost frames are one group, the odd one
out is a process no other of its role shares frames with, Ray's own daemons are never it; what
limited the stacks is said. And the first-cause rule a hang brings (audit/_first_cause.py)."""

from __future__ import annotations

from typing import Any

from audit.stacks import ranks_text, shown_frames, summarise
from tests.harness.rundirs import RAY_WORKER, THREADING, TRAIN, _frames, stack_process, stacks_fields
from tests.test_audit_first_cause import first, rec

BARRIER = _frames(("wait", THREADING, 629), ("barrier", TRAIN, 16), ("run", TRAIN, 22))
STUCK = _frames(("load_weights", TRAIN, 12), ("run", TRAIN, 20))
IDLE = _frames(("main_loop", RAY_WORKER, 900))


def docs(per_rank: dict[int, list[dict[str, Any]]], **over: Any) -> dict[int, dict[str, Any]]:
    return {r: stacks_fields(procs, **over) for r, procs in per_rank.items()}


def test_the_process_no_other_of_its_role_shares_frames_with_is_the_odd_one_out() -> None:
    s = summarise(
        docs(
            {
                0: [stack_process(10, "ray_worker", BARRIER), stack_process(20, "ray_worker", IDLE)],
                1: [stack_process(11, "ray_worker", BARRIER), stack_process(21, "ray_worker", IDLE)],
                2: [stack_process(12, "ray_worker", STUCK), stack_process(22, "ray_worker", IDLE)],
            }
        ),
        [],
        range(3),
    )
    assert s is not None
    assert [g.line() for g in s.odd] == ["rank 2, Ray worker pid 12: load_weights ← run"]
    lines = s.lines()
    assert lines[1] == "odd one out: rank 2, Ray worker pid 12: load_weights ← run"
    assert "ranks 0–1, 2 Ray workers: barrier ← run" in lines and "ranks 0–2, 3 Ray workers: main_loop" in lines


def test_no_odd_one_out_among_two_or_when_every_process_differs() -> None:
    pair = {0: [stack_process(1, "driver", BARRIER)], 1: [stack_process(2, "driver", STUCK)]}
    two = summarise(docs(pair), [], [0, 1])
    assert two is not None and not two.odd
    differ = summarise(
        docs({r: [stack_process(r, "ray_worker", _frames((f"f{r}", TRAIN, r)))] for r in range(4)}), [], range(4)
    )
    assert differ is not None and not differ.odd  # nothing is shared: no "odd" among all-different stacks


def test_rays_own_daemons_are_grouped_but_never_the_odd_one_out() -> None:
    monitor = _frames(("Monitor._run", "/x/site-packages/ray/autoscaler/monitor.py", 1))
    log_monitor = _frames(("LogMonitor.run", "/x/site-packages/ray/_private/log_monitor.py", 1))
    s = summarise(
        docs(
            {
                0: [stack_process(1, "ray", monitor), stack_process(2, "ray", log_monitor)],
                1: [stack_process(3, "ray", log_monitor)],
                2: [stack_process(4, "ray", log_monitor)],
            }
        ),
        [],
        range(3),
    )
    assert s is not None and not s.odd and len(s.groups) == 2


def test_missing_ranks_py_spy_missing_and_refused_ptrace_are_said() -> None:
    refused = {"permitted": False, "problem": "ptrace not permitted: EPERM", "grant": "grant CAP_SYS_PTRACE"}
    no_py_spy = {"path": None, "version": None, "problem": "py-spy was not found"}
    fallback = stack_process(7, "driver", BARRIER) | {"method": "faulthandler"}
    s = summarise(
        {
            0: stacks_fields([fallback], ptrace=refused, fallback_dumps=1),
            1: stacks_fields([stack_process(8, "driver", [])], py_spy=no_py_spy),
        },
        [],
        range(3),
    )
    assert s is not None and s.missing == (2,)
    text = "\n".join(s.lines())
    assert "none from rank 2" in text
    assert "rank 0: py-spy could not attach (ptrace not permitted): grant CAP_SYS_PTRACE" in text
    assert "rank 1: py-spy was not found" in text
    assert "rank 0: 1 process(es) dumped their own stacks" in text
    assert "without stacks: rank 1 driver pid 8" in text


def test_frames_are_shown_from_the_users_own_code() -> None:
    assert shown_frames([("wait", THREADING, 1), ("barrier", TRAIN, 2), ("run", TRAIN, 3)]) == "barrier ← run"
    assert shown_frames([("main_loop", RAY_WORKER, 1), ("<module>", RAY_WORKER, 2)]) == "main_loop ← <module>"
    assert ranks_text([2]) == "rank 2" and ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0–2, 5, 7–8"


def test_a_hang_explains_the_time_limit_records_of_the_same_walltime_warning() -> None:
    """The walltime warning: ranks 1 and 2 stop for it (time_limit) a moment before the driver's
    node calls the stuck run a hang: the hang is the first cause."""
    cause, cascade, _ = first(rec(1, "time_limit", 10.0), rec(2, "time_limit", 10.1), rec(0, "hang", 10.4))
    assert cause is not None and cause.kind == "hang" and cause.rank == 0
    assert [c.kind for c in cascade] == ["time_limit", "time_limit"]
    # A real failure before the hang stays first.
    cause, _, _ = first(rec(1, "child_exit", 5.0), rec(0, "hang", 10.4))
    assert cause is not None and cause.kind == "child_exit"
