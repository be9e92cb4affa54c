"""A driver failure across two NFS-like clients: how long until the other client's agents stop.

Six real agents (no Ray) on two mounts of the NFS model (tests/harness/nfs_model.py, NFS's 30 s
listing and negative-lookup caches by default): ranks 0 and 1 on client 1, ranks 2-5 on client 2.
Rank 0's driver exits 1 at a random moment (uniform over one cache period, so the fault falls at
every phase of the other client's cache refresh); measured from rank 0's failure record to each
agent's exit (the bench polls every 20 ms). Repeated N times; median and p99 per figure.

`--doorbell true|false` is passed to the agents as `--set launch.coordination.doorbell=...`; where
the spec has no such key the run passes nothing and is labelled "files only".

    python -m bench.netfs [--reps 8] [--ttl 30] [--doorbell false true]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.harness import assert_nothing_left, fuse_install, small_spec, uid
from tests.harness.agents import forget_agent_tmp_root
from tests.harness.netfs import Placement, coordination_sets, exit_driver, run_split
from tests.harness.nfs_model import nfs_clients

# Client indexes are 0-based in code; the tables call them client 1 and client 2.
PLACEMENT = Placement((0, 0, 1, 1, 1, 1))


@dataclass(frozen=True)
class NetfsSettings:
    dir_ttl: float = 30.0
    neg_ttl: float = 30.0
    # The spec's defaults for the agents' coordination (launch/spec/sections.py).
    heartbeat_interval: float = 2.0
    poll_interval: float = 1.0
    heartbeat_timeout: float = 120.0
    teardown_grace: float = 10.0
    ack_timeout: float = 60.0
    settle: float = 3.0  # seconds after the driver starts before its fault window opens


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default method)."""
    xs = sorted(values)
    at = (len(xs) - 1) * q / 100
    lo = int(at)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def spec_text(s: NetfsSettings, delay: float) -> str:
    return small_spec(
        name="netfs-bench",
        replicas=PLACEMENT.replicas,
        driver=exit_driver(delay),
        startup_timeout=300,
        heartbeat_timeout=s.heartbeat_timeout,
        heartbeat_interval=s.heartbeat_interval,
        poll_interval=s.poll_interval,
        teardown_grace=s.teardown_grace,
        ack_timeout=s.ack_timeout,
        ray=False,
    )


def one_run(s: NetfsSettings, sets: list[str], delay: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="gym-bench-netfs-"))
    try:
        src = tmp / "src"
        mounts = [tmp / "client1", tmp / "client2"]
        with nfs_clients(src, mounts, dir_ttl=s.dir_ttl, neg_ttl=s.neg_ttl):
            split = run_split(tmp, src, mounts, PLACEMENT, spec_text(s, delay), uid("netfs", "bench"), sets=sets)
            left = ""
            try:
                assert_nothing_left(split.run_dir, marks=[split.uuid])
            except AssertionError as exc:
                left = str(exc)
        if 0 not in split.records:
            raise RuntimeError(f"rank 0 wrote no failure record (codes {split.codes}):\n{split.output[-3000:]}")
        far = PLACEMENT.ranks_on(1)
        return {
            "driver_delay_s": delay,
            "codes": split.codes,
            "kinds": {r: d.get("kind") for r, d in sorted(split.records.items())},
            "neighbour_exit_s": split.since_root(split.exit_wall[1]),
            "client2_reaction_max_s": max(
                (split.since_root(split.records[r]["wall_time"]) for r in far if r in split.records), default=None
            ),
            "client2_stopped_s": max(split.since_root(split.exit_wall[r]) for r in far),
            "rank0_exit_s": split.since_root(split.exit_wall[0]),
            "left": left,
        }
    finally:
        agent_tmp = forget_agent_tmp_root(tmp)
        if agent_tmp is not None:
            shutil.rmtree(agent_tmp, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def summarise(rows: list[dict], key: str) -> dict[str, float | None]:
    xs = [float(r[key]) for r in rows if r.get(key) is not None]
    if not xs:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": statistics.median(xs), "p99": percentile(xs, 99), "max": max(xs)}


def measure(
    reps: int, s: NetfsSettings, doorbell: bool | None, seed: int = 24, log: Callable[[str], None] = print
) -> dict:
    """`reps` runs with one doorbell choice; per-run rows and their medians and p99s."""
    sets, protocol = coordination_sets(doorbell)
    rng = random.Random(seed)
    rows = []
    for i in range(reps):
        delay = s.settle + rng.uniform(0, s.dir_ttl)
        t0 = time.monotonic()
        row = one_run(s, sets, delay)
        rows.append(row)
        log(
            f"  {protocol} run {i + 1}/{reps}: driver fails {delay:.1f}s in; neighbour stopped "
            f"{row['neighbour_exit_s']:.2f}s, client 2 all stopped {row['client2_stopped_s']:.2f}s after the "
            f"root record; codes {row['codes']}{'; LEFT ' + row['left'] if row['left'] else ''} "
            f"({time.monotonic() - t0:.0f}s)"
        )
    return {
        "protocol": protocol,
        "doorbell_set": sets,
        "settings": asdict(s),
        "placement": list(PLACEMENT.clients),
        "reps": reps,
        "rows": rows,
        **{k: summarise(rows, k) for k in ("neighbour_exit_s", "client2_reaction_max_s", "client2_stopped_s")},
        "all_exit_1": all(r["codes"] == [1] * PLACEMENT.replicas for r in rows),
        "runs_with_leftovers": sum(1 for r in rows if r["left"]),
    }


def choices(doorbell: list[str]) -> list[bool | None]:
    """The doorbell settings to measure; without the key in the spec, one files-only run."""
    wanted = [v == "true" for v in doorbell]
    if not coordination_sets(True)[0]:
        return [None]
    return list(dict.fromkeys(wanted))


def table(results: list[dict]) -> str:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f} s"

    lines = [
        "| protocol | TTL (listing / negative) | runs | neighbour stopped p50 | client 2 reacted p50 / p99 "
        "| client 2 all stopped p50 | p99 | max | all exit 1 | left |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["settings"]
        c2, re = r["client2_stopped_s"], r["client2_reaction_max_s"]
        lines.append(
            f"| {r['protocol']} | {s['dir_ttl']:g} s / {s['neg_ttl']:g} s | {r['reps']} "
            f"| {fmt(r['neighbour_exit_s']['p50'])} | {fmt(re['p50'])} / {fmt(re['p99'])} "
            f"| {fmt(c2['p50'])} | {fmt(c2['p99'])} | {fmt(c2['max'])} "
            f"| {'yes' if r['all_exit_1'] else 'no'} | {r['runs_with_leftovers']} |"
        )
    return "\n".join(lines)


def run(reps: int, s: NetfsSettings, doorbell: list[str], log: Callable[[str], None] = print) -> list[dict] | str:
    """Every doorbell choice measured; the reason instead where FUSE cannot exist here."""
    reason = fuse_install.unavailable_reason()
    if reason:
        return reason
    return [measure(reps, s, choice, log=log) for choice in choices(doorbell)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--ttl", type=float, default=30.0, help="listing and negative-lookup cache seconds")
    ap.add_argument("--doorbell", nargs="+", choices=("true", "false"), default=["false", "true"])
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    res = run(args.reps, NetfsSettings(dir_ttl=args.ttl, neg_ttl=args.ttl), args.doorbell)
    if isinstance(res, str):
        print(f"skipped: {res}")
        return 0
    print(table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
