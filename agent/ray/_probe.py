"""`python -m agent.ray._probe`: print Ray's live nodes as JSON once `--expect` are alive.

Run as a child of the head's agent so that importing and connecting to Ray never happens inside
the agent process itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import time
from typing import Any

__all__ = ["CONNECT_S", "PROGRESS_MARK", "live_nodes", "main"]

PROGRESS_MARK = "gym-ray-probe live nodes "
CONNECT_S = 2.0


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=CONNECT_S):
            return True
    except OSError:
        return False


def live_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ray's live nodes, less a registration left by an earlier `ray start` on the same address: a
    raylet that missed Ray's registration wait was stopped, but the GCS may still take its late
    registration and call it alive until its health checks fail. Where an address has several live
    nodes, only those whose raylet port answers count (the agent restarts Ray with new ports)."""
    live = [n for n in nodes if n.get("Alive")]
    per_address: dict[str, int] = {}
    for n in live:
        per_address[n["NodeManagerAddress"]] = per_address.get(n["NodeManagerAddress"], 0) + 1
    return [
        n
        for n in live
        if per_address[n["NodeManagerAddress"]] == 1 or _answers(n["NodeManagerAddress"], int(n["NodeManagerPort"]))
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--node-ip", required=True)
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    args = ap.parse_args()
    import ray

    ray.init(address=args.address, _node_ip_address=args.node_ip, logging_level=logging.ERROR, log_to_driver=False)
    deadline = time.monotonic() + args.timeout
    seen = -1
    while True:
        live = live_nodes(ray.nodes())  # type: ignore[no-untyped-call]
        if len(live) != seen:  # the parent prints this as progress ("Ray: 2/3 nodes")
            seen = len(live)
            print(f"{PROGRESS_MARK}{seen}/{args.expect}", file=sys.stderr, flush=True)
        if len(live) >= args.expect or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # Let late joiners and duplicates show up: a second look catches a node joining just after.
    time.sleep(0.5)
    live = live_nodes(ray.nodes())  # type: ignore[no-untyped-call]
    out = [
        {
            "address": n["NodeManagerAddress"],
            "gpus": float(n.get("Resources", {}).get("GPU", 0.0)),
            "node_id": n.get("NodeID", ""),
        }
        for n in live
    ]
    ray.shutdown()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
