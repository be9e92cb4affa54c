"""The preflight of one node: every check of [launch.preflight] in order, each timed, each ending
ok, failed, warned, skipped or off by its mode; the report preflight-RANK.json is written from,
the table `gym-launch preflight` prints, and the failure's cause (naming check, node and what to
change)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.coord.doorbell_probe import Probed
from agent.preflight._disk import check_disk
from agent.preflight._gpus import GpuState, check_gpus
from agent.preflight._limits import check_limits
from agent.preflight._network import check_network
from agent.preflight._outcome import CheckResult, Observed, cap, decide
from agent.preflight._shm import check_shm
from launch.spec.sections import PreflightConfig
from schemas import records
from schemas.vocab import CheckStatus, PreflightCheck

__all__ = ["MAX_CAUSE", "PreflightInputs", "Report", "run_preflight", "socket_env"]

MAX_CAUSE = 1500


@dataclass(frozen=True)
class PreflightInputs:
    """What a node's preflight needs to know, gathered by its caller (the agent, or the CLI)."""

    config: PreflightConfig
    address: str
    hostname: str
    node_index: int | None
    devices: tuple[tuple[int, str], ...]  # planned GPUs: (local device, CUDA_VISIBLE_DEVICES entry)
    env: Mapping[str, tuple[str, str]]  # socket-interface variable -> (value, where it is set)
    paths: tuple[tuple[str, Path], ...]  # ("output root", path), ("checkpoint directory", path)
    job_started: float  # wall time: /dev/shm segments older than this are earlier jobs'
    probe: Callable[[], list[Probed]] | None = None  # the peers' doorbells; None: alone, or doorbell off
    probe_note: str = ""  # why there is no probe
    nvml: Any = None  # a stand-in for the pynvml module (tests: no GPU exists there); None: pynvml
    scheduler_node: str | None = None  # the scheduler's name for this node (Slurm: SLURMD_NODENAME)
    address_problem: str | None = None  # why `address` is no address for peers (a hostname on loopback)


@dataclass(frozen=True)
class Report:
    results: tuple[CheckResult, ...]
    seconds: float
    gpus: tuple[GpuState, ...]  # the planned GPUs as NVML saw them (empty without NVML)
    inputs: PreflightInputs

    @property
    def passed(self) -> bool:
        return not any(r.failed for r in self.results)

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.failed)

    @property
    def where(self) -> str:
        i = self.inputs
        node = f"node {i.node_index} " if i.node_index is not None else ""
        return f"{node}({i.hostname}, {i.address})"

    def fields(self) -> dict[str, Any]:
        """preflight-RANK.json (without the header RunDir stamps)."""
        i = self.inputs
        return records.preflight_fields(
            node_index=i.node_index,
            address=i.address,
            hostname=i.hostname,
            scheduler_node=i.scheduler_node,
            passed=self.passed,
            seconds=self.seconds,
            checks=[r.to_json() for r in self.results],
            gpus=[g.to_json() for g in self.gpus],
        )

    def cause(self) -> str:
        """The failure's cause: the node, then each failed check with its first problem."""
        parts = []
        for r in self.failed:
            more = f" (+{len(r.problems) - 1} more)" if len(r.problems) > 1 else ""
            parts.append(f"{r.check}: {r.problems[0]}{more}")
        return cap(f"{self.where} failed preflight: " + "; ".join(parts), MAX_CAUSE)

    def detail(self) -> str:
        """The phase's end line: each check's status, the problems' count."""
        return ", ".join(f"{r.check} {r.status}" for r in self.results) + f" ({self.seconds:.2f} s)"

    def lines(self) -> list[str]:
        """One console line per problem or skip (ok and off checks are in the phase's end line)."""
        out = []
        for r in self.results:
            if r.status is CheckStatus.SKIPPED:
                out.append(f"preflight {r.check}: {r.summary}")
            for p in r.problems:
                label = "FAILED" if r.failed else "warning"
                out.append(f"preflight {r.check} {label}: {p}")
        return out

    def table(self) -> str:
        """The table `gym-launch preflight` prints."""
        rows = [("check", "mode", "result", "time", "what it saw")]
        for r in self.results:
            rows.append(
                (
                    str(r.check),
                    r.mode,
                    str(r.status).upper() if r.problems else str(r.status),
                    f"{r.seconds:.3f}s",
                    r.summary,
                )
            )
        widths = [max(len(row[k]) for row in rows) for k in range(4)]
        lines = [f"preflight of {self.where}: {'passed' if self.passed else 'FAILED'} in {self.seconds:.2f} s"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows]
        problems = [(r, p) for r in self.results for p in r.problems]
        if problems:
            lines.append("")
            lines += [f"{r.check} ({'fails' if r.failed else 'warns'}): {p}" for r, p in problems]
        return "\n".join(lines) + "\n"


def _observe(check: PreflightCheck, i: PreflightInputs) -> tuple[Observed, tuple[GpuState, ...]]:
    c = i.config
    if check is PreflightCheck.GPUS:
        return check_gpus(i.devices, c.min_free_gpu_memory, i.nvml)
    if check is PreflightCheck.SHM:
        return check_shm(c.min_free_shm_bytes, c.clean_shm, i.job_started), ()
    if check is PreflightCheck.NETWORK:
        seen = check_network(i.env, i.address, i.probe, i.probe_note)
        if i.address_problem:
            seen = replace(seen, problems=(i.address_problem, *seen.problems))
        return seen, ()
    if check is PreflightCheck.DISK:
        return check_disk(i.paths, c.min_free_disk_bytes), ()
    return check_limits(c.min_open_files, c.min_locked_memory_bytes), ()


def run_preflight(inputs: PreflightInputs) -> Report:
    """Every check in order; a check that raises is reported as its own problem, never a crash."""
    started = time.monotonic()
    results = []
    gpus: tuple[GpuState, ...] = ()
    for check in PreflightCheck:
        mode = inputs.config.mode(str(check))
        if mode == "off":
            off = f'[launch.preflight] {check} = "off"'
            results.append(CheckResult(check, mode, CheckStatus.OFF, 0.0, off))
            continue
        t0 = time.monotonic()
        try:
            seen, states = _observe(check, inputs)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is a finding about this node
            seen, states = (
                Observed(
                    f"the check could not run: {type(exc).__name__}: {exc}",
                    (f"the {check} check could not run here ({type(exc).__name__}: {exc})",),
                ),
                (),
            )
        gpus = gpus or states
        results.append(decide(check, mode, time.monotonic() - t0, seen))
    return Report(tuple(results), time.monotonic() - started, gpus, inputs)


def socket_env(*layers: tuple[Mapping[str, str], str]) -> dict[str, tuple[str, str]]:
    """The socket-interface variables the run's processes get, each with where it is set; later
    layers win (the job's environment, then [launch] env, then [driver] env)."""
    from agent.preflight._network import SOCKET_VARS

    out: dict[str, tuple[str, str]] = {}
    for env, source in layers:
        for var in SOCKET_VARS:
            if var in env:
                out[var] = (env[var], source)
    return out
