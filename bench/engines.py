"""`make bench` engines: a real inference engine (vLLM's CPU build, `make engines`) under real agents.

One two-replica `gym-launch local` run with a managed vLLM judge serving the tiny model (random
weights, canaries off: they cannot pass) and a driver that idles. Measured on it:
1. start to ready: the agent's own figure (judge-endpoint `ready_after_s`: spawn to /health and
   /v1/models answering), and the engine's processes and their RSS once ready;
2. idle cost: CPU of every process of the run but the engine's (agents, reapers, gateway, health
   probes) and of the engine itself, over a window while nothing is graded;
3. the gateway's added latency on the real engine: 64 (and 1) keep-alive callers posting chat
   completions (16 tokens) straight at the engine, then through the agent's own gateway
   (max_concurrent_calls 64: nothing queues), p50/p99 and throughput, as bench/judges.py does
   for the stand-in judge.

Skipped, saying why, without the engine. The run is ended by SIGTERM to `gym-launch local`;
everything it started must be gone afterwards (the harness's orphan check).
"""

from __future__ import annotations

import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from bench import judges
from schemas import names
from tests.harness import assert_nothing_left, kill_tree_by_session, launch_local, read, small_spec, uid
from tests.harness.agents import wait_phase
from tests.harness.engines import engine_env, engine_python, tiny_model, vllm_judge_tables
from tests.harness.orphans import run_processes

STARTUP = 900.0  # s: vLLM starts in 68-126 s on idle cores, far slower beside other work
CALLS = 64
# Exactly 16 tokens a reply (random weights may say EOS early): every request costs the same.
PROMPT = [{"role": "user", "content": "grade this answer"}]
BODY = json.dumps({"model": "tiny", "messages": PROMPT, "max_tokens": 16, "min_tokens": 16}).encode()


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _split(run_dir: Path, engine_pid: int) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """The run's live processes: (the engine's: its API server and every descendant, everything else of
    the run but the sleeping driver)."""
    server = psutil.Process(engine_pid)
    engine = [server, *server.children(recursive=True)]
    pids = {p.pid for p in engine}
    others = [p for p in run_processes(run_dir) if p.pid not in pids and "time.sleep" not in " ".join(_cmd(p))]
    return engine, others


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _idle(run_dir: Path, engine_pid: int, seconds: float) -> dict[str, Any]:
    engine, agents = _split(run_dir, engine_pid)
    e0, a0, t0 = _cpu(engine), _cpu(agents), time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - t0
    engine_rss = sum(p.memory_info().rss for p in engine if p.is_running())
    return {
        "seconds": round(took, 2),
        "agent_processes": len(agents),
        "agent_cpu_percent": round(100 * (_cpu(agents) - a0) / took, 2),
        "engine_processes": len(engine),
        "engine_cpu_percent": round(100 * (_cpu(engine) - e0) / took, 2),
        "engine_rss_mb": round(engine_rss / 2**20, 1),
    }


def run(window: float = 10.0, idle: float = 30.0, say: Any = print) -> dict[str, Any]:
    python = engine_python()
    if python is None:
        return {"skipped": "no vLLM here: `make engines` installs it"}
    model_dir, revision = tiny_model(python)
    tables = vllm_judge_tables(model_dir, revision, canary=False, max_concurrent_calls=CALLS)
    driver = 'command = ["python", "-c", "import time; time.sleep(3600)"]\ntrains = false'
    spec = small_spec(replicas=2, ray=False, driver=driver, startup_timeout=STARTUP, judges=tables)
    with tempfile.TemporaryDirectory(prefix="enginebench", ignore_cleanup_errors=True) as d:
        tmp = Path(d)
        run = launch_local(tmp, spec, uid("engines", "bench"), env=engine_env(python))
        try:
            for rank in (0, 1):
                wait_phase(run.run_dir, rank, "driver", STARTUP)
            endpoint = read(run.run_dir, names.judge_endpoint("general", 1))
            gateway = read(run.run_dir, names.gateway_record("general"))
            say(f"  engine ready after {endpoint['ready_after_s']:.1f} s; idle for {idle:g} s")
            out: dict[str, Any] = {"ready_after_s": round(float(endpoint["ready_after_s"]), 2)}
            out["idle"] = _idle(run.run_dir, int(endpoint["pid"]), idle)
            engine = (str(endpoint["host"]), int(endpoint["port"]))
            gw = urlsplit(str(gateway["endpoint"]))
            assert gw.hostname is not None and gw.port is not None, gateway
            through_gateway = (gw.hostname, gw.port)
            out["gateway"] = []
            for callers in (1, CALLS):
                say(f"  {callers} caller(s): direct, then through the gateway, {window:g} s each")
                direct = judges.load(engine[1], callers, window, BODY, host=engine[0])
                through = judges.load(through_gateway[1], callers, window, BODY, host=through_gateway[0])
                out["gateway"].append(
                    {
                        "callers": callers,
                        "direct": direct,
                        "gateway": through,
                        "p50_added_ms": round(through["p50_ms"] - direct["p50_ms"], 3),
                        "p99_added_ms": round(through["p99_ms"] - direct["p99_ms"], 3),
                        "throughput_ratio": round(through["throughput_rps"] / direct["throughput_rps"], 4),
                    }
                )
            run.proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            run.wait(120)
            out["teardown_s"] = round(time.monotonic() - t0, 2)
            assert_nothing_left(run.run_dir)
            return out
        finally:
            kill_tree_by_session(run.proc)


def table(res: dict[str, Any]) -> str:
    if "skipped" in res:
        return f"skipped: {res['skipped']}"
    i = res["idle"]
    out = [
        f"ready after {res['ready_after_s']:.1f} s; teardown {res['teardown_s']:.1f} s",
        f"idle {i['seconds']:.0f} s: gym-agent {i['agent_cpu_percent']:.2f}% CPU over {i['agent_processes']} "
        f"processes; engine {i['engine_cpu_percent']:.2f}% CPU, {i['engine_processes']} processes, "
        f"{i['engine_rss_mb']:.0f} MB RSS",
        f"{'callers':>8} {'direct p50':>11} {'p99':>9} {'gateway p50':>12} {'p99':>9} {'added p50':>10} "
        f"{'added p99':>10} {'direct rps':>11} {'gateway rps':>12}",
    ]
    for r in res["gateway"]:
        d, g = r["direct"], r["gateway"]
        out.append(
            f"{r['callers']:>8} {d['p50_ms']:>8.1f} ms {d['p99_ms']:>6.1f} ms {g['p50_ms']:>9.1f} ms "
            f"{g['p99_ms']:>6.1f} ms {r['p50_added_ms']:>7.2f} ms {r['p99_added_ms']:>7.2f} ms "
            f"{d['throughput_rps']:>11.1f} {g['throughput_rps']:>12.1f}"
        )
    return "\n".join(out)
