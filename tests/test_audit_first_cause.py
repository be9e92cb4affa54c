"""The first-cause rules on hand-made failure records (no filesystem)."""

from __future__ import annotations

import signal
from dataclasses import replace

from audit._first_cause import SIGNALLED_EXIT_CODES, analyse
from schemas.records import FailureRecord as FailureRec


def rec(rank: int, kind: str, t: float | None, reacting_to: int | None = None) -> FailureRec:
    return FailureRec(
        rank,
        f"failures/failure-{rank}.json",
        kind,
        f"{kind} on {rank}",
        "driver",
        t,
        1.0,
        None,
        reacting_to,
        None,
        (),
        "agent",
        f"i{rank}",
    )


def first(*records: FailureRec):
    return analyse({r.rank: r for r in records}, {}, {}, None, {})


def test_no_failures_no_cause() -> None:
    assert first() == (None, (), ())


def test_reactions_are_not_roots_even_when_earlier() -> None:
    # Rank 0's clock runs behind: its reaction carries an earlier wall time than the cause.
    fc, cascade, others = first(rec(1, "child_exit", 100.0), rec(0, "peer_failure", 99.0, reacting_to=1))
    assert (fc.rank, fc.kind) == (1, "child_exit")
    assert [c.rank for c in cascade] == [0] and others == ()


def test_earliest_root_wins_and_the_rest_are_listed() -> None:
    fc, cascade, others = first(
        rec(2, "signal", 105.0), rec(0, "judge_health", 101.0), rec(1, "peer_failure", 102.0, 0)
    )
    assert fc.rank == 0
    assert [c.rank for c in others] == [2]
    assert [c.rank for c in cascade] == [1, 2]


def test_ties_broken_by_kind() -> None:
    fc, _, _ = first(rec(0, "signal", 100.0), rec(1, "child_exit", 100.0), rec(2, "startup_timeout", 100.0))
    assert fc.kind == "child_exit"


def test_reaction_to_a_rank_without_record_is_a_root() -> None:
    fc, _, _ = first(rec(0, "peer_failure", 100.0, reacting_to=3))
    assert fc.rank == 0 and fc.kind == "peer_failure"


def test_a_failure_heard_on_the_doorbell_whose_record_never_came_is_placed_on_its_rank() -> None:
    """Rank 2's filesystem hung: its fs_stall reached ranks 0 and 1 by the doorbell, its record
    never arrived. The cause is rank 2's fs_stall, reported by the first to hear of it."""
    heard = [replace(rec(r, "peer_failure", 100.0 + r, reacting_to=2), reacting_to_kind="fs_stall") for r in (0, 1)]
    fc, cascade, others = first(*heard)
    assert (fc.rank, fc.kind, fc.reported_by) == (2, "fs_stall", 0)
    assert "rank 2 left no failure record" in fc.cause
    assert [c.rank for c in cascade] == [0, 1] and others == ()


def test_silent_rank_is_the_culprit_once() -> None:
    fc, cascade, others = first(rec(1, "peer_silent", 200.0, 0), rec(2, "peer_silent", 201.0, 0))
    assert (fc.rank, fc.kind, fc.reported_by) == (0, "silent", 1)
    assert [c.rank for c in cascade] == [1, 2] and others == ()


def test_silence_of_a_rank_that_did_write_a_record_is_a_reaction() -> None:
    fc, cascade, _ = first(rec(0, "agent_died", 150.0), rec(1, "peer_silent", 200.0, 0))
    assert (fc.rank, fc.kind) == (0, "agent_died") and [c.kind for c in cascade] == ["peer_silent"]


def test_unknown_times_sort_last() -> None:
    fc, _, _ = first(rec(0, "child_exit", None), rec(1, "signal", 50.0))
    assert fc.rank == 1


def test_a_scheduler_signalling_every_task_is_not_the_first_cause() -> None:
    # Measured under Slurm --kill-on-bad-exit: rank 1's agent SIGKILLed; Slurm SIGTERMs ranks 0
    # and 2 within milliseconds; their signal records precede rank 1's reaper record by ~0.5 s.
    fc, cascade, _ = first(rec(0, "signal", 100.21), rec(2, "signal", 100.25), rec(1, "agent_died", 100.77))
    assert (fc.rank, fc.kind) == (1, "agent_died")
    assert [c.rank for c in cascade] == [0, 2]


def test_a_signal_well_before_any_real_failure_stays_the_first_cause() -> None:
    # A user's scancel long before a driver crashed is the cause, not a reaction.
    fc, _, _ = first(rec(0, "signal", 100.0), rec(1, "driver_exit", 100.0 + 60))
    assert (fc.rank, fc.kind) == (0, "signal")
    # And a signal followed only by timeouts or peer reactions stays first too.
    fc, _, _ = first(rec(0, "signal", 100.0), rec(1, "startup_timeout", 101.0))
    assert (fc.rank, fc.kind) == (0, "signal")


def test_a_driver_killed_by_the_schedulers_sigterm_is_a_reaction_too() -> None:
    # Measured on the local Slurm cluster: the scheduler's SIGTERM reached rank 0's driver before its
    # agent, so rank 0 recorded driver_exit with code -15; rank 1 (SIGKILLed) is still the first cause.
    killed_driver = replace(rec(0, "driver_exit", 100.38), exit_code=-15)
    fc, _, _ = first(rec(2, "signal", 100.32), killed_driver, rec(1, "agent_died", 100.97))
    assert (fc.rank, fc.kind) == (1, "agent_died")
    # A driver that crashed on its own (or was OOM-killed: -9) stays a real failure.
    for code in (-9, 1, None):
        crashed = replace(killed_driver, exit_code=code)
        fc, _, _ = first(rec(2, "signal", 100.32), crashed, rec(1, "agent_died", 100.97))
        assert (fc.rank, fc.kind) == (0, "driver_exit"), code


def test_the_exit_code_is_read_from_its_field_not_from_the_cause_text() -> None:
    # The cause is for people: a text that reads like a signalled exit decides nothing.
    worded = replace(rec(0, "child_exit", 100.38), cause="ray-head (pid 7) exited with code -15 during driver")
    fc, _, _ = first(rec(2, "signal", 100.32), worded, rec(1, "agent_died", 100.97))
    assert (fc.rank, fc.kind) == (0, "child_exit")
    fc, _, _ = first(rec(2, "signal", 100.32), replace(worded, exit_code=-15), rec(1, "agent_died", 100.97))
    assert (fc.rank, fc.kind) == (1, "agent_died")


def test_a_cycle_of_reactions_still_names_a_cause() -> None:
    # Rank 1 was stopped (SIGSTOP): ranks 0 and 2 report its silence; resumed, it reacts to rank 0.
    fc, cascade, _ = first(
        rec(0, "peer_silent", 100.0, reacting_to=1),
        rec(2, "peer_silent", 100.5, reacting_to=1),
        rec(1, "peer_failure", 130.0, reacting_to=0),
    )
    assert (fc.rank, fc.kind, fc.reported_by) == (1, "silent", 0)
    assert "no failure record is a root cause" in fc.cause
    assert sorted(c.rank for c in cascade) == [0, 1, 2]


def test_reactions_to_each_other_without_silence_pick_the_earliest() -> None:
    fc, cascade, _ = first(rec(0, "peer_failure", 101.0, reacting_to=1), rec(1, "peer_failure", 100.0, reacting_to=0))
    assert (fc.rank, fc.kind) == (1, "peer_failure") and "0->1" in fc.cause
    assert [c.rank for c in cascade] == [0]


def test_a_reaction_to_an_overwritten_record_is_a_root() -> None:
    # A duplicate rank 0 overwrote rank 0's root record with its own reaction to rank 1.
    r1 = rec(1, "peer_failure", 101.0, reacting_to=0)
    r1 = FailureRec(**{**r1.__dict__, "reacting_to_incarnation": "the-original-0"})
    fc, _, _ = first(rec(0, "peer_failure", 102.0, reacting_to=1), r1)
    assert fc is not None and fc.rank in (0, 1)


def test_the_signalled_exit_codes_are_sighup_sigint_and_sigterm() -> None:
    # Written out as numbers (the audit does not import `signal`): they must stay these signals.
    assert {-signal.SIGHUP, -signal.SIGINT, -signal.SIGTERM} == SIGNALLED_EXIT_CODES
