"""`gym-audit`: audit a run directory, search its logs, list runs.

    gym-audit RUN [--json] [--html FILE] [--no-info] [-v|-q]
    gym-audit logs RUN [--rank R] [--judge NAME] [--grep PATTERN] [-i] [-A N] [-B N] [--since T] [--merge] [--follow]
    gym-audit ls OUTPUT
    gym-audit completion bash

RUN is a run directory OUTPUT/cluster/UUID, or a bare UUID with --output-root (default $GYM_OUTPUT_ROOT).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from audit._sanitize import terminal_safe
from audit.safedir import SafeDir, UnsafeFile, UnusableRunDir
from launch.spec.console import quiet_broken_pipe, use_colour, version
from schemas import credentials, safe_io
from schemas.errors import GymError

if TYPE_CHECKING:  # the log reader loads for `gym-audit logs` only (issue 51 item 9: the audit's start-up)
    from audit._logs import LogFile, Matcher

OUTPUT_ROOT_ENV = "GYM_OUTPUT_ROOT"
USAGE = """gym-audit [-h] [--version] [-v | -q] RUN [--json] [--html FILE] [--no-info] [--output-root ROOT]
       gym-audit logs RUN [--rank R] [--judge NAME] [--grep PATTERN] [-i] [-A N] [-B N] [--since TIME]
                          [--merge] [--follow]
       gym-audit ls OUTPUT
       gym-audit completion bash"""
AUDIT_EXIT = """exit codes:
  0    the audit passed (the run succeeded and its evidence is consistent)
  1    findings: at least one error (a failed run always has one: its first cause)
  2    unusable input: no such run, not a directory, bad option (the message says what to pass)
  141  the output pipe was closed"""
LOGS_EXIT = """exit codes:
  0    lines printed
  1    no matching line (or no log matches --rank/--judge)
  2    unusable run directory, bad --grep pattern or --since time"""
LS_EXIT = """exit codes:
  0    runs listed
  1    no run under OUTPUT
  2    OUTPUT is not a directory"""
HTML_MODE = 0o640  # like the rest of the run's evidence: not world-readable


class _Version(argparse.Action):
    """--version, its text looked up only when asked: reading the package metadata costs ~35 ms,
    which every `gym-audit logs` would pay at start."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version("gym-audit"))
        parser.exit()


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action=_Version)


def _audit_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gym-audit",
        usage=USAGE,
        description="Validate a run directory OUTPUT/cluster/UUID: schemas, cross-checks, first cause. "
        "Subcommands: `logs` searches a run's logs, `ls` lists the runs of an output root, "
        "`completion bash` prints a completion script.",
        epilog=AUDIT_EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument("run_dir", metavar="RUN", help="the run directory OUTPUT/cluster/UUID, or a UUID (--output-root)")
    p.add_argument("--output-root", help=f"where a bare UUID's run lives (default ${OUTPUT_ROOT_ENV})")
    p.add_argument("--json", action="store_true", help="print the machine-readable report (see audit/README.md)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report to FILE (mode 0640)")
    p.add_argument("--no-info", action="store_true", help="leave info findings out of the text report")
    p.add_argument(
        "--offline",
        action="store_true",
        help="never ask the scheduler (scontrol, Beaker's API) why the job ended; the run's files only",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-v", "--verbose", dest="verbosity", action="store_const", const=1, default=0, help="add each rank's last phase"
    )
    g.add_argument(
        "-q", "--quiet", dest="verbosity", action="store_const", const=-1, help="verdict and first cause only"
    )
    return p


def _logs_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gym-audit logs",
        description="Stream a run's logs (driver-RANK.log, judge-NAME-RANK.log, gateway-NAME-RANK.log, agent, ray, "
        "ray-session-RANK/*), "
        "optionally filtered by rank, judge, a regular expression and time. Output lines are FILE:LINE:TEXT "
        "(context lines FILE-LINE-TEXT).",
        epilog=LOGS_EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument("run_dir", metavar="RUN")
    p.add_argument("--output-root", help=f"where a bare UUID's run lives (default ${OUTPUT_ROOT_ENV})")
    p.add_argument("--rank", type=int, help="only logs of this rank")
    p.add_argument("--judge", metavar="NAME", help="only judge NAME's logs (judge-NAME-*.log, gateway-NAME-*.log)")
    p.add_argument("--grep", metavar="PATTERN", help="Python regular expression, matched per line")
    p.add_argument("-i", "--ignore-case", action="store_true")
    p.add_argument("-A", "--after", type=int, default=0, metavar="N", help="N lines of context after a match")
    p.add_argument("-B", "--before", type=int, default=0, metavar="N", help="N lines of context before a match")
    p.add_argument("--since", metavar="TIME", help="only lines from TIME on: 10m, 2h, or 2026-11-30T17:08:00Z")
    p.add_argument("--merge", action="store_true", help="one view across every selected log, in time order")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the run ends")
    p.add_argument("--interval", type=float, default=0.5, help=argparse.SUPPRESS)
    return p


def _ls_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gym-audit ls",
        description="One line per run under OUTPUT/cluster/: uuid, start, elapsed, outcome, first cause.",
        epilog=LS_EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument("output", metavar="OUTPUT", nargs="?", help=f"the output root (default ${OUTPUT_ROOT_ENV})")
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    return p


def _completion_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gym-audit completion", description="print a shell completion script")
    p.add_argument("shell", choices=("bash",))
    return p


SUBCOMMANDS = {"logs": _logs_parser, "ls": _ls_parser, "completion": _completion_parser}


def resolve_run(run: str, output_root: str | None) -> Path:
    """A run directory as given, or a bare UUID under the output root; UnusableRunDir otherwise."""
    from schemas import names

    p = Path(run)
    if p.exists() or p.is_symlink() or "/" in run or not names.UUID_RE.match(run):
        return p
    root = output_root or os.environ.get(OUTPUT_ROOT_ENV)
    if not root:
        raise UnusableRunDir(
            f"{run} does not exist; for a bare UUID pass --output-root ROOT (or set {OUTPUT_ROOT_ENV})"
        )
    return Path(root) / "cluster" / run


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
        return True
    except (ValueError, OSError):
        return False


def _html_target_problem(target: str, run_dir: Path) -> str | None:
    """Why --html TARGET cannot be written, found before the audit prints anything."""
    path = Path(target)
    if target.endswith(os.sep) or path.is_dir():
        return f"--html {target}: is a directory; name the file to write, e.g. {path / 'audit.html'}"
    if not path.parent.is_dir():
        return f"--html {target}: directory {path.parent} does not exist"
    if _inside(path.parent, run_dir):
        return "--html must point outside the run directory (the audit never writes into it)"
    return None


def _write_html(target: Path, text: str) -> None:
    # temp + rename: a reader (a browser auto-reloading the report) never sees half a page.
    safe_io.write_atomic_path(target, text.encode("utf-8"), mode=HTML_MODE)


def _audit(argv: Sequence[str]) -> int:
    # Imported here: `gym-audit logs` and `ls` start without the audit's checks and renderers.
    from audit import _report_json as report_json
    from audit.api import audit_run

    args = _audit_parser().parse_args(argv)
    run_dir = resolve_run(args.run_dir, args.output_root)
    if args.html:
        problem = _html_target_problem(args.html, run_dir)
        if problem:
            print(f"gym-audit: {problem}", file=sys.stderr)
            return 2
    try:
        result = audit_run(run_dir, ask_scheduler=not args.offline)
    except UnusableRunDir as exc:
        if args.json:
            sys.stdout.write(report_json.render_unusable(str(run_dir), credentials.redact_text(str(exc))))
        print(terminal_safe(credentials.redact_text(f"gym-audit: cannot audit {run_dir}: {exc}")), file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(report_json.render(result))
    else:
        from audit import _report_text as report_text  # the text report's renderer: --json needs none

        text = report_text.render(result, show_info=not args.no_info and args.verbosity >= 0)
        if args.verbosity < 0:
            text = _quiet(text)
        elif args.verbosity > 0:
            text += _ranks_text(result)
        sys.stdout.write(_colour(text) if use_colour(sys.stdout) else text)
    if args.html:
        from audit import _report_html as report_html

        try:
            _write_html(Path(args.html), report_html.render(result))
        except OSError as exc:
            print(f"gym-audit: cannot write {args.html}: {exc.strerror}", file=sys.stderr)
            return 2
        if args.verbosity >= 0:
            print(f"HTML report: {args.html}", file=sys.stderr if args.json else sys.stdout)
    return 0 if result.verdict == "pass" else 1


def _quiet(text: str) -> str:
    """The verdict line and the first cause's headline: what a script or a glance needs."""
    lines = text.splitlines()
    keep = lines[:1]
    if "First cause:" in lines:
        i = lines.index("First cause:")
        keep.append(lines[i + 1].strip())
    return "\n".join(keep) + "\n"


def _ranks_text(result: object) -> str:
    ranks = getattr(result, "ranks", ())
    if not ranks:
        return ""
    out = ["", "Ranks:"]
    for r in ranks:
        last = r.phases[-1].phase if r.phases else "-"
        out.append(terminal_safe(f"  rank {r.rank}: {r.state or '?'}, last phase {last}, address {r.address or '?'}"))
    return "\n".join(out) + "\n"


def _colour(text: str) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith("gym-audit: FAIL") or line.lstrip().startswith("ERROR"):
            line = f"\033[31m{line.rstrip(chr(10))}\033[0m\n"
        elif line.startswith("gym-audit: PASS"):
            line = f"\033[32m{line.rstrip(chr(10))}\033[0m\n"
        elif line.lstrip().startswith("WARNING"):
            line = f"\033[33m{line.rstrip(chr(10))}\033[0m\n"
        out.append(line)
    return "".join(out)


def _logs(argv: Sequence[str]) -> int:
    args = _logs_parser().parse_args(argv)
    filters = _log_filters(args)
    if filters is None:
        return 2
    matcher, since = filters
    safe = SafeDir(resolve_run(args.run_dir, args.output_root))
    out = cast(BinaryIO, _Redacted(sys.stdout.buffer))
    # Followed without context or times, the history is printed by the follower's own reader:
    # a line written while it starts is neither lost nor printed twice.
    follow_all = args.follow and not (args.after or args.before or since is not None or args.merge)
    from audit._logs import list_logs

    with safe:
        logs = list_logs(safe, rank=args.rank, judge=args.judge)
        if not logs and not args.follow:
            print("gym-audit logs: no log matches --rank/--judge", file=sys.stderr)
            return 1
        printed = 0 if follow_all else _history(safe, logs, matcher, since, args, out)
        out.flush()
        if args.follow:
            printed += _follow(safe, [] if follow_all else logs, matcher, args, out)
    return 0 if printed else 1


class _Redacted:
    """Every line `gym-audit logs` prints through the one redaction (schemas/credentials.py): a log
    an older version or a child wrote may hold a credential."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def write(self, data: bytes) -> int:
        return self.raw.write(credentials.redact_bytes(data))

    def flush(self) -> None:
        self.raw.flush()


def _log_filters(args: argparse.Namespace) -> tuple[Matcher, float | None] | None:
    """The pattern and the --since time asked for; None (said on stderr) when one is unusable."""
    from audit._logs import Matcher

    try:
        matcher = Matcher.compile(args.grep, args.ignore_case)
    except re.error as exc:
        print(f"gym-audit logs: bad --grep pattern: {exc}", file=sys.stderr)
        return None
    if args.after < 0 or args.before < 0:
        print("gym-audit logs: -A/-B take a number of lines >= 0", file=sys.stderr)
        return None
    since = None
    if args.since:
        from audit import _logview as logview

        try:
            since = logview.parse_since(args.since)
        except ValueError as exc:
            print(f"gym-audit logs: {exc}", file=sys.stderr)
            return None
    return matcher, since


def _history(
    safe: SafeDir, logs: list[LogFile], matcher: Matcher, since: float | None, args: argparse.Namespace, out: BinaryIO
) -> int:
    """The lines already written, as asked: a plain grep, one view merged in time order, or each
    log with its context lines. The number of matching lines printed."""
    if not (args.after or args.before or since is not None or args.merge or args.follow):
        from audit._logs import grep_log

        def grepped(log: LogFile) -> Iterator[tuple[bytes, bool]]:
            prefix = log.relpath.encode()
            for line_no, line in grep_log(safe, log.relpath, matcher):
                yield b"%s:%d:%s\n" % (prefix, line_no, line), True

        return _each_log(logs, grepped, out)
    from audit import _logview as logview

    if args.merge:
        printed = 0
        for ln in logview.merged_view(safe, logs, matcher, since):
            out.write(logview.render(ln))
            printed += 1
        return printed
    keep = logview.selector(matcher, since)

    def in_context(log: LogFile) -> Iterator[tuple[bytes, bool]]:
        for shown in logview.file_view(safe, log, matcher, since, args.before, args.after):
            yield logview.render(shown, shown is None or keep(shown)), shown is not None and keep(shown)

    return _each_log(logs, in_context, out)


def _each_log(logs: list[LogFile], lines: Callable[[LogFile], Iterable[tuple[bytes, bool]]], out: BinaryIO) -> int:
    """Every log's lines written out, (text, whether it counts as a match) each; a log that cannot
    be read is skipped with a word on stderr. The number of matches printed."""
    printed = 0
    for log in logs:
        try:
            for text, match in lines(log):
                out.write(text)
                printed += match
        except BrokenPipeError:
            raise  # the reader left (`| head`): stop, handled in main()
        except (UnsafeFile, OSError) as exc:
            print(f"gym-audit logs: skipping {log.relpath}: {exc}", file=sys.stderr)
    return printed


def _follow(safe: SafeDir, printed_logs: list[Any], matcher: Matcher, args: argparse.Namespace, out: object) -> int:
    """New complete lines of every selected log (new logs included) until the run has ended;
    every line of a log not in `printed_logs`.

    Woken by the run directory's events (schemas/watch.py): a line is printed as it lands and
    nothing runs in between; the poll every `--interval` stays where events cannot see every
    write (no watchdog, no inotify, a network filesystem written from other nodes)."""
    from audit import _logview as logview
    from audit._logs import list_logs
    from schemas.watch import RunDirWatch

    follower = logview.Follower(
        {log.relpath: (safe.size(log.relpath) or 0, _count_lines(safe, log.relpath)) for log in printed_logs}
    )
    printed = 0
    ended_at: float | None = None
    with RunDirWatch.start(safe.path, logview.follow_wakes, args.interval) as watch:
        try:
            while True:
                current = list_logs(safe, rank=args.rank, judge=args.judge)
                for log in current:
                    if "/" in log.relpath:
                        watch.add(log.relpath.rsplit("/", 1)[0])  # a log directory (Ray's session logs)
                    for number, text in follower.new_lines(safe, log.relpath):
                        if matcher.line_matches(text):
                            out.write(b"%s:%d:%s\n" % (log.relpath.encode(), number, text))  # type: ignore[attr-defined]
                            printed += 1
                out.flush()  # type: ignore[attr-defined]
                if _run_ended(safe):
                    # One more round after the end: the last lines of a teardown land just after it.
                    if ended_at is not None and time.monotonic() - ended_at > 1.0:
                        return printed
                    ended_at = ended_at or time.monotonic()
                watch.wait(limit=None if ended_at is None else max(0.05, ended_at + 1.0 - time.monotonic()))
        except KeyboardInterrupt:
            return printed


def _count_lines(safe: SafeDir, relpath: str) -> int:
    from audit._logs import Matcher, grep_log

    n = 1
    for _ in grep_log(safe, relpath, Matcher.compile(None)):
        n += 1
    return n


def _run_ended(safe: SafeDir) -> bool:
    """Every rank that wrote a phases file has written its cleanup record."""
    from schemas import names

    entries, _ = safe.scan()
    files = {rel for rel, kind in entries if kind == "file"}
    parsed = (names.parse(f) for f in files)
    ranks = {p.rank for p in parsed if p is not None and p.schema == "phases" and p.rank is not None}
    return bool(ranks) and all(names.cleanup(r) in files for r in ranks)


def _ls(argv: Sequence[str]) -> int:
    from audit import _runs as runs

    args = _ls_parser().parse_args(argv)
    root = args.output or os.environ.get(OUTPUT_ROOT_ENV)
    if not root:
        print(f"gym-audit ls: pass OUTPUT (the output root) or set {OUTPUT_ROOT_ENV}", file=sys.stderr)
        return 2
    rows = runs.list_runs(Path(root))
    if not rows:
        print(f"gym-audit ls: no run under {root}/cluster", file=sys.stderr)
        return 1
    sys.stdout.write(runs.render_json(rows) if args.json else runs.render_table(rows))
    return 0


def _completion(argv: Sequence[str]) -> int:
    from launch.spec.completion import bash_script

    _completion_parser().parse_args(argv)
    subs = {name: make() for name, make in SUBCOMMANDS.items()}
    print(bash_script("gym-audit", _audit_parser(), subs))
    return 0


def _without_gc(command: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    """Run a command with the cycle collector paused. An audit builds ~1M small objects (parsed
    JSON, views) that form no cycles, and the collector's passes over them cost ~10 % of an audit
    of 1,024 replicas; the memory is bounded by the audit's own caps, and freed on return."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return command(argv)
    finally:
        if was_enabled:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """The `gym-audit` program. Called with no arguments (as the program), an audit leaves without
    the interpreter's teardown; called with arguments (from Python), it returns its exit code."""
    code = _main(argv)
    # Under a profiler or a coverage tracer, the normal exit lets them write what they measured.
    traced = sys.getprofile() is not None or sys.gettrace() is not None
    if argv is None and not traced and not (sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS):
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """Exit without freeing the audit's ~1M objects one by one (the interpreter's teardown runs a
    full collection over them and frees every module: ~10 % of an audit of 1,024 replicas). The
    audit holds no open file by now (the HTML report is written, fsync'd and closed before), so
    flushing stdout and stderr is all that is left; if that fails, the normal exit reports it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


@quiet_broken_pipe
def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else ""
    prog = f"gym-audit {command}" if command else "gym-audit"
    try:
        if command == "logs":
            return _logs(argv[1:])
        if command == "ls":
            return _ls(argv[1:])
        if command == "completion":
            return _completion(argv[1:])
        return _without_gc(_audit, argv)
    except GymError as exc:  # every user error (an unusable run directory, ...): one line, its exit code
        print(terminal_safe(f"{prog}: {exc}"), file=sys.stderr)
        return exc.exit_code
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
