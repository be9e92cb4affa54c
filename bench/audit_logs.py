"""Benchmark `gym-audit logs --grep`: generate a ~1 GB log in a temp dir and time the streaming grep.

    .venv/bin/python -m bench.audit_logs [--size-mb 1024] [--pattern "CUDA error"]

Prints MB/s for a literal pattern, a regex and a case-insensitive search, plus peak memory growth,
which must stay near the chunk size whatever the log size. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from audit.load import SafeDir
from audit.logs import Matcher, grep_log
from schemas import names

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--pattern", default="CUDA error")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="audit-logs-bench-") as tmp:
        run_dir = Path(tmp)
        log = run_dir / names.driver_log(0)
        t0 = time.perf_counter()
        errors = generate(log, args.size_mb)
        size_mb = log.stat().st_size / 1e6
        print(f"generated {size_mb:.0f} MB in {time.perf_counter() - t0:.1f} s ({errors} error lines)")
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for label, pattern, ic in (
            ("literal", args.pattern, False),
            ("regex", r"ERROR .*CUDA error: \w+", False),
            ("ignore-case", args.pattern.lower(), True),
        ):
            # Drop nothing from the page cache on purpose: this measures the grep, not the disk.
            seconds, hits = time_grep(run_dir, pattern, ic)
            print(f"{label:12} {pattern!r:32} {hits:6} hits  {seconds:6.2f} s  {size_mb / seconds:8.0f} MB/s")
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"peak RSS growth while grepping: {(rss1 - rss0) / 1024:.0f} MB (log is {size_mb:.0f} MB)")
        os.sync()


if __name__ == "__main__":
    main()
