"""`ray start` without the Ray CLI's other commands: `python -m agent.ray._lean_start start ARGS...`.

Ray's CLI module registers its state, job and Serve commands when it is imported, each import
guarded so that the CLI works where one is missing. A node's start runs none of them, yet
importing them was ~2.5 of the ~3.9 CPU seconds of a `ray start` process (2-core machine),
seconds that every node spends inside its host's start slot and beside the other nodes'
registration. Here they are marked missing, so Ray's CLI leaves them out as it does where they
are not installed; everything else (the `start` command, its options, the `ray` group's logging
options, its exit codes) is Ray's own.
"""

from __future__ import annotations

import sys

__all__ = ["SKIPPED", "main"]

# The modules Ray's CLI imports only to register the `list`/`get`/`summary`/`logs`, `job` and
# `serve` commands (ray/scripts/scripts.py, each in a try/except).
SKIPPED = ("ray.util.state.state_cli", "ray.dashboard.modules.job.cli", "ray.serve.scripts")


def main() -> None:
    for name in SKIPPED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "import ... halted"
    from ray.scripts.scripts import cli

    cli(prog_name="ray")  # click's standalone mode: exits with the command's code


if __name__ == "__main__":
    main()
