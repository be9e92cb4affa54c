"""What tests and bench/ share to run real agents and to build run directories.

    agents   launch gym-launch / gym-agent, wait, read and validate what they wrote, audit it
    orphans  the one orphan finder: the processes of a run still alive, by session and PID
    specs    the spec template for short runs on this machine, and unique run ids
    steps    the agent's own step table and its rule of which node runs which step
    rundirs  realistic run directories written through the real writers (the audit's fixtures)
    nfs_model  an NFS-like FUSE client of a directory (listing and negative-lookup caches per mount)
    netfs    agents split across NFS-model clients, a driver fault, when each agent stopped
    ledger   the sample ledger's proof: the demo trainer killed between checkpoints, resumed, what the audit must find
    replay   a scheduler's job replayed here: one session per replica, their endings; generated specs' requests

Imported as `tests.harness` from the repository root (tests' conftest puts the root on
sys.path; `python -m bench` runs from it). The names below are the ones most tests use.
"""

from tests.harness.agents import (
    BIN,
    LocalRun,
    agent_pid,
    agent_temp_dirs,
    agent_tmp_root,
    assert_artifacts_valid,
    audit,
    failures,
    launch_local,
    read,
    start_agent,
    wait_all,
    wait_for_file,
    wait_phase,
)
from tests.harness.orphans import assert_nothing_left, kill_tree_by_session, run_processes
from tests.harness.specs import JUDGE_TABLES, judge_spec, judge_tables, result_driver, small_spec, uid

__all__ = [
    "BIN",
    "JUDGE_TABLES",
    "LocalRun",
    "agent_pid",
    "agent_temp_dirs",
    "agent_tmp_root",
    "assert_artifacts_valid",
    "assert_nothing_left",
    "audit",
    "failures",
    "judge_spec",
    "judge_tables",
    "kill_tree_by_session",
    "launch_local",
    "read",
    "run_processes",
    "result_driver",
    "small_spec",
    "start_agent",
    "uid",
    "wait_all",
    "wait_for_file",
    "wait_phase",
]
