"""Every file name in the run directory `OUTPUT/cluster/UUID`, in one place.

Seed names (`placement-RANK.json`, `registry.json`, ...) are part of the contract users grep for.
Files written often or discovered by listing live in small subdirectories so that a listing stays
cheap on a shared filesystem.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "ACKS_DIR",
    "ADDRESSES_DIR",
    "ARTIFACTS",
    "ARTIFACT_PATTERNS",
    "ATTEMPTS_DIR",
    "ATTEMPT_RE",
    "Artifact",
    "CANARIES",
    "CHECKPOINTS_DIR",
    "CLAIM_LEAF",
    "COMPLETE",
    "DOORBELL_SECRET",
    "DRIVER_RESULT",
    "DRIVER_STOP",
    "FAILURES_DIR",
    "GATEWAY_LOG_RE",
    "GRADES_RE",
    "HEARTBEATS_DIR",
    "JOB_FILE_PREFIX",
    "JSONL_ARTIFACTS",
    "LEDGER_RE",
    "LOG_KINDS",
    "LOG_PATTERNS",
    "NAME_RE",
    "OTHER_FILES",
    "Parsed",
    "RAY_HEAD",
    "RAY_LAYOUT",
    "RAY_SESSION_DIR_RE",
    "RAY_SESSION_PREFIX",
    "READY_LEAF",
    "REGISTRY",
    "REGRADE",
    "SLURM_OUTPUT",
    "SLURM_OUTPUT_RE",
    "SLURM_START_MARKER",
    "SPEC",
    "STACK_REQUESTS_DIR",
    "STACK_REQUEST_RE",
    "SUBDIRS",
    "SUBMISSION",
    "TEMP_RE",
    "UUID_RE",
    "WALLTIME_WARNING",
    "ack",
    "address",
    "agent_log",
    "artifact_schema",
    "attempt_claim",
    "attempt_dir",
    "attempt_ready",
    "attempt_refused",
    "claimed_attempts",
    "cleanup",
    "collectives",
    "current_attempt",
    "driver_log",
    "failure",
    "gateway_log",
    "gateway_log_segment",
    "gateway_process_log",
    "gateway_record",
    "grades",
    "grades_segment",
    "heartbeat",
    "is_known_log",
    "is_log_dir",
    "is_other_file",
    "is_run_level",
    "is_temp",
    "job_file",
    "jsonl_schema_for",
    "judge_degraded",
    "judge_endpoint",
    "judge_log",
    "policy_log",
    "leaf",
    "ledger",
    "live_stacks",
    "new_uuid",
    "parse",
    "phases",
    "placement",
    "preflight",
    "rank_in",
    "ray_log",
    "ray_session_dir",
    "ray_session_log",
    "run_file",
    "schema_for",
    "slurm_output",
    "slurm_output_job",
    "stacks",
    "stacks_request",
    "stacks_request_id",
    "temp_name",
]

SPEC = "spec.json"
RAY_LAYOUT = "ray-layout.json"
REGISTRY = "registry.json"
CANARIES = "judge-canaries.json"
COMPLETE = "complete.json"
DRIVER_RESULT = "driver-result.json"
# The driver-node agent's request to the driver to checkpoint and exit ([driver] checkpoint_grace),
# rewritten with the outcome once the driver exited or the grace ran out (DriverEnv.STOP_FILE).
DRIVER_STOP = "driver-stop.json"
# The batch job's walltime warning (Slurm --signal=B:USR1@SECONDS, caught by the rendered script):
# a plain line in failures/, where every agent already looks for news.
WALLTIME_WARNING = "failures/walltime-warning"
# The run's doorbell secret (agent/coord/doorbell_secret.py): random bytes, hex, created once by
# the first agent; only agents read it. Run-level: kept in place across attempts.
DOORBELL_SECRET = "doorbell.secret"


RAY_HEAD = "ray-head.json"
SUBMISSION = "submission.json"
# A judge-only job's record of the finished run it grades again (gym-launch regrade).
REGRADE = "regrade.json"
JOB_FILE_PREFIX = "job"  # job.sbatch, job.beaker.yaml, job.skypilot.yaml: the rendered job as submitted


# The Slurm job's own output (sbatch --output; %j is the job id): the batch script's and every
# srun step's stdout and stderr, so the agents' phase lines too.
SLURM_OUTPUT = "job-slurm-%j.out"


# The job script's first line of output at every start of the job: "gym: slurm job ID start RESTARTS on HOST".
SLURM_START_MARKER = "gym: slurm job"


def slurm_output(job_id: str) -> str:
    return SLURM_OUTPUT.replace("%j", job_id)


SLURM_OUTPUT_RE = re.compile(r"^job-slurm-(?P<job>\d+)\.out$")


def slurm_output_job(relpath: str) -> int | None:
    """The job id of a Slurm job output's name (slurm_output), None for any other name."""
    m = SLURM_OUTPUT_RE.match(relpath)
    return int(m.group("job")) if m is not None else None


def run_file(text: str) -> str:
    """The user's run file, byte for byte, as the driver reads it (a MILES trainer parses it)."""
    return "run-file.json" if text.lstrip().startswith("{") else "run-file.toml"


def job_file(suffix: str) -> str:
    """The rendered job inside the run directory, e.g. ``job_file(".sbatch")``."""
    return f"{JOB_FILE_PREFIX}{suffix}"


# Attempts (resume): the current attempt's files keep the names above, at the top of the run
# directory; starting attempt N+1 moves attempt N's files into attempts/N/ (same names inside), so
# earlier attempts stay readable and no agent of the new attempt can list an old record.
# attempts/N/claim.json is created exclusively: one launch wins the attempt number.
ATTEMPTS_DIR = "attempts"
CHECKPOINTS_DIR = "checkpoints"  # the driver's checkpoints: one directory for every attempt


def attempt_dir(n: int) -> str:
    return f"{ATTEMPTS_DIR}/{n}"


CLAIM_LEAF = "claim.json"
READY_LEAF = "ready.json"


def attempt_claim(n: int) -> str:
    return f"{ATTEMPTS_DIR}/{n}/{CLAIM_LEAF}"


def attempt_refused(n: int) -> str:
    """Written instead of a claim when attempt n is past the restart caps ([launch] max_retries)."""
    return f"{ATTEMPTS_DIR}/{n}/refused.json"


def attempt_ready(n: int) -> str:
    """Written by the claimant once attempt n-1's files are archived: joiners wait for it."""
    return f"{ATTEMPTS_DIR}/{n}/{READY_LEAF}"


ATTEMPT_RE = re.compile(r"^[1-9][0-9]{0,5}$")


def claimed_attempts(listdir: Callable[[str], Iterable[str]]) -> list[int]:
    """Attempt numbers with a claim record (attempts/N/claim.json), ascending. ``listdir(relpath)``
    lists a folder of the run directory (empty when it is missing): the store's and the audit's."""
    numbers = (int(n) for n in listdir(ATTEMPTS_DIR) if ATTEMPT_RE.match(n))
    return sorted(n for n in numbers if CLAIM_LEAF in listdir(attempt_dir(n)))


def current_attempt(claimed: Iterable[int]) -> int:
    """Which attempt is current: the highest claimed one; 1 for a run never resumed (no claim)."""
    return max(claimed, default=1)


def is_run_level(relpath: str) -> bool:
    """Files of the run, not of one attempt: kept in place across attempts and read by every one."""
    top = relpath.split("/", 1)[0]
    if top in SUBDIRS:  # most records: one set lookup, no pattern (the audit asks for each)
        return False
    if top in (ATTEMPTS_DIR, CHECKPOINTS_DIR, SPEC, SUBMISSION):
        return True
    return is_other_file(top)


ADDRESSES_DIR = "addresses"
HEARTBEATS_DIR = "heartbeats"
FAILURES_DIR = "failures"
ACKS_DIR = "acks"
SUBDIRS = (ADDRESSES_DIR, HEARTBEATS_DIR, FAILURES_DIR, ACKS_DIR)

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
UUID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def new_uuid() -> str:
    """A fresh run id: UTC time (sorts by start) plus randomness (unique across submitters)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{os.urandom(3).hex()}"


def address(rank: int) -> str:
    return f"{ADDRESSES_DIR}/address-{rank}.json"


def heartbeat(rank: int) -> str:
    return f"{HEARTBEATS_DIR}/heartbeat-{rank}.json"


def failure(rank: int) -> str:
    return f"{FAILURES_DIR}/failure-{rank}.json"


def ack(rank: int) -> str:
    return f"{ACKS_DIR}/ack-{rank}.json"


def phases(rank: int) -> str:
    return f"phases-{rank}.json"


def placement(rank: int) -> str:
    return f"placement-{rank}.json"


def cleanup(rank: int) -> str:
    return f"cleanup-{rank}.json"


def preflight(rank: int) -> str:
    """What rank's preflight checked on its node, each check with its result and time."""
    return f"preflight-{rank}.json"


def judge_endpoint(name: str, rank: int) -> str:
    return f"judge-{name}-{rank}.json"


def judge_degraded(rank: int) -> str:
    """The degraded-judge alarm a driver of rank RANK raised (agent/judges/_alarm.py); the agent
    fails the run when it appears. Not ``judge-...``: that prefix is a judge's endpoint record."""
    return f"judge_degraded-{rank}.json"


# Every grade a driver makes through the judge client library, one JSON line each
# (agent/judges/_grade_log.py). Segment 0 is the file being written; a full one is renamed to
# segment 1, segment 1 to 2, ... (older = higher N) and the oldest beyond the kept ones is removed.
GRADES_RE = re.compile(r"^grades-(\d+)(?:\.([1-9][0-9]{0,3}))?\.jsonl$")


def grades(rank: int, segment: int = 0) -> str:
    """grades-RANK.jsonl (segment 0), or its rotated segment grades-RANK.N.jsonl."""
    return f"grades-{rank}.jsonl" if segment == 0 else f"grades-{rank}.{segment}.jsonl"


def grades_segment(relpath: str) -> tuple[int, int] | None:
    """(rank, segment) of a grades file name, or None when it is not one."""
    m = GRADES_RE.match(relpath)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


# The sample ledger (agent.driver_api.ledger/checkpoint): which sample ids each step of the driver
# on that rank trained on, and the checkpoints it saved, one JSON line each, appended in batches by
# the driver's own process. Never rotated (the audit needs every line); streamed by its own check,
# not loaded whole like grades-RANK.jsonl (Parsed.streamed).
LEDGER_RE = re.compile(r"^ledger-(\d+)\.jsonl$")


def ledger(rank: int) -> str:
    return f"ledger-{rank}.jsonl"


def collectives(rank: int) -> str:
    """The collective traces (Flight Recorder) of rank's processes that use torch.distributed, on a hang."""
    return f"collectives-{rank}.json"


def stacks(rank: int) -> str:
    """The stacks of every process rank's agent supervised, taken before a hang's teardown."""
    return f"stacks-{rank}.json"


# gym-launch stacks: a request in a small folder (written by gym-launch; the doorbell wakes the
# agents to read it, a slow listing finds it without) and each rank's answer, stacks-RANK-REQUEST.json,
# read by name; gym-launch removes both once it has read the answers.
STACK_REQUESTS_DIR = "stack-requests"
STACK_REQUEST_RE = re.compile(r"^[0-9a-f]{8,32}$")


def stacks_request(request: str) -> str:
    return f"{STACK_REQUESTS_DIR}/request-{request}.json"


_STACK_REQUEST_LEAF = re.compile(r"^request-([0-9a-f]{8,32})\.json$")


def stacks_request_id(leaf: str) -> str | None:
    """The request id of a leaf listed in STACK_REQUESTS_DIR, or None when it is not a request."""
    m = _STACK_REQUEST_LEAF.match(leaf)
    return m.group(1) if m else None


def live_stacks(rank: int, request: str) -> str:
    return f"stacks-{rank}-{request}.json"


# The judge gateway (agent/judges/_gateway.py): one per bound judge, beside a managed judge or on the
# driver's node for an external one. Its address record, its request log (every request, one JSON
# line each; capped and rotated like grades-RANK.jsonl) and its own process log. Judge names hold
# no '.', so a segment number never reads as part of a name.
GATEWAY_LOG_RE = re.compile(r"^judge-gateway-([a-z][a-z0-9_-]*?)(?:\.([1-9][0-9]{0,3}))?\.jsonl$")


def gateway_record(judge: str) -> str:
    """Where judge's gateway listens (written by its host's agent before any client is told)."""
    return f"gateway-{judge}.json"


def gateway_log(judge: str, segment: int = 0) -> str:
    """judge-gateway-NAME.jsonl (segment 0), or its rotated segment judge-gateway-NAME.N.jsonl."""
    return f"judge-gateway-{judge}.jsonl" if segment == 0 else f"judge-gateway-{judge}.{segment}.jsonl"


def gateway_log_segment(relpath: str) -> tuple[str, int] | None:
    """(judge, segment) of a gateway request log name, or None when it is not one."""
    m = GATEWAY_LOG_RE.match(relpath)
    return (m.group(1), int(m.group(2) or 0)) if m else None


def gateway_process_log(judge: str, rank: int) -> str:
    return f"gateway-{judge}-{rank}.log"


def driver_log(rank: int) -> str:
    return f"driver-{rank}.log"


def judge_log(name: str, rank: int) -> str:
    return f"judge-{name}-{rank}.log"


def policy_log(rank: int) -> str:
    """The policy service's engine on that rank's node (seed 001)."""
    return f"policy-{rank}.log"


def agent_log(rank: int) -> str:
    return f"agent-{rank}.log"


def ray_log(rank: int) -> str:
    return f"ray-{rank}.log"


RAY_SESSION_PREFIX = "ray-session-"
RAY_SESSION_DIR_RE = re.compile(r"^ray-session-(\d+)$")


def ray_session_dir(rank: int) -> str:
    """Where rank's copy of Ray's own session logs (raylet, GCS, workers) is kept at teardown."""
    return f"{RAY_SESSION_PREFIX}{rank}"


def ray_session_log(rank: int, leaf_name: str) -> str:
    return f"{ray_session_dir(rank)}/{leaf_name}"


def is_log_dir(name: str) -> bool:
    """A top-level directory that holds logs (the audit descends into it)."""
    return RAY_SESSION_DIR_RE.match(name) is not None


@dataclass(frozen=True)
class Artifact:
    """One JSON artifact of the run directory: its schema (``schemas/SCHEMA.schema.json``) and the
    pattern of its names. Declared once here: writers derive the schema from the name they write
    (``RunDir.write_artifact``), the audit classifies what it finds by the same table."""

    schema: str
    pattern: re.Pattern[str]


ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("spec", re.compile(r"^spec\.json$")),
    Artifact("address", re.compile(r"^addresses/address-(\d+)\.json$")),
    Artifact("heartbeat", re.compile(r"^heartbeats/heartbeat-(\d+)\.json$")),
    Artifact("failure", re.compile(r"^failures/failure-(\d+)\.json$")),
    Artifact("ack", re.compile(r"^acks/ack-(\d+)\.json$")),
    Artifact("phases", re.compile(r"^phases-(\d+)\.json$")),
    Artifact("placement", re.compile(r"^placement-(\d+)\.json$")),
    Artifact("cleanup", re.compile(r"^cleanup-(\d+)\.json$")),
    Artifact("preflight", re.compile(r"^preflight-(\d+)\.json$")),
    Artifact("judge-canaries", re.compile(r"^judge-canaries\.json$")),
    Artifact("judge-endpoint", re.compile(r"^judge-([a-z][a-z0-9_-]*)-(\d+)\.json$")),
    Artifact("ray-layout", re.compile(r"^ray-layout\.json$")),
    Artifact("ray-head", re.compile(r"^ray-head\.json$")),
    Artifact("registry", re.compile(r"^registry\.json$")),
    Artifact("complete", re.compile(r"^complete\.json$")),
    Artifact("driver-result", re.compile(r"^driver-result\.json$")),
    Artifact("driver-stop", re.compile(r"^driver-stop\.json$")),
    Artifact("submission", re.compile(r"^submission\.json$")),
    Artifact("attempt", re.compile(r"^attempts/[1-9][0-9]*/(?:claim|ready|refused)\.json$")),
    Artifact("regrade", re.compile(r"^regrade\.json$")),
    Artifact("judge-degraded", re.compile(r"^judge_degraded-(\d+)\.json$")),
    # stacks-RANK.json (a hang's), or stacks-RANK-REQUEST.json (an answer to gym-launch stacks)
    Artifact("stacks", re.compile(r"^stacks-(\d+)(?:-[0-9a-f]{8,32})?\.json$")),
    Artifact("collectives", re.compile(r"^collectives-(\d+)\.json$")),
    Artifact("stacks-request", re.compile(r"^stack-requests/request-[0-9a-f]{8,32}\.json$")),
    Artifact("gateway", re.compile(r"^gateway-([a-z][a-z0-9_-]*)\.json$")),
)
# JSON Lines artifacts: one document per line, each against the schema (the audit checks every line).
JSONL_ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("grade", GRADES_RE),
    Artifact("judge-gateway", GATEWAY_LOG_RE),
    Artifact("ledger", LEDGER_RE),
)
# (pattern, schema name) for every JSON artifact, as the audit has always read the table.
ARTIFACT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple((a.pattern, a.schema) for a in ARTIFACTS)
# Files of the run directory that are neither artifacts nor logs (the audit knows them).
OTHER_FILES: tuple[re.Pattern[str], ...] = (
    re.compile(r"^run-file\.(toml|json)$"),
    re.compile(r"^job\.[a-z.]+$"),
    SLURM_OUTPUT_RE,
    re.compile(r"^failures/walltime-warning$"),
    re.compile(r"^doorbell\.secret$"),
)

# (pattern, log kind) for every log; the kind is who writes it.
LOG_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^driver-(\d+)\.log$"), "driver"),
    (re.compile(r"^judge-([a-z][a-z0-9_-]*)-(\d+)\.log$"), "judge"),
    (re.compile(r"^agent-(\d+)\.log$"), "agent"),
    (re.compile(r"^ray-(\d+)\.log$"), "ray"),
    (re.compile(r"^policy-(\d+)\.log$"), "policy"),
    (re.compile(r"^gateway-([a-z][a-z0-9_-]*)-(\d+)\.log$"), "gateway"),
    (re.compile(r"^ray-session-(\d+)/[A-Za-z0-9][A-Za-z0-9_.-]*$"), "ray-session"),
)
LOG_PATTERNS: tuple[re.Pattern[str], ...] = tuple(p for p, _ in LOG_KINDS)


# Every name pattern above starts with a literal head ("heartbeats", "phases", "judge", ...)
# followed by '-', '.', '/' or the end: a name is tried only against the patterns of its own head,
# in table order, so the audit does not run ~25 regexes over each of thousands of names.
_HEAD_RE = re.compile(r"[^-./]*")
_PATTERN_HEAD_RE = re.compile(r"\^([A-Za-z_]+)(?:-|/|\\\.|\$)")


def _head(relpath: str) -> str:
    m = _HEAD_RE.match(relpath)
    return m.group() if m else ""


def _pattern_head(pattern: re.Pattern[str]) -> str:
    m = _PATTERN_HEAD_RE.match(pattern.pattern)
    if m is None:  # a new pattern must keep the rule, or the lookups below would miss it
        raise ValueError(f"name pattern {pattern.pattern!r} does not start with a literal head")
    return m.group(1)


def _by_head(table: Iterable[tuple[re.Pattern[str], str]]) -> dict[str, tuple[tuple[re.Pattern[str], str], ...]]:
    out: dict[str, list[tuple[re.Pattern[str], str]]] = {}
    for pattern, value in table:
        out.setdefault(_pattern_head(pattern), []).append((pattern, value))
    return {head: tuple(entries) for head, entries in out.items()}


_ARTIFACTS_BY_HEAD = _by_head(ARTIFACT_PATTERNS)
_JSONL_BY_HEAD = _by_head((a.pattern, a.schema) for a in JSONL_ARTIFACTS)
_LOGS_BY_HEAD = _by_head(LOG_KINDS)
_OTHERS_BY_HEAD = _by_head((p, "") for p in OTHER_FILES)


def is_other_file(relpath: str) -> bool:
    """One of OTHER_FILES: the user's run file, the rendered job, its output."""
    return any(p.match(relpath) for p, _ in _OTHERS_BY_HEAD.get(_head(relpath), ()))


# Discovery by listing: the leaf names inside the small subdirectories carry the rank.
_LISTED = {
    ADDRESSES_DIR: re.compile(r"^address-(\d+)\.json$"),
    HEARTBEATS_DIR: re.compile(r"^heartbeat-(\d+)\.json$"),
    FAILURES_DIR: re.compile(r"^failure-(\d+)\.json$"),
    ACKS_DIR: re.compile(r"^ack-(\d+)\.json$"),
}
# schemas.store's temporary names (".LEAF.<12 hex>.tmp"): a leftover is an interrupted write.
TEMP_RE = re.compile(r"^\.(.+)\.[0-9a-f]{12}\.tmp$")


def leaf(relpath: str) -> str:
    """The file name of a run-directory path, as a listing of its directory shows it."""
    return relpath.rsplit("/", 1)[-1]


def rank_in(subdir: str, name: str) -> int | None:
    """The rank a listed name in `subdir` (addresses/, heartbeats/, failures/, acks/) belongs to,
    or None when the name is not one of ours (a temp file, something planted)."""
    m = _LISTED[subdir].match(name)
    return int(m.group(1)) if m else None


def temp_name(leaf_name: str, token: str) -> str:
    """The temporary name a write of `leaf_name` goes through (token: 12 hex digits)."""
    return f".{leaf_name}.{token}.tmp"


def is_temp(leaf_name: str) -> bool:
    return leaf_name.endswith(".tmp") and TEMP_RE.match(leaf_name) is not None


@dataclass(frozen=True)
class Parsed:
    """What a run-directory name says: its schema (or "log"), the rank and judge it carries,
    and for a log who writes it (driver, judge, agent, ray)."""

    schema: str
    rank: int | None
    judge: str | None
    log: str | None = None
    lines: bool = False  # a JSON Lines artifact: every line matches `schema`
    streamed: bool = False  # too large to load whole: its own check reads it line by line (the ledger)


def jsonl_schema_for(relpath: str) -> str | None:
    """The schema every line of a JSON Lines artifact matches, or None when it is not one."""
    return next((schema for p, schema in _JSONL_BY_HEAD.get(_head(relpath), ()) if p.match(relpath)), None)


def _groups(pattern: re.Pattern[str]) -> tuple[int, int]:
    """Which groups of a name pattern hold (the rank, the judge), 0 for none. The two names that
    carry both (judge-NAME-RANK.json/.log) name the judge first; gateway-NAME.json only a judge."""
    if pattern.groups == 2:
        return 2, 1
    if pattern.groups == 1:
        return (1, 0) if pattern.pattern.count(r"(\d+)") == 1 else (0, 1)
    return 0, 0


def _rules() -> dict[str, tuple[tuple[re.Pattern[str], dict[str, object], int, int], ...]]:
    """head -> (pattern, the Parsed fields of its names but rank and judge, rank group, judge
    group), in the order `parse` tries them: JSON Lines artifacts, JSON artifacts, logs."""
    tables: list[tuple[re.Pattern[str], dict[str, object], tuple[int, int]]] = [
        (GRADES_RE, {"schema": "grade", "lines": True}, (1, 0)),
        (GATEWAY_LOG_RE, {"schema": "judge-gateway", "lines": True}, (0, 1)),  # group 2: the segment
        (LEDGER_RE, {"schema": "ledger", "lines": True, "streamed": True}, (1, 0)),
    ]
    tables += [(p, {"schema": schema}, _groups(p)) for p, schema in ARTIFACT_PATTERNS]
    tables += [(p, {"schema": "log", "log": kind}, _groups(p)) for p, kind in LOG_KINDS]
    # Every field of Parsed, in its order (its default, None for one without), so that a match
    # only sets the rank and the judge.
    defaults = {f.name: None if f.default is dataclasses.MISSING else f.default for f in dataclasses.fields(Parsed)}
    out: dict[str, list[tuple[re.Pattern[str], dict[str, object], int, int]]] = {}
    for pattern, own, (rank_at, judge_at) in tables:
        out.setdefault(_pattern_head(pattern), []).append((pattern, defaults | own, rank_at, judge_at))
    return {head: tuple(rules) for head, rules in out.items()}


_RULES = _rules()


def parse(relpath: str) -> Parsed | None:
    """Parse any JSON artifact, JSON Lines artifact or log name; None when it is not part of the contract."""
    for pattern, fields, rank_at, judge_at in _RULES.get(_head(relpath), ()):
        m = pattern.match(relpath)
        if m is not None:
            # Filled at once, not through the frozen __init__'s object.__setattr__ per field:
            # the audit parses every name of the run directory (8,000 at 1,024 ranks).
            parsed: Parsed = object.__new__(Parsed)
            parsed.__dict__.update(fields)
            if rank_at:
                parsed.__dict__["rank"] = int(m[rank_at])
            if judge_at:
                parsed.__dict__["judge"] = m[judge_at]
            return parsed
    return None


def schema_for(relpath: str) -> str | None:
    """The schema name of a run-directory file, or None when it is not a JSON artifact we know."""
    for pattern, schema in _ARTIFACTS_BY_HEAD.get(_head(relpath), ()):
        if pattern.match(relpath):
            return schema
    return None


def artifact_schema(relpath: str) -> str:
    """The schema an artifact written as ``relpath`` must match; ValueError for a name that is
    no artifact (a writer's mistake: every artifact name comes from the functions above)."""
    schema = schema_for(relpath)
    if schema is None:
        raise ValueError(f"{relpath!r} is not the name of a run-directory artifact (schemas.names.ARTIFACTS)")
    return schema


def is_known_log(relpath: str) -> bool:
    return any(p.match(relpath) for p, _ in _LOGS_BY_HEAD.get(_head(relpath), ()))
