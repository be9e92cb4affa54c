"""What a torch.distributed process group said when it failed, read from the first cause's log (a
driver's log carries its Ray workers' output and the tracebacks of failed ranks): the group's own
error (gloo's enforce failures such as a size mismatch, NCCL's errors) before its consequences
(peers that lost the connection), the collective a rank failed in (the c10d frame of its
traceback), and a rank's actor that died. Lines for the first cause; nothing when the log says none."""

from __future__ import annotations

import re

from audit._logs import read_tail
from audit.safedir import SafeDir, UnsafeFile

__all__ = ["process_group_errors"]

MAX_LINES = 3
MAX_CHARS = 300
# The group's own words: gloo's enforce failures, NCCL's errors, c10d's backend errors.
OWN = re.compile(
    r"(enforce fail at [^\]]*gloo[^\]]*\]\s*(?P<gloo>.*)|(?P<nccl>NCCL error.*)|DistBackendError: (?P<backend>.*))"
)
# A peer's view of a rank that went away: consequences, named after the collective they were in.
LOST = re.compile(r"\[[^\]]*gloo[^\]]*\]\s*(?P<msg>.*(?:Connection reset by peer|Connection closed by peer).*)")
C10D_FRAME = re.compile(r'distributed_c10d\.py", line \d+, in (?P<op>\w+)')
RAY_PROCESS = re.compile(r"\((?P<who>\w+) pid=(?P<pid>\d+), ip=(?P<ip>[\d.:a-f]+)\)")
DIED = re.compile(r"The actor died unexpectedly")
DIED_FIELD = re.compile(r"^\s*(?P<key>class_name|pid|ip): (?P<value>\S+)")


def process_group_errors(safe: SafeDir | None, log: str | None) -> tuple[str, ...]:
    if safe is None or not log:
        return ()
    try:
        lines = read_tail(safe, log)
    except (UnsafeFile, OSError):
        return ()
    own = _own(lines)
    died = _died(lines)
    lost = _lost(lines)
    # One line for a rank that went away and the collective its peers were left in.
    out = [f"{died}; {lost}"] if died and lost else [x for x in (died, lost) if x]
    if own:  # the group's own error explains the rest
        out = [own, *([died] if died else [])]
    return tuple(_cut(x) for x in out[:MAX_LINES])


def _own(lines: list[str]) -> str | None:
    for line in lines:
        m = OWN.search(line)
        if m is None:
            continue
        said = (m.group("gloo") or m.group("nccl") or m.group("backend") or "").split(" /", 1)[0].strip()
        who = RAY_PROCESS.search(line)
        where = f" ({who['who']} pid {who['pid']} on {who['ip']})" if who else ""
        return f"process group error{where}: {said}"
    return None


def _lost(lines: list[str]) -> str | None:
    for i, line in enumerate(lines):
        m = LOST.search(line)
        if m is None:
            continue
        op = next((f.group("op") for f in map(C10D_FRAME.search, reversed(lines[max(0, i - 12) : i])) if f), None)
        during = f"in {op}" if op else "in a collective"
        return f"its peers failed {during}: {m.group('msg').split('. ', 1)[0].strip()}"
    return None


def _died(lines: list[str]) -> str | None:
    for i, line in enumerate(lines):
        if DIED.search(line):
            fields = {m["key"]: m["value"] for m in map(DIED_FIELD.match, lines[i + 1 : i + 8]) if m}
            who = f"{fields.get('class_name', 'an actor')} pid {fields.get('pid', '?')} on {fields.get('ip', '?')}"
            return f"a rank's process died: {who}"
    return None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
