"""placement-RANK.json: which local device does what on one node (its builders) and what a
reader gets from one (PlacementRecord)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.lenient import Lenient, doc_field

__all__ = [
    "FS_NOTE",
    "FS_OPTION",
    "FS_OPTIONS",
    "FS_TEXT",
    "FS_WARNING",
    "FS_WARNINGS",
    "JudgeSlot",
    "PlacementRecord",
    "filesystem_fields",
    "placement_fields",
]


@dataclass(frozen=True)
class JudgeSlot(Lenient):
    """A judge's devices on the node (None: unreadable) and their CUDA_VISIBLE_DEVICES."""

    devices: tuple[int, ...] | None = None
    mask: str | None = doc_field(key="cuda_visible_devices", default=None)


@dataclass(frozen=True)
class PlacementRecord(Lenient):
    """A placement record as read; `rank` and `relpath` say where it was found."""

    rank: int = doc_field(given=True)
    relpath: str = doc_field(given=True)
    node_index: int | None = None
    address: str | None = None
    visible_devices: tuple[str, ...] = ()
    ray_devices: tuple[int, ...] | None = doc_field(path=("ray",), key="devices", default=None)
    ray_mask: str | None = doc_field(path=("ray",), key="cuda_visible_devices", default=None)
    ray_num_gpus: int | None = doc_field(path=("ray",), key="num_gpus", default=None)
    judges: Mapping[str, JudgeSlot] = field(default_factory=dict)
    policy_devices: tuple[int, ...] | None = doc_field(path=("policy",), key="devices", default=None)
    unused_devices: tuple[int, ...] | None = None
    trainer_gpus: int | None = None
    rollout_gpus: int | None = None
    is_head: bool | None = None
    is_driver_node: bool | None = None
    pool: str | None = None  # the pool the agent ran this node as


def _mask(visible: Sequence[str], devices: Sequence[int]) -> str:
    """CUDA_VISIBLE_DEVICES for local device indices: the physical ids this node was given."""
    return ",".join(visible[i] for i in devices)


def placement_fields(
    *,
    node_index: int,
    address: str,
    visible_devices: Sequence[str],
    trainer_gpus: int,
    rollout_gpus: int,
    ray_devices: Sequence[int],
    ray_num_gpus: int,
    judge_devices: Mapping[str, Sequence[int]],
    unused_devices: Sequence[int],
    is_head: bool,
    is_driver_node: bool,
    filesystem: Mapping[str, Any] | None = None,
    pool: str | None = None,
    in_ray: bool = True,
    gpus: Sequence[Mapping[str, Any]] | None = None,
    ray_address_exported: str | None = None,
    policy_devices: Sequence[int] = (),
) -> dict[str, Any]:
    """placement-RANK.json: which local device does what on one node (audit/_views.py reads it),
    what the output root lives on there (`filesystem_fields`), and, when NVML could tell, each
    planned GPU's NVML index and UUID (`gpus`, from the preflight)."""
    fs = {"filesystem": dict(filesystem)} if filesystem is not None else {}
    named = {"gpus": [dict(g) for g in gpus]} if gpus else {}
    exported = {"ray_address_exported": ray_address_exported} if ray_address_exported is not None else {}
    # Only on the policy's nodes: every other record stays as it was.
    policy = (
        {"policy": {"devices": list(policy_devices), "cuda_visible_devices": _mask(visible_devices, policy_devices)}}
        if policy_devices
        else {}
    )
    return {
        **fs,
        **named,
        **exported,
        **policy,
        "node_index": node_index,
        "pool": pool,
        "in_ray": in_ray,
        "address": address,
        "visible_devices": list(visible_devices),
        "trainer_gpus": trainer_gpus,
        "rollout_gpus": rollout_gpus,
        "ray": {
            "devices": list(ray_devices),
            "cuda_visible_devices": _mask(visible_devices, ray_devices),
            "num_gpus": ray_num_gpus,
        },
        "judges": {
            name: {"devices": list(devs), "cuda_visible_devices": _mask(visible_devices, devs)}
            for name, devs in judge_devices.items()
        },
        "unused_devices": list(unused_devices),
        "is_head": is_head,
        "is_driver_node": is_driver_node,
    }


# Bounds of placement.schema.json's `filesystem`: a mount table is the host's, not ours to trust.
FS_TEXT, FS_OPTION, FS_OPTIONS, FS_WARNING, FS_WARNINGS, FS_NOTE = 4096, 1024, 256, 2000, 16, 500


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def filesystem_fields(
    *,
    fstype: str,
    source: str,
    mount_point: str,
    options: Sequence[str],
    warnings: Sequence[str],
    note: str | None = None,
) -> dict[str, Any]:
    """placement-RANK.json's `filesystem`: the output root's mount on that node, as the agent's
    filesystem guard saw it (agent/coord/fs_guard.py; credentials already dropped)."""
    out: dict[str, Any] = {
        "type": _cap(fstype, 100),
        "source": _cap(source, FS_TEXT),
        "mount_point": _cap(mount_point, FS_TEXT),
        "options": [_cap(o, FS_OPTION) for o in options[:FS_OPTIONS]],
        "warnings": [_cap(w, FS_WARNING) for w in warnings[:FS_WARNINGS]],
    }
    if note is not None:
        out["note"] = _cap(note, FS_NOTE)
    return out
