"""Replaying a scheduler's job on this machine (the Beaker and SkyPilot replays): one process per
replica, each in its own session as on its own node, and their ending collected."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from launch.backends.base import RenderRequest
from launch.spec.config import RunConfig
from launch.spec.errors import SpecError
from launch.spec.load import resolved_from_dict
from launch.spec.plan import plan as make_plan
from tests.harness.specs import small_spec


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


# Writes a checkpoint in its first attempt, then ends as the test says; a later attempt that finds
# the checkpoint records which attempt it is and succeeds.
RESUMING_DRIVER = """
import os, pathlib, sys, time
ckpt = pathlib.Path(os.environ["GYM_CHECKPOINT_DIR"])
if (ckpt / "step-1").exists():
    (ckpt / "resumed").write_text(os.environ["GYM_ATTEMPT"])
    sys.exit(0)
(ckpt / "step-1").write_text(os.environ["GYM_ATTEMPT"])
{first_ends}
"""


def resuming_spec(tmp_path: Path, replicas: int, first_ends: str) -> Path:
    """Whole-node replicas, no Ray, the resuming driver (`first_ends`: how its first attempt ends,
    e.g. ``sys.exit(3)``): only the restart is under test."""
    driver = tmp_path / "resuming_driver.py"
    driver.write_text(RESUMING_DRIVER.format(first_ends=first_ends))
    spec = tmp_path / "restart.toml"
    command = f'command = ["python", "{driver}"]\ntrains = false'
    spec.write_text(small_spec(replicas=replicas, node_gpus=8, ray=False, driver=command))
    return spec
