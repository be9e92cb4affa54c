"""Builders of the records whose shape more than one writer (or a writer and the audit) share.

Each returns the fields of one artifact; `RunDir.write_artifact` stamps the header and
validates them against the schema, so a builder and its schema cannot silently disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from schemas.vocab import FailureKind, FsCondition


def failure_fields(
    *,
    kind: FailureKind | str,
    cause: str,
    phase: str,
    wall_time: float,
    monotonic_time: float,
    log: str | None,
    reacting_to: Mapping[str, Any] | None,
    peers: Sequence[int] = (),
    sender: Mapping[str, Any] | None = None,
    exit_code: int | None = None,
    child: str | None = None,
    judge: str | None = None,
    binding: str | None = None,
    signal: str | None = None,
    fs_condition: FsCondition | str | None = None,
    since_start: float | None = None,
    checks: Sequence[str] = (),
    hang: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """failure-RANK.json, written by the agent itself or by its reaper after a SIGKILL.

    `cause` is for people; the facts the audit decides on are fields, present only when they
    apply: ``exit_code`` and ``child`` (a supervised child's or the driver's exit, -N: killed by
    signal N), ``judge`` (the judge concerned), ``binding`` (the verifier binding concerned:
    judge_degraded), ``signal`` and ``sender`` (the signal this
    agent received and who sent it, the kernel's si_pid), ``fs_condition`` (the run directory
    refused our writes), ``since_start`` (seconds since that agent started, on its host's clock),
    ``checks`` (a preflight failure: the checks that failed);
    ``hang`` (a hang's progress facts: source, timeout, seconds idle, last progress and step)."""
    facts: dict[str, Any] = {
        "exit_code": exit_code,
        "child": child,
        "judge": judge,
        "binding": binding,
        "signal": signal,
        "sender": dict(sender) if sender is not None else None,
        "fs_condition": str(fs_condition) if fs_condition is not None else None,
        "since_start": since_start,
        "checks": list(checks) or None,
        "hang": dict(hang) if hang is not None else None,
    }
    return {
        **{k: v for k, v in facts.items() if v is not None},
        "kind": str(kind),
        "cause": cause,
        "phase": phase,
        "wall_time": wall_time,
        "monotonic_time": monotonic_time,
        "log": log,
        "reacting_to": dict(reacting_to) if reacting_to is not None else None,
        "peers": list(peers),
    }


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
) -> dict[str, Any]:
    """placement-RANK.json: which local device does what on one node (audit/views.py reads it),
    what the output root lives on there (`filesystem_fields`), and, when NVML could tell, each
    planned GPU's NVML index and UUID (`gpus`, from the preflight)."""
    fs = {"filesystem": dict(filesystem)} if filesystem is not None else {}
    named = {"gpus": [dict(g) for g in gpus]} if gpus else {}
    exported = {"ray_address_exported": ray_address_exported} if ray_address_exported is not None else {}
    return {
        **fs,
        **named,
        **exported,
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
