"""Every console script stops quietly when its reader goes away (`... | head -3`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        "gym-launch plan examples/demo.toml",
        "gym-launch plan examples/three-node.toml --json",
        "gym-agent --help",
        "gym-audit --help",
    ],
)
def test_a_closed_pipe_is_not_a_traceback(command: str) -> None:
    tool, *args = command.split()
    # `head -1` exits after one line; a pipe buffer holds 64 KiB, so repeat the command's output
    # through a tiny pipe: read one line, close, and let the writer hit EPIPE.
    proc = subprocess.Popen([str(BIN / tool), *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code in (0, 141), (code, err)


def test_head_in_a_shell_pipeline() -> None:
    out = subprocess.run(
        f"{BIN / 'gym-launch'} plan examples/demo.toml | head -3",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert len(out.stdout.splitlines()) == 3
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr
