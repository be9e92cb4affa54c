"""What a failed process group said, read by the audit from the first cause's log (issue 49 item 4):
the group's own error before its consequences, a rank's process that died and the collective its
peers were left in. The logs are real: the driver logs of examples/torch_trainer.py under three
local agents with one rank sending a tensor of another size, and with one rank SIGKILLed inside a
step (bench/faults.py's trainer-sizes-differ and trainer-rank-killed rows; paths shortened)."""

from __future__ import annotations

import shutil
from pathlib import Path

from audit._collective_errors import process_group_errors
from audit.safedir import SafeDir

LOGS = Path(__file__).parent / "data" / "collective_logs"


def _errors(tmp_path: Path, name: str) -> tuple[str, ...]:
    shutil.copy(LOGS / name, tmp_path / "driver-0.log")
    with SafeDir(tmp_path) as safe:
        return process_group_errors(safe, "driver-0.log")


def test_the_groups_own_error_is_named_not_the_peers_lost_connection(tmp_path: Path) -> None:
    [line] = _errors(tmp_path, "sizes-differ.log")
    assert line.startswith("process group error (Rank pid 8452 on 127.0.0.3): "), line
    assert "Received data size doesn't match expected size" in line and "Connection reset" not in line
    assert "/" not in line.split(": ", 1)[1]  # the message, not the native backtrace after it


def test_a_killed_rank_and_the_collective_its_peers_were_left_in(tmp_path: Path) -> None:
    [line] = _errors(tmp_path, "rank-killed.log")
    assert line.startswith("a rank's process died: Rank pid 12848 on 127.0.0.3; its peers failed in all_reduce: "), line
    assert "Connection closed by peer" in line


def test_a_log_without_a_process_group_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "driver-0.log").write_text("Traceback (most recent call last):\nValueError: bad\n")
    with SafeDir(tmp_path) as safe:
        assert process_group_errors(safe, "driver-0.log") == ()
        assert process_group_errors(safe, None) == ()
