"""Replaying a scheduler's job on this machine (the Beaker and SkyPilot replays): one process per
replica, each in its own session as on its own node, and their ending collected."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from launch.backends import RenderRequest
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import resolved_from_dict
from launch.spec.plan import plan as make_plan


def start_node(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> subprocess.Popen:
    """One replica's process, in its own session (its node), output captured."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(procs: list[subprocess.Popen], timeout: float) -> tuple[list[int], str]:
    """Every replica's exit code and their output, within `timeout` in all; a straggler is killed."""
    codes, text = [], []
    end = time.monotonic() + timeout
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, end - time.monotonic()))
            codes.append(p.returncode)
            text.append(out or "")
    finally:
        for p in procs:  # by pid (own session), never by name
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return codes, "\n".join(text)


def generated_request(data: dict, uuid: str, root: str) -> RenderRequest:
    """What a renderer gets for a property-generated spec whose output root is `root`."""
    try:
        config = RunConfig.from_spec(resolved_from_dict(data, "/work/runs"))
    except SpecError as exc:
        raise AssertionError(f"the generator made an invalid spec: {exc}") from None
    return RenderRequest(config, make_plan(config), uuid, root, f"{root}/spec.json", output_root_given=root)
