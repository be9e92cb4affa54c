"""The one shuffle rule the sample ledger's audit can recompute ([driver.ledger] shuffle_seed):
epoch E of a dataset of N ids yields them in `epoch_order(N, seed, E)`, a permutation of 0..N-1.

Why our own rule and not a framework's sampler: numpy's and torch's generators promise no stream
stable across versions, and the audit must rebuild the driver's order years later. This one is a
few integer operations (splitmix64's finaliser over each index, keyed by seed and epoch, then a
sort), so any language can compute it; a driver that shuffles this way is checkable. The finaliser
is a bijection of 64-bit integers, so no two keys tie and every sort gives the same order.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ORDER_FIELD", "epoch_order", "order_identity"]

_MASK = (1 << 64) - 1


def epoch_order(count: int, seed: int, epoch: int) -> Any:
    """A numpy array of int64: position k of epoch `epoch` holds line epoch_order(...)[k] of the order."""
    import numpy as np  # the driver's and the audit's, when a run shuffles

    key = np.uint64((seed * 0x9E3779B97F4A7C15 + (epoch + 1) * 0xD1B54A32D192ED03) & _MASK)
    with np.errstate(over="ignore"):
        x = np.arange(count, dtype=np.uint64) + key
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return np.argsort(x).astype(np.int64, copy=False)


ORDER_FIELD = "ledger_order"  # spec.json: the order file's identity when the run started


def order_identity(path: str, max_bytes: int = 4 << 30) -> dict[str, Any] | None:
    """{path, sha256, lines} of the order file as it is now (spec.json's `ledger_order`), read in
    slices; None when it cannot be read (the audit then says so of the file it finds)."""
    import hashlib

    digest, lines, size, last = hashlib.sha256(), 0, 0, b"\n"
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 24):
                size += len(chunk)
                if size > max_bytes:
                    return None
                digest.update(chunk)
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    return {"path": os.path.abspath(path), "sha256": digest.hexdigest(), "lines": lines + (last != b"\n")}
