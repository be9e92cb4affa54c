"""The declared training evidence ([driver.evidence]) read as it grows, for the progress watch on
the driver's node: each new line of the metrics JSONL and of the MILES contract files, and each
line of the driver's output matching log_step_pattern (handed over by the console tee, in
process: no read of driver-RANK.log). Only new bytes are read, a bounded amount per look, through
the run directory's safe reader (no symlink followed). The line rules are the audit's
(launch/spec/evidence_lines.py)."""

from __future__ import annotations

import re
import threading
from typing import Any

import orjson

from launch.spec.evidence_lines import MILES_CONTRACT_RE, metrics_step, miles_step
from launch.spec.sections import EvidenceConfig
from schemas import RunDir

__all__ = ["EvidenceTail", "JsonlTail", "LIST_EVERY", "MAX_FILES", "READ_PER_LOOK"]

READ_PER_LOOK = 1 << 20  # bytes of one file per look: a burst is read over a few looks
MAX_FILES = 4096
LIST_EVERY = 10  # looks between listings of the MILES save_dir (its files are read every look)


class JsonlTail:
    """One growing JSONL file of the run directory, read from where the last look stopped."""

    def __init__(self, run: RunDir, relpath: str) -> None:
        self.run, self.relpath = run, relpath
        self.offset = 0
        self._partial = b""

    def new_objects(self) -> list[dict[str, Any]]:
        size = self.run.size_of(self.relpath)
        if size is None:
            return []
        if size < self.offset:  # rewritten from the start: read it again
            self.offset, self._partial = 0, b""
        if size == self.offset:
            return []
        try:
            data = self.run.read_from(self.relpath, self.offset, min(READ_PER_LOOK, size - self.offset))
        except (OSError, ValueError):
            return []
        self.offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        out = []
        for line in lines:
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # noise, as the audit skips it
            if isinstance(doc, dict):
                out.append(doc)
        return out


class EvidenceTail:
    """Counts the evidence's step lines as they appear; `look()` returns (lines seen, last step)."""

    def __init__(self, run: RunDir, cfg: EvidenceConfig) -> None:
        self.run, self.cfg = run, cfg
        self._metrics = JsonlTail(run, cfg.metrics) if cfg.metrics is not None else None
        self._contracts: dict[str, JsonlTail] = {}
        self._looks = 0
        self._pattern = re.compile(cfg.log_step_pattern.encode()) if cfg.log_step_pattern else None
        self._lock = threading.Lock()  # log lines arrive on the console tee's thread
        self.seen = 0
        self.step: int | None = None

    def log_line(self, line: bytes) -> None:
        """The console tee's hook: one line of the driver's output."""
        if self._pattern is None:
            return
        m = self._pattern.search(line)
        if m is None:
            return
        with self._lock:
            self.seen += 1
            step = m.groupdict().get("step")
            if step is not None and step.isdigit():
                self.step = int(step)

    def look(self) -> tuple[int, int | None]:
        steps: list[float] = []
        if self._metrics is not None:
            steps += [s for d in self._metrics.new_objects() if (s := metrics_step(d, self.cfg.step_field)) is not None]
        if self.cfg.preset is not None:
            if self._looks % LIST_EVERY == 0:
                self._list_contracts()
            for tail in self._contracts.values():
                steps += [s for d in tail.new_objects() if (s := miles_step(d)) is not None]
        self._looks += 1
        with self._lock:
            self.seen += len(steps)
            if steps:
                self.step = int(max(steps))
            return self.seen, self.step

    def _list_contracts(self) -> None:
        save_dir = self.cfg.save_dir
        for leaf in self.run.listdir(save_dir):
            if len(self._contracts) >= MAX_FILES:
                break
            if MILES_CONTRACT_RE.match(leaf) and leaf not in self._contracts:
                self._contracts[leaf] = JsonlTail(self.run, f"{save_dir}/{leaf}")
