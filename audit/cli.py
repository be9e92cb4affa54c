"""`gym-audit`: audit a run directory, or search its logs.

    gym-audit DIR [--json] [--html FILE] [--no-info]
    gym-audit logs DIR [--rank R] [--judge NAME] [--grep PATTERN] [-i]

Exit codes (audit): 0 pass, 1 findings (at least one error), 2 unusable input.
Exit codes (logs): 0 lines printed, 1 no matching line, 2 unusable input or bad pattern.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from launch.console import quiet_broken_pipe
from schemas import safe_io

from . import report_html, report_json, report_text
from .api import audit_run
from .load import SafeDir, UnsafeFile, UnusableRunDir
from .logs import Matcher, grep_log, list_logs
from .sanitize import terminal_safe


def _audit_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gym-audit",
        description="Validate a run directory OUTPUT/cluster/UUID: schemas, cross-checks, first cause. "
        "Use `gym-audit logs DIR ...` to search its logs.",
    )
    p.add_argument("run_dir", metavar="DIR", help="the run directory OUTPUT/cluster/UUID")
    p.add_argument("--json", action="store_true", help="print the machine-readable report (see audit/README.md)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report to FILE")
    p.add_argument("--no-info", action="store_true", help="leave info findings out of the text report")
    return p


def _logs_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gym-audit logs",
        description="Stream a run's logs (driver-RANK.log, judge-NAME-RANK.log, agent, ray), optionally "
        "filtered by rank, judge and a regular expression. Output lines are FILE:LINE:TEXT.",
    )
    p.add_argument("run_dir", metavar="DIR")
    p.add_argument("--rank", type=int, help="only logs of this rank")
    p.add_argument("--judge", metavar="NAME", help="only judge-NAME-*.log")
    p.add_argument("--grep", metavar="PATTERN", help="Python regular expression, matched per line")
    p.add_argument("-i", "--ignore-case", action="store_true")
    return p


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
        return True
    except (ValueError, OSError):
        return False


def _write_html(target: Path, text: str) -> None:
    # temp + rename: a reader (a browser auto-reloading the report) never sees half a page.
    safe_io.write_atomic_path(target, text.encode("utf-8"), mode=0o644)


def _audit(argv: Sequence[str]) -> int:
    args = _audit_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    if args.html and _inside(Path(args.html).parent, run_dir):
        print(
            "gym-audit: --html must point outside the run directory (the audit never writes into it)",
            file=sys.stderr,
        )
        return 2
    try:
        result = audit_run(run_dir)
    except UnusableRunDir as exc:
        if args.json:
            sys.stdout.write(report_json.render_unusable(str(run_dir), str(exc)))
        print(terminal_safe(f"gym-audit: cannot audit {run_dir}: {exc}"), file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(report_json.render(result))
    else:
        sys.stdout.write(report_text.render(result, show_info=not args.no_info))
    if args.html:
        try:
            _write_html(Path(args.html), report_html.render(result))
        except OSError as exc:
            print(f"gym-audit: cannot write {args.html}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"HTML report: {args.html}", file=sys.stderr if args.json else sys.stdout)
    return 0 if result.verdict == "pass" else 1


def _logs(argv: Sequence[str]) -> int:
    args = _logs_parser().parse_args(argv)
    try:
        matcher = Matcher.compile(args.grep, args.ignore_case)
    except re.error as exc:
        print(f"gym-audit logs: bad --grep pattern: {exc}", file=sys.stderr)
        return 2
    try:
        safe = SafeDir(args.run_dir)
    except UnusableRunDir as exc:
        print(terminal_safe(f"gym-audit logs: {exc}"), file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    printed = 0
    with safe:
        logs = list_logs(safe, rank=args.rank, judge=args.judge)
        if not logs:
            print("gym-audit logs: no log matches --rank/--judge", file=sys.stderr)
            return 1
        for log in logs:
            prefix = log.relpath.encode()
            try:
                for line_no, line in grep_log(safe, log.relpath, matcher):
                    out.write(b"%s:%d:%s\n" % (prefix, line_no, line))
                    printed += 1
            except BrokenPipeError:
                raise  # the reader left (`| head`): stop, handled in main()
            except (UnsafeFile, OSError) as exc:
                print(f"gym-audit logs: skipping {log.relpath}: {exc}", file=sys.stderr)
        out.flush()
    return 0 if printed else 1


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "logs":
            return _logs(argv[1:])
        return _audit(argv)
    except BrokenPipeError:
        # `gym-audit logs ... | head`: the reader left; that is not an error.
        # Point stdout at /dev/null so the interpreter's final flush does not complain again.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
