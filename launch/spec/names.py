"""Names that end up in file names, and the fixed vocabularies of the run spec."""

from __future__ import annotations

import re

__all__ = [
    "BEAKER_PRIORITIES",
    "CHAT_TEMPLATES",
    "CONTEXT_CHECKS",
    "CONTEXT_EXTENSIONS",
    "DEFAULT_CHAT_TEMPLATE",
    "DRIVER_PLACEMENTS",
    "ENV_NAME",
    "FILE_NAME",
    "FILE_NAME_RULE",
    "JUDGE_BACKENDS",
    "JUDGE_MODES",
    "LAUNCH_BACKENDS",
    "MAX_NAME",
    "OPEN_INSTRUCT_PROFILES",
    "OPEN_INSTRUCT_REPLY_FORMATS",
    "PLACEMENT_MODES",
    "POLICY_BACKENDS",
    "POLICY_PORT",
    "RAY_NAME",
    "RAY_NAME_RULE",
    "REPLY_FORMATS",
    "REVISION",
    "RUBRIC_PROFILES",
    "RUN_NAME",
    "SKYPILOT_RECOVERY",
    "is_file_name",
]

# Judges, rubrics, verifiers and pools become parts of file names
# (judge-NAME-RANK.log, ...): keep them lowercase, no dots or slashes.
FILE_NAME = re.compile(r"[a-z][a-z0-9_-]*")
FILE_NAME_RULE = "[a-z][a-z0-9_-]*"
# Names end up in file names (judge-NAME-RANK.log), Slurm step names and environment variable
# names (GYM_POOL_<NAME>_NODES): 48 characters keep every derived name far below NAME_MAX (255).
MAX_NAME = 48

# The Ray service's name becomes GYM_RAY_ADDRESS_<NAME> and the step names <name>_<pool>_workers.
RAY_NAME = FILE_NAME
RAY_NAME_RULE = FILE_NAME_RULE

# The run name only labels things; allow what schedulers accept in job names.
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

REVISION = re.compile(r"[0-9a-f]{40}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

JUDGE_MODES = ("managed", "external")
# How a judge's context is enforced: counted by its /tokenize (refused above the limit, never
# truncated), or left to the service (seed 000: an external service's context is its own).
CONTEXT_CHECKS = ("tokenize", "none")
JUDGE_BACKENDS = ("sglang", "vllm", "reference")
# The policy service's engines (seed 001 serves it with vLLM), and its port (seed 001's default).
POLICY_BACKENDS = ("vllm", "sglang")
POLICY_PORT = 8000
CHAT_TEMPLATES = ("qwen3-no-thinking",)
DEFAULT_CHAT_TEMPLATE = "qwen3-no-thinking"  # managed judges grade without thinking
# This project's own profiles, and open-instruct's (their text is read from the installed open_instruct
# package at run time: agent/judges/_open_instruct.py).
OPEN_INSTRUCT_PROFILES = (
    "open-instruct/general-quality",
    "open-instruct/general-quality_ref",
    "open-instruct/general-web_instruct_general_verifier",
)
RUBRIC_PROFILES = ("general-quality", "general-quality-ref", *OPEN_INSTRUCT_PROFILES)
# A judge's reply: a "SCORE: N" line, a JSON object with REASONING and SCORE (open-instruct's judges), or
# one "Final Decision: yes|no" (open-instruct's web-instruct verifier).
REPLY_FORMATS = ("score_line", "json", "decision")
# How an open-instruct profile's replies are read when reply_format is not given.
OPEN_INSTRUCT_REPLY_FORMATS = {
    "open-instruct/general-quality": "json",
    "open-instruct/general-quality_ref": "json",
    "open-instruct/general-web_instruct_general_verifier": "decision",
}
PLACEMENT_MODES = ("disaggregated", "colocated")
DRIVER_PLACEMENTS = ("trainer", "inference")
LAUNCH_BACKENDS = ("local", "beaker", "slurm", "skypilot")
# SkyPilot managed jobs' recovery strategies (resources.job_recovery.strategy).
SKYPILOT_RECOVERY = ("FAILOVER", "EAGER_NEXT_REGION")
BEAKER_PRIORITIES = ("low", "normal", "high", "urgent")

# The only long-context option: Qwen's documented YaRN factor 4 over 32768.
CONTEXT_EXTENSIONS = {"qwen3-yarn-128k": ("Qwen/Qwen3-32B", 131072)}


def is_file_name(name: str) -> bool:
    return bool(FILE_NAME.fullmatch(name))
