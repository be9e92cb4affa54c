"""`python -m agent.preflight SPEC [--set K=V] [--json] [--address A] [--output-root DIR]`: the same
checks a node's agent runs before Ray starts, on this node alone (no peers to probe), before a
submit or in an `srun` over suspect nodes. `gym-launch preflight` runs it. Exit 0 when every check
whose mode is "fail" passed, 1 when one failed, 2 for a usage or spec error; the table (or JSON)
on stdout."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agent.coord.identity import IdentityError, resolve_address, scheduler_job, visible_devices
from agent.preflight._run import PreflightInputs, run_preflight, socket_env
from agent.preflight.runtime import driver_env_values
from launch.spec.config import RunConfig
from launch.spec.console import quiet_broken_pipe
from launch.spec.errors import SpecError
from launch.spec.load import load_spec
from launch.spec.validate import validated
from schemas.errors import GymError


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="gym-launch preflight",
        description="Run a node's preflight checks (GPUs, /dev/shm, network, disk, limits) on this node alone.",
        epilog="exit codes: 0 every failing-mode check passed, 1 a check failed, 2 a usage or spec error",
    )
    ap.add_argument("spec", metavar="RUN.toml", help="run spec (TOML, or a run directory's spec.json)")
    ap.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[])
    ap.add_argument("--json", action="store_true", help="print the record a run's preflight-RANK.json would hold")
    ap.add_argument("--address", help="this node's address (default: the hostname's, as gym-agent resolves it)")
    ap.add_argument("--output-root", help="the output root to measure (default: the spec's [output] root)")
    return ap.parse_args(argv)


def config_of(args: argparse.Namespace) -> RunConfig:
    resolved = load_spec(args.spec, args.overrides)
    config, problems = validated(resolved)
    if problems or config is None:
        raise SpecError(problems)
    return config


def _hostname_address(exc: IdentityError) -> str:
    """The loopback address the hostname resolves to; `exc` again where it does not resolve at all."""
    host = os.environ.get("BEAKER_NODE_HOSTNAME") or socket.gethostname()
    try:
        address = str(socket.getaddrinfo(host, None)[0][4][0])
    except OSError:
        raise exc from None
    if not ipaddress.ip_address(address).is_loopback:
        raise exc
    return address


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    address_problem = None
    try:
        config = config_of(args)
        try:
            address, _explicit = resolve_address(args.address, os.environ)
        except IdentityError as exc:
            # A hostname on loopback is this node's finding, not a usage error: the table shows it
            # as the network check's problem (which says to pass --address).
            address, address_problem = _hostname_address(exc), str(exc)
    except GymError as exc:  # a spec, a --set or an address to change: one line, its exit code (2)
        print(f"gym-launch preflight: {exc}", file=sys.stderr)
        return exc.exit_code
    seen = visible_devices(os.environ)
    width = config.gpus_per_replica
    job = scheduler_job(os.environ)
    root = Path(args.output_root or config.output_root).absolute()
    inputs = PreflightInputs(
        config=config.launch.preflight,
        address=address,
        hostname=os.environ.get("BEAKER_NODE_HOSTNAME") or socket.gethostname(),
        node_index=None,
        devices=tuple((i, seen[i] if i < len(seen) else str(i)) for i in range(width)),
        env=socket_env(
            (os.environ, "this environment"),
            (config.launch.env, "[launch] env"),
            (driver_env_values(dict(config.driver.env)), "[driver] env"),
        ),
        paths=(("output root", root),),  # a run's checkpoints live under it
        job_started=time.time(),
        probe=None,
        probe_note="peers not probed: this node alone",
        scheduler_node=job.node if job is not None and job.scheduler == "slurm" else None,
        address_problem=address_problem,
    )
    report = run_preflight(inputs)
    if args.json:
        print(json.dumps(report.fields(), indent=2, sort_keys=True))
    else:
        sys.stdout.write(report.table())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
