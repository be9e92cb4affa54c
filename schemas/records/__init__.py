"""One record type per artifact the audit reads, with its builder.

Each module holds one artifact (or two that belong together): a frozen dataclass, which is what
a reader gets from a possibly damaged document (`X.from_json`, schemas/lenient.py), and the
builder writers call for the fields they write (`x_fields`). `RunDir.write_artifact` stamps the
header and validates the fields against the schema, so a builder and its schema cannot silently
disagree; tests/test_records.py reads every builder's output back through its record type.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # static tools see the eager imports; at run time each resolves on first use
    from schemas.records._address import AddressRecord, SchedulerJobRef, address_fields
    from schemas.records._attempt import AttemptRecord, attempt_fields, claim_fields, refused_fields
    from schemas.records._canaries import (
        CanariesRecord,
        CanaryBinding,
        CanaryRound,
        canaries_fields,
        canary_binding,
        canary_round,
    )
    from schemas.records._cleanup import CleanupRecord, cleanup_fields
    from schemas.records._completion import AckRecord, CompleteRecord, ack_fields, complete_fields
    from schemas.records._driver_result import DriverResultRecord, driver_result_fields
    from schemas.records._driver_stop import DriverStopRecord, driver_stop_fields
    from schemas.records._failure import FailureRecord, failure_fields, read_failure
    from schemas.records._heartbeat import HeartbeatRecord, heartbeat_fields
    from schemas.records._judges import GatewayRecord, JudgeEndpointRecord, gateway_fields, judge_endpoint_fields
    from schemas.records._phases import PhaseSpan, PhasesRecord, phase_entry, phases_fields
    from schemas.records._placement import JudgeSlot, PlacementRecord, filesystem_fields, placement_fields
    from schemas.records._preflight import PreflightRecord, preflight_fields
    from schemas.records._ray import RayHeadRecord, RayLayoutRecord, ray_head_fields, ray_layout_fields
    from schemas.records._registry import (
        RegistryBinding,
        RegistryJudge,
        RegistryRecord,
        registry_fields,
        registry_judge,
    )
    from schemas.records._regrade import RegradeRecord, regrade_fields
    from schemas.records._submission import SubmissionRecord, submission_fields

_EXPORTS = {  # each name's module: a reader loads only the record types it asks for
    "AddressRecord": "_address",
    "SchedulerJobRef": "_address",
    "address_fields": "_address",
    "AttemptRecord": "_attempt",
    "attempt_fields": "_attempt",
    "claim_fields": "_attempt",
    "refused_fields": "_attempt",
    "CanariesRecord": "_canaries",
    "CanaryBinding": "_canaries",
    "CanaryRound": "_canaries",
    "canaries_fields": "_canaries",
    "canary_binding": "_canaries",
    "canary_round": "_canaries",
    "CleanupRecord": "_cleanup",
    "cleanup_fields": "_cleanup",
    "AckRecord": "_completion",
    "CompleteRecord": "_completion",
    "ack_fields": "_completion",
    "complete_fields": "_completion",
    "DriverResultRecord": "_driver_result",
    "driver_result_fields": "_driver_result",
    "DriverStopRecord": "_driver_stop",
    "driver_stop_fields": "_driver_stop",
    "FailureRecord": "_failure",
    "failure_fields": "_failure",
    "read_failure": "_failure",
    "HeartbeatRecord": "_heartbeat",
    "heartbeat_fields": "_heartbeat",
    "GatewayRecord": "_judges",
    "JudgeEndpointRecord": "_judges",
    "gateway_fields": "_judges",
    "judge_endpoint_fields": "_judges",
    "PhaseSpan": "_phases",
    "PhasesRecord": "_phases",
    "phase_entry": "_phases",
    "phases_fields": "_phases",
    "JudgeSlot": "_placement",
    "PlacementRecord": "_placement",
    "filesystem_fields": "_placement",
    "placement_fields": "_placement",
    "PreflightRecord": "_preflight",
    "preflight_fields": "_preflight",
    "RayHeadRecord": "_ray",
    "RayLayoutRecord": "_ray",
    "ray_head_fields": "_ray",
    "ray_layout_fields": "_ray",
    "RegistryBinding": "_registry",
    "RegistryJudge": "_registry",
    "RegistryRecord": "_registry",
    "registry_fields": "_registry",
    "registry_judge": "_registry",
    "RegradeRecord": "_regrade",
    "regrade_fields": "_regrade",
    "SubmissionRecord": "_submission",
    "submission_fields": "_submission",
}

__all__ = [
    "AckRecord",
    "AddressRecord",
    "AttemptRecord",
    "CanariesRecord",
    "CanaryBinding",
    "CanaryRound",
    "CleanupRecord",
    "CompleteRecord",
    "DriverResultRecord",
    "DriverStopRecord",
    "FailureRecord",
    "GatewayRecord",
    "HeartbeatRecord",
    "JudgeEndpointRecord",
    "JudgeSlot",
    "PhaseSpan",
    "PhasesRecord",
    "PlacementRecord",
    "PreflightRecord",
    "RayHeadRecord",
    "RayLayoutRecord",
    "RegradeRecord",
    "RegistryBinding",
    "RegistryJudge",
    "RegistryRecord",
    "SchedulerJobRef",
    "SubmissionRecord",
    "ack_fields",
    "address_fields",
    "attempt_fields",
    "canaries_fields",
    "canary_binding",
    "canary_round",
    "claim_fields",
    "cleanup_fields",
    "complete_fields",
    "driver_result_fields",
    "driver_stop_fields",
    "failure_fields",
    "read_failure",
    "filesystem_fields",
    "gateway_fields",
    "heartbeat_fields",
    "judge_endpoint_fields",
    "phase_entry",
    "phases_fields",
    "placement_fields",
    "preflight_fields",
    "ray_head_fields",
    "ray_layout_fields",
    "refused_fields",
    "regrade_fields",
    "registry_fields",
    "registry_judge",
    "submission_fields",
]


def __getattr__(name: str) -> Any:
    # A success run's audit never reads the judges', regrade's or submission's records: their
    # types (a dataclass each, compiled at import) load when a reader first asks for one.
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
