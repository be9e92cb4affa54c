"""`python -m agent.ray.probe`: print Ray's live nodes as JSON once `--expect` are alive.

Run as a child of the head's agent so that importing and connecting to Ray never happens inside
the agent process itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

PROGRESS_MARK = "gym-ray-probe live nodes "


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
        live = [n for n in ray.nodes() if n.get("Alive")]
        if len(live) != seen:  # the parent prints this as progress ("Ray: 2/3 nodes")
            seen = len(live)
            print(f"{PROGRESS_MARK}{seen}/{args.expect}", file=sys.stderr, flush=True)
        if len(live) >= args.expect or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # Let late joiners and duplicates show up: a second look catches a node joining just after.
    time.sleep(0.5)
    live = [n for n in ray.nodes() if n.get("Alive")]
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
