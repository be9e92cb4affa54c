"""Benchmark `gym-audit logs --grep`: generate a 1-2 GB log in a temp dir and time the streaming grep.

    .venv/bin/python -m bench.audit_logs [--size-mb 1536] [--pattern "CUDA error"]

Prints MB/s for a literal pattern, a regex and a case-insensitive search, plus peak memory growth,
which must stay near the chunk size whatever the log size; then `gym-audit logs DIR --grep P` and
`grep -nF P` / `grep -F P` as processes on the same file (warm page cache, output to a file,
best of 5 alternating runs, ours byte-compiled as installed) and the throughput ratio. Not part
of `make test`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from audit._logs import Matcher, grep_log
from audit.safedir import SafeDir
from schemas import names

from .audit_scale import compiled_env

LINE = b"2025-01-01T00:00:00.000Z INFO step=%08d loss=1.2345 lr=3e-06 tokens/s=12345.6 rollout batch ok\n"
NEEDLE = b"2025-01-01T00:00:00.000Z ERROR RuntimeError: CUDA error: out of memory at step %08d\n"


def generate(path: Path, size_mb: int) -> int:
    """Write size_mb of log lines, one error line every ~100k lines. Returns the number of errors."""
    block_lines = 10_000
    errors = 0
    target = size_mb * 1024 * 1024
    written, step = 0, 0
    with open(path, "wb") as fh:
        while written < target:
            lines = [LINE % (step + i) for i in range(block_lines)]
            if step % 100_000 == 0:
                lines[block_lines // 2] = NEEDLE % step
                errors += 1
            data = b"".join(lines)
            fh.write(data)
            written += len(data)
            step += block_lines
    return errors


def time_grep(run_dir: Path, pattern: str, ignore_case: bool) -> tuple[float, int]:
    matcher = Matcher.compile(pattern, ignore_case)
    t0 = time.perf_counter()
    with SafeDir(run_dir) as safe:
        hits = sum(1 for _ in grep_log(safe, names.driver_log(0), matcher))
    return time.perf_counter() - t0, hits


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(argv: list[str], out: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run.

    Output to a regular file, not /dev/null: GNU grep stops at the first match when its output
    is /dev/null (it knows nobody reads it), which would time nothing."""
    with open(out, "wb") as fh:
        c0, t0 = _children_cpu(), time.perf_counter()
        subprocess.run(argv, stdout=fh, check=False, env=env)
        return time.perf_counter() - t0, _children_cpu() - c0


def versus_grep(run_dir: Path, log: Path, pattern: str, repeats: int = 5) -> dict:
    """`gym-audit logs --grep` against GNU grep on the same file, both as processes writing their
    matches to a file."""
    exe = Path(sys.executable).with_name("gym-audit")
    ours = [str(exe), "logs"] if exe.exists() else [sys.executable, "-m", "audit.cli", "logs"]
    size_mb = log.stat().st_size / 1e6
    grep = shutil.which("grep") or "grep"
    runs = {
        "gym-audit logs --grep": [*ours, str(run_dir), "--grep", pattern],
        "grep -nF": [grep, "-nF", pattern, str(log)],
        "grep -F": [grep, "-F", pattern, str(log)],
    }
    best = {k: float("inf") for k in runs}
    cpu = {k: float("inf") for k in runs}
    outs = {k: run_dir.parent / f"out-{i}.txt" for i, k in enumerate(runs)}
    env = compiled_env(run_dir.parent / "pycache")  # byte-compiled, as an installed package runs
    _timed(runs["gym-audit logs --grep"], outs["gym-audit logs --grep"], env)  # compiles them
    for _ in range(repeats):  # alternate, so a noisy neighbour hurts both alike
        for k, argv in runs.items():
            wall, used = _timed(argv, outs[k], env)
            best[k], cpu[k] = min(best[k], wall), min(cpu[k], used)
    # Same answer: the same line numbers and lines (gym-audit prefixes the file name).
    ours_lines = outs["gym-audit logs --grep"].read_bytes().replace(log.name.encode() + b":", b"")
    same = ours_lines == outs["grep -nF"].read_bytes()
    out = {k: {"seconds": v, "cpu_seconds": cpu[k], "mb_per_s": size_mb / v} for k, v in best.items()}
    ratio_n = best["grep -nF"] / best["gym-audit logs --grep"]
    ratio_f = best["grep -F"] / best["gym-audit logs --grep"]
    return {
        "size_mb": size_mb,
        "pattern": pattern,
        "same_output_as_grep_n": same,
        "runs": out,
        "ratio_vs_grep_nF": ratio_n,
        "ratio_vs_grep_F": ratio_f,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1536)
    ap.add_argument("--pattern", default="CUDA error")
    ap.add_argument("--dir", default=None, help="where to generate the log (default: the temp dir)")
    args = ap.parse_args()
    print(run(args.size_mb, args.pattern, args.dir))


def run(size_mb_target: int, pattern: str, where: str | None = None, say=print) -> dict:
    result: dict = {"in_process": {}}
    with tempfile.TemporaryDirectory(prefix="audit-logs-bench-", dir=where) as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        log = run_dir / names.driver_log(0)
        t0 = time.perf_counter()
        errors = generate(log, size_mb_target)
        size_mb = log.stat().st_size / 1e6
        say(f"generated {size_mb:.0f} MB in {time.perf_counter() - t0:.1f} s ({errors} error lines)")
        os.sync()  # no writeback of the fresh log while it is searched: both tools read the page cache
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for label, pat, ic in (
            ("literal", pattern, False),
            ("regex", r"ERROR .*CUDA error: \w+", False),
            ("ignore-case", pattern.lower(), True),
        ):
            # Drop nothing from the page cache on purpose: this measures the grep, not the disk.
            seconds, hits = time_grep(run_dir, pat, ic)
            result["in_process"][label] = {
                "pattern": pat,
                "hits": hits,
                "seconds": seconds,
                "mb_per_s": size_mb / seconds,
            }
            say(f"{label:12} {pat!r:32} {hits:6} hits  {seconds:6.2f} s  {size_mb / seconds:8.0f} MB/s")
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["peak_rss_growth_mb"] = (rss1 - rss0) / 1024
        say(
            f"peak RSS growth while grepping: {(rss1 - rss0) / 1024:.0f} MB (log is {size_mb:.0f} MB; this process's "
            "peak, so 0 when an earlier part of `make bench` peaked higher: run bench.audit_logs alone)"
        )
        result["versus_grep"] = v = versus_grep(run_dir, log, pattern)
        for k, r in v["runs"].items():
            say(f"{k:24} {r['seconds']:6.2f} s  {r['mb_per_s']:8.0f} MB/s  (CPU {r['cpu_seconds']:.2f} s)")
        say(f"same lines and line numbers as grep -nF: {v['same_output_as_grep_n']}")
        say(f"throughput of gym-audit logs --grep / grep -nF: {v['ratio_vs_grep_nF']:.2f}x")
        say(f"throughput of gym-audit logs --grep / grep -F:  {v['ratio_vs_grep_F']:.2f}x (goal >= 1.0x)")
    return result


if __name__ == "__main__":
    main()
