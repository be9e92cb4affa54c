"""The Ray head's two records: ray-head.json (where the workers join; the large-cluster settings)
and ray-layout.json (the readiness gate: the expected layout against Ray's live one), their
builders and what a reader gets from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.lenient import Lenient

__all__ = ["RayHeadRecord", "RayLayoutRecord", "ray_head_fields", "ray_layout_fields"]


@dataclass(frozen=True)
class RayHeadRecord(Lenient):
    """ray-head.json as read."""

    gcs_address: str | None = None
    ray_nodes: int | None = None  # the nodes of the Ray cluster in the plan
    large_cluster: bool | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)  # RAY_* variable -> value


def ray_head_fields(
    *, gcs_address: str, ray_nodes: int, large_cluster: bool, settings: Mapping[str, str]
) -> dict[str, Any]:
    """ray-head.json: the GCS address; `settings`, the RAY_* variables a large cluster started with."""
    return {
        "gcs_address": gcs_address,
        "ray_nodes": ray_nodes,
        "large_cluster": large_cluster,
        "settings": dict(settings),
    }


@dataclass(frozen=True)
class RayLayoutRecord(Lenient):
    """ray-layout.json as read: the layouts are address -> GPUs, as written."""

    head_address: str | None = None
    ray_address: str | None = None
    expected: Mapping[str, Any] = field(default_factory=dict)
    actual: Mapping[str, Any] = field(default_factory=dict)
    passed: bool | None = None
    problems: tuple[str, ...] = ()


def ray_layout_fields(
    *,
    head_address: str,
    ray_address: str,
    expected: Mapping[str, float],
    actual: Mapping[str, float],
    live_nodes: Sequence[Mapping[str, Any]],
    passed: bool,
    problems: Sequence[str],
    waited_s: float,
) -> dict[str, Any]:
    """ray-layout.json: the gate's verdict and its problems; `waited_s` from the gate's start."""
    return {
        "head_address": head_address,
        "ray_address": ray_address,
        "expected": dict(expected),
        "actual": dict(actual),
        "live_nodes": [dict(n) for n in live_nodes],
        "passed": passed,
        "problems": list(problems),
        "waited_s": round(waited_s, 3),
    }
