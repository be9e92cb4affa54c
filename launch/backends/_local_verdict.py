"""The verdict of a local run, said in a few lines: the agents' exit codes and, when every agent
exited 0, the audit's (``gym-launch local`` exits with it, so the launcher and ``gym-audit`` never
disagree). The one module of launch/ that runs the audit (tests/test_import_graph.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.api import AuditResult

__all__ = ["audit_errors", "failure_lines", "verdict"]

MAX_SUMMARY_ERRORS = 3
SUMMARY_CHARS = 1000  # the audit message names the accepted evidence: keep it whole


def verdict(run_path: Path, codes: list[int], out: Callable[[str], None]) -> int:
    """The run's verdict from the agents' exit codes and, when they all exited 0, the audit's; said
    in a few lines with where to look."""
    if codes and all(c == 2 for c in codes):
        # Every agent refused before starting anything (a restart cap, an attempt still running):
        # their messages above say why; there is no run of this launch to summarise.
        out(f"gym-launch: every agent refused to start (exit codes {codes}); run directory: {run_path}")
        return 2
    ok = all(c == 0 for c in codes)
    if ok:
        # Agents exiting 0 says every lifecycle ended well, not that the driver trained: the run
        # succeeded only if the audit passes too (so the launcher and gym-audit never disagree).
        failing = audit_errors(run_path)
        ok = not failing
        if ok:
            out(f"gym-launch: run succeeded: agents exited 0 and the audit passes (agent exit codes {codes})")
        else:
            out(f"gym-launch: run FAILED: agents exited 0, but the audit FAILS: {failing[0]}")
            for line in failing[1:MAX_SUMMARY_ERRORS]:
                out(f"gym-launch:   also: {line}")
    else:
        out(f"gym-launch: run FAILED (agent exit codes {codes})")
        for line in failure_lines(run_path):
            out(f"gym-launch: {line}")
    out(f"gym-launch: run directory: {run_path}")
    out(f"gym-launch: inspect it with: gym-audit {run_path}   (logs: gym-audit logs {run_path})")
    return 0 if ok else 1


def _audited(run_dir: Path) -> AuditResult | str:
    """The audit of the run, or why it cannot read the run directory. Imported here: only a local
    run that has ended needs the audit."""
    from audit.api import audit_run
    from audit.safedir import UnusableRunDir

    try:
        return audit_run(run_dir)
    except (UnusableRunDir, OSError) as exc:
        return f"the audit cannot read the run directory: {exc}"


def audit_errors(run_dir: Path) -> list[str]:
    """The audit's errors as "code — message" lines; empty when it passes. A run directory the
    audit cannot read is itself a failure to report."""
    result = _audited(run_dir)
    if isinstance(result, str):
        return [result]
    return [f"{f.code} — {f.message[:SUMMARY_CHARS]}" for f in result.findings if f.severity == "error"]


def failure_lines(run_dir: Path) -> list[str]:
    """The audit's first cause in one line (the run's, not one replica's view of it), and the
    nodes a preflight found unfit, as the line to resubmit without them."""
    result = _audited(run_dir)
    if isinstance(result, str):
        return []
    fc = result.first_cause
    lines = []
    if fc is not None:
        log = f" (log {fc.log})" if fc.log else ""
        lines.append(f"first cause: rank {fc.rank} {fc.kind} in {fc.phase or '?'}: {fc.cause}{log}")
    if result.unfit:
        hosts = ", ".join(f"rank {n['rank']} on {n['host']}" for n in result.unfit["nodes"][:8])
        lines.append(f"unfit node(s): {hosts}; {result.unfit['exclude']}")
    return lines
