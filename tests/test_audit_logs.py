"""`gym-audit logs`: streaming grep equals a naive per-line grep, at any chunk size; filters; CLI."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit._logs import Matcher, _LiteralFinder, excerpt, grep_fd, grep_log, list_logs
from audit.cli import main
from audit.safedir import SafeDir, UnsafeFile


def naive(data: bytes, pattern: str | None, ignore_case: bool = False) -> list[tuple[int, bytes]]:
    rx = re.compile(pattern.encode(), re.IGNORECASE if ignore_case else 0) if pattern is not None else None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(i, ln) for i, ln in enumerate(lines, 1) if rx is None or rx.search(ln)]


def run_grep(
    tmp_path: Path,
    data: bytes,
    pattern: str | None,
    chunk: int,
    ignore_case: bool = False,
    max_line: int = 1 << 20,
    vector: bool = False,
) -> list[tuple[int, bytes]]:
    f = tmp_path / "x.log"
    f.write_bytes(data)
    fd = os.open(f, os.O_RDONLY)
    try:
        matcher = Matcher.compile(pattern, ignore_case)
        return list(grep_fd(fd, matcher, chunk=chunk, max_line=max_line, vector=vector))
    finally:
        os.close(fd)


LINES = st.lists(st.text(alphabet="abcE rRo\t:é", max_size=30).map(lambda s: s.encode()), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    lines=LINES,
    trailing=st.booleans(),
    chunk=st.integers(1, 64),
    pattern=st.sampled_from([None, "E", "rr", "Err|ab", "^a", "c$", "o.r", r"\bab", "é", "(?i)err"]),
    ignore_case=st.booleans(),
)
def test_streaming_grep_equals_naive(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    trailing: bool,
    chunk: int,
    pattern: str | None,
    ignore_case: bool,
) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    tmp = tmp_path_factory.mktemp("g")
    assert run_grep(tmp, data, pattern, chunk, ignore_case) == naive(data, pattern, ignore_case)


@pytest.mark.parametrize(
    ("pattern", "ignore_case"),
    [("CUDA error", False), ("ab", False), ("a", False), ("cuda ERROR", True), ("err.r", False), (None, False)],
)
def test_big_log_with_numpy_counting_equals_naive(tmp_path: Path, pattern: str | None, ignore_case: bool) -> None:
    """A log of thousands of lines: numpy counts its newlines (spans of 4 KiB and more), and the
    literal finder meets both a rare byte ("D" of "CUDA error") and bytes on every line ("ab" in
    "ba ba ab": it falls back to bytes.find where its byte is common)."""
    rng = random.Random(7)
    words = [b"ba", b"ab", b"step", b"loss=1.25", b"\xc3\xa9t\xc3\xa9", b"CUDA", b"error", b"", b"x" * 300]
    lines = [b" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(6000)]
    data = b"\n".join(lines) + b"\n"
    expected = naive(data, pattern, ignore_case)
    assert expected or pattern is None
    for chunk in (5000, 1 << 16):
        assert run_grep(tmp_path, data, pattern, chunk, ignore_case, vector=True) == expected, chunk
    assert run_grep(tmp_path, data, pattern, 1 << 16, ignore_case, vector=False) == expected


@settings(max_examples=300, deadline=None)
@given(
    hay=st.binary(max_size=400).map(lambda b: b.translate(bytes(b"ab\n"[i % 3] for i in range(256)))),
    needle=st.sampled_from([b"ab", b"ba", b"aab", b"b\nb", b"abba"]),
    pos=st.integers(0, 50),
)
def test_literal_finder_equals_bytes_find(hay: bytes, needle: bytes, pos: int) -> None:
    """Every hit, from every position, whichever byte it picks and whether it falls back."""
    finder = _LiteralFinder(needle)
    while True:
        i = finder.find(hay, pos, len(hay))
        assert i == hay.find(needle, pos, len(hay))
        if i < 0:
            break
        pos = i + 1


def test_long_lines_are_searched_and_truncated(tmp_path: Path) -> None:
    data = b"short\n" + b"x" * 5000 + b"NEEDLE" + b"y" * 5000 + b"\nafter NEEDLE\n"
    hits = run_grep(tmp_path, data, "NEEDLE", chunk=1024, max_line=2048)
    assert [n for n, _ in hits] == [2, 3]
    assert hits[0][1].endswith(b"[line truncated]") and len(hits[0][1]) < 2100
    assert hits[1][1] == b"after NEEDLE"


def test_regex_across_newline_stays_per_line(tmp_path: Path) -> None:
    data = b"a\nb\nab\n"
    assert run_grep(tmp_path, data, r"a\sb", chunk=3) == []
    assert run_grep(tmp_path, data, r"a[^x]?b", chunk=3) == [(3, b"ab")]


def test_excerpt_prefers_the_traceback() -> None:
    lines = [
        "start",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    boom()",
        "KeyError: 'k'",
        "cleanup done",
    ]
    assert excerpt(lines) == tuple(lines[1:5])
    assert excerpt(["ok", "ERROR: judge died", "bye"]) == ("ERROR: judge died",)
    assert excerpt(["a", "b"]) == ("a", "b")


@pytest.fixture()
def logdir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "driver-0.log").write_bytes(b"step 1\nERROR driver\n")
    (d / "judge-general-1.log").write_bytes(b"GET /health 200\nerror: CUDA out of memory\n")
    (d / "judge-other-1.log").write_bytes(b"error: other\n")
    (d / "agent-1.log").write_bytes(b"\xff\xfe not utf-8 error\n")
    (d / "notes.log").write_bytes(b"error not a run log\n")
    return d


def test_filters(logdir: Path) -> None:
    with SafeDir(logdir) as safe:
        assert [g.relpath for g in list_logs(safe)] == [
            "driver-0.log",
            "judge-general-1.log",
            "judge-other-1.log",
            "agent-1.log",
        ]
        assert [g.relpath for g in list_logs(safe, rank=1, judge="general")] == ["judge-general-1.log"]
        assert [g.relpath for g in list_logs(safe, rank=0)] == ["driver-0.log"]


def test_cli_output_is_file_line_text(logdir: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["logs", str(logdir), "--grep", "error", "-i"]) == 0
    out = capfdbinary.readouterr().out.splitlines()
    assert out == [
        b"driver-0.log:2:ERROR driver",
        b"judge-general-1.log:2:error: CUDA out of memory",
        b"judge-other-1.log:1:error: other",
        b"agent-1.log:1:\xff\xfe not utf-8 error",
    ]
    assert main(["logs", str(logdir), "--judge", "general"]) == 0
    assert capfdbinary.readouterr().out.count(b"\n") == 2
    assert main(["logs", str(logdir), "--grep", "nomatch"]) == 1
    assert main(["logs", str(logdir), "--grep", "("]) == 2
    assert main(["logs", str(logdir / "nope")]) == 2


def test_symlinked_log_is_refused(logdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("secret\n")
    os.symlink(outside, logdir / "driver-5.log")
    with SafeDir(logdir) as safe:
        assert "driver-5.log" not in [g.relpath for g in list_logs(safe)]
        with pytest.raises(UnsafeFile):
            list(grep_log(safe, "driver-5.log", Matcher.compile("secret")))


def test_broken_pipe_is_quiet(logdir: Path) -> None:
    import subprocess
    import sys

    big = logdir / "driver-1.log"
    big.write_bytes(b"error line\n" * 200_000)
    proc = subprocess.run(
        f'"{sys.executable}" -m audit.cli logs "{logdir}" --grep error | head -1',
        shell=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout.count(b"\n") == 1
    assert proc.stderr == b"", proc.stderr.decode(errors="replace")
