"""One record type per artifact the audit reads, with its builder.

Each module holds one artifact (or two that belong together): a frozen dataclass, which is what
a reader gets from a possibly damaged document (`X.from_json`, schemas/lenient.py), and the
builder writers call for the fields they write (`x_fields`). `RunDir.write_artifact` stamps the
header and validates the fields against the schema, so a builder and its schema cannot silently
disagree; tests/test_records.py reads every builder's output back through its record type.
"""

from __future__ import annotations

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
