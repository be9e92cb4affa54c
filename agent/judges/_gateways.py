"""The judge gateways this node hosts (agent/judges/_gateway.py is the process): started, published,
and told where their judge is.

One gateway per bound judge: beside a managed judge on its node, and on the driver's node for an
external one. It is started with the judge (before Ray: it binds in milliseconds), so its address is
known while the judge still loads: ``gateway-NAME.json`` names it, and that is the endpoint every
client of the run is given (registry.json, ``GYM_JUDGE_URL_<NAME>``, ``OI_MILES_JUDGE_REGISTRY``).
Until a managed judge is healthy the gateway answers 503; the agent then writes the judge's own URL
to the gateway's upstream file. Supervised like the judge: its exit fails the run as the judge's.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial

from agent.coord.context import RunContext
from agent.judges._port_file import read_port_file
from agent.proc.procgroup import ProcessGroup
from agent.proc.supervisor import ExitPolicy, child_env
from launch.spec.sections import JudgeConfig
from schemas import FailureKind, names, records, safe_io

__all__ = ["LocalGateway", "LocalGateways", "gateway_argv"]


@dataclass
class LocalGateway:
    judge: JudgeConfig
    port_file: str
    upstream_file: str
    log: str
    group: ProcessGroup | None = None
    port: int | None = None


def gateway_argv(ctx: RunContext, g: LocalGateway) -> list[str]:
    """The gateway's command line for judge ``g.judge`` on this node."""
    j, judging = g.judge, ctx.config.judging
    upstream = ["--upstream", str(j.endpoint)] if not j.managed else ["--upstream-file", g.upstream_file]
    return [
        sys.executable,
        "-m",
        "agent.judges._gateway",
        "--judge",
        j.name,
        "--host",
        ctx.address,
        "--port",
        "0",
        "--port-file",
        g.port_file,
        *upstream,
        "--max-concurrent-calls",
        str(j.max_concurrent_calls),
        "--timeout",
        str(j.timeout),
        "--run-dir",
        str(ctx.run.path),
        "--rank",
        str(ctx.rank),
        "--attempt",
        str(ctx.run.attempt),
        "--fingerprint",
        ctx.config.fingerprint,
        "--log-max-bytes",
        str(judging.grades_max_bytes),
        "--log-keep",
        str(judging.grades_keep),
    ]


def endpoint_of(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


class LocalGateways:
    """The gateways of one node."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.gateways: dict[str, LocalGateway] = {}

    def start(self, judges: list[JudgeConfig], tmp: str) -> None:
        """Start a gateway per judge, then wait (inside the startup deadline) for each to listen and
        publish ``gateway-NAME.json``."""
        ctx = self.ctx
        for j in judges:
            g = LocalGateway(
                j,
                f"{tmp}/{j.name}.gateway.json",
                f"{tmp}/{j.name}.upstream",
                names.gateway_process_log(j.name, ctx.rank),
            )
            self.gateways[j.name] = g
            g.group = ctx.supervisor.start(
                f"gateway-{j.name}",
                gateway_argv(ctx, g),
                env=child_env({}),
                log_fd=ctx.run.open_log(g.log),
                # The gateway is how every client reaches the judge: its death is the judge's failure.
                policy=ExitPolicy(FailureKind.JUDGE, g.log, judge=j.name),
            )
        for g in self.gateways.values():
            ctx.wait_startup(f"judge {g.judge.name}'s gateway to listen", partial(self._listening, g))
            self._write_record(g)

    def _listening(self, g: LocalGateway) -> bool:
        g.port = read_port_file(g.port_file)
        return g.port is not None

    def _write_record(self, g: LocalGateway, upstream: str | None = None) -> None:
        ctx = self.ctx
        assert g.group is not None and g.port is not None
        fields = records.gateway_fields(
            judge=g.judge.name,
            mode=g.judge.mode,
            endpoint=endpoint_of(ctx.address, g.port),
            host=ctx.address,
            port=g.port,
            pid=g.group.pid,
            upstream=upstream if g.judge.managed else g.judge.endpoint,
            max_concurrent_calls=g.judge.max_concurrent_calls,
            requests_log=names.gateway_log(g.judge.name),
            log=g.log,
        )
        ctx.run.write_artifact(names.gateway_record(g.judge.name), ctx.writer, fields)

    def point_at(self, judge: str, url: str) -> None:
        """Tell judge's gateway where the (now healthy) judge listens."""
        g = self.gateways.get(judge)
        if g is not None:
            safe_io.write_atomic_path(g.upstream_file, url.encode("utf-8"), 0o600)
            self._write_record(g, url)  # the record now says where the gateway forwards
