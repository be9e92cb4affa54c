"""`gym-audit --json`: the machine-readable report. The format is stable ("format": "gym-audit/1");
fields are only ever added. Keys, in order:

    format        "gym-audit/1"
    run_dir       the audited path as given
    verdict       "pass" | "fail"   (fail iff at least one finding has severity "error")
    outcome       "succeeded" | "failed" | "incomplete"   (what the artifacts say happened)
    fingerprint   the run's spec fingerprint from spec.json, or null
    counts        {"error": n, "warning": n, "info": n}
    findings      [{severity, code, message, file, rank, json_path}], errors first, then by code;
                  file is a run-directory relative name or null; rank/json_path null when n/a
    first_cause   null on success, else {rank, kind, phase, cause, wall_time, since_start, file,
                  log, reacting_to, reported_by, writer, excerpt: [log lines],
                  ray_logs: [Ray session logs kept for that rank, when Ray is involved],
                  judge, binding: the judge and verifier binding the record names, or null
                  (kind "judge_degraded": the binding whose replies went bad),
                  scheduler: the backend when the scheduler ended the job, else null}; kind "silent"
                  means the rank died without a record (reported_by names who noticed), kinds
                  time_limit, cancelled, node_failure, preempted that the scheduler ended the job
                  (cause: the scheduler's own words; rank: the failed node's, else the batch host's),
                  kind "phase_failed" means it was inferred from a phase timeline; and every other
                  structured field of the failure record it comes from (schemas/failure.schema.json),
                  null or [] when absent or when there is no record: exit_code, child, signal,
                  sender {pid, uid, name}, fs_condition, peers, monotonic_time, incarnation,
                  attempt, reacting_to_incarnation, reacting_to_kind
    cascade       the other failures, in wall-time order, same shape as first_cause (excerpt [])
    other_root_causes  independent root causes that lost to first_cause on time
    ranks         {expected: [..], present: [..], details: [{rank, address, hostname, node_index,
                  state, incarnation, phases: [{phase, started_at, ended_at, outcome, detail}]}]}
    plan          {source: "launch" | "artifacts", replicas, gpus_per_replica, driver_node,
                  nodes: [{index, trainer_gpus, rollout_gpus, ray_gpus, ray_devices, judges,
                  unused_devices}], bindings: {verifier: {judge, rubric}}}
    gpu_maps      [{node_index, rank, address, source, is_head, is_driver_node,
                  cells: [{device, role: trainer|rollout|judge|unused|ray, label}]}]
    notes         [strings]
    attempts      [{attempt, verdict, outcome, first_cause: {rank, kind, cause, scheduler}, mode, token}]
                  (mode: how the attempt was entered, "resume" or "restart", null without a claim;
                  token: the launch that claimed it)
    training      where the evidence of training came from and what it showed (audit/README.md)
    judge_replies independent judge-reply counts against the driver's claim; null without bindings
    filesystem    [{type, source, mount_point, options, warnings, ranks}]: the output root's mount as
                  the nodes recorded it (placement records), nodes with the same mount together;
                  warnings: what the agent's filesystem guard warned at start
    doorbell      {ranks, rings, sent, send_errors, received, accepted, ignored_stopping, beacons_sent,
                  beacons_received, dropped: {reason: n}}: the doorbells' counts summed over the
                  ranks' cleanup records; null when no rank had one
    judge_gateways {judge: {requests, generation, replies, canary, errors: {kind: n},
                  latency_ms: {p50, p90, p99, max}, queue_ms: {p50, p90, p99, max},
                  series: {start, bucket_s, requests: [n], latency_p50_ms: [ms]}}}: each judge's gateway
                  log (every client's requests); null without bindings

Unusable input (exit 2) prints {"format", "run_dir", "verdict": "unusable", "reason"}.
Times are Unix wall-clock seconds of the host that wrote them.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from audit._model import AuditResult
from audit._sanitize import clean_json

__all__ = ["render", "render_unusable"]


def render(result: AuditResult) -> str:
    doc = result.to_json()
    try:
        # orjson indents as json.dumps(indent=2) does, ~20x faster (the stdlib's encoder is pure
        # Python when indenting: 1 s for a 1024-replica report). It refuses what clean_json
        # repairs (a lone surrogate, an integer beyond 64 bits) and writes NaN as null, as clean_json.
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(clean_json(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_unusable(run_dir: str, reason: str) -> str:
    doc: dict[str, Any] = {
        "format": "gym-audit/1",
        "run_dir": run_dir,
        "verdict": "unusable",
        "reason": reason,
    }
    return json.dumps(clean_json(doc), indent=2, ensure_ascii=False) + "\n"
