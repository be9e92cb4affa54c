"""The agent starts Ray's nodes through agent/ray/_lean_start.py: Ray's own `ray start` (every
option, the same help), without the CLI's state, job and Serve commands. Every Ray test of the
suite starts its nodes this way; the CPU it saves is in docs/concepts/replica.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from agent.ray import node as ray_node

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")
LEAN = [sys.executable, "-m", "agent.ray._lean_start"]


def _help(argv: list[str]) -> str:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


def test_the_nodes_start_through_the_lean_entry_where_ray_is_installed_beside_the_interpreter() -> None:
    assert ray_node.ray_start_command() == LEAN


def test_the_lean_start_is_rays_own_start_command_with_every_option() -> None:
    ours, rays = _help([*LEAN, "start", "--help"]), _help([RAY, "start", "--help"])
    assert "--node-ip-address" in ours and "--block" in ours
    assert _options(ours) == _options(rays)


def test_the_lean_cli_leaves_out_the_state_job_and_serve_commands_only() -> None:
    def commands(text: str) -> set[str]:
        listed = text.split("Commands:", 1)[1]
        return {line.split()[0] for line in listed.splitlines() if line.startswith("  ") and line.split()}

    skipped = {"serve", "job", "list", "get", "summary", "logs"}
    ours, rays = commands(_help([*LEAN, "--help"])), commands(_help([RAY, "--help"]))
    # Serve's command is listed only where Ray's Serve is installed (not here); the others always are.
    assert {"job", "list", "summary"} <= rays - ours <= skipped
    assert "start" in ours and not ours & skipped
