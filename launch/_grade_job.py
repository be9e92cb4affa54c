"""`gym-launch grade SPEC --binding NAME --question Q --answer A`: grade one sample through a binding
of the spec, as a driver would, and show everything the grade is made of.

It uses the judge client library drivers use (``agent.judges.client``, ``agent.judges.rubrics``,
``agent.judges.extraction``), never the agent's runtime: the same rubric text and digest, the same
answer extraction, the same request and the same reply parsing. An external judge is reached at
its endpoint; a managed one runs only inside a run, so its endpoint is read from that run's
``judge-NAME-RANK.json`` record (``--run``; through the judge's gateway, ``gateway-NAME.json``, where
the run has one), or given as ``--endpoint``.

Exit codes: 0 with a grade; 1 when the judge's reply is not a valid grade (``truncated``,
``empty``, ``unparseable``, ``out_of_scale``) or the judge could not be used (``unavailable``,
``refused``, ``overflow``); 2 for a bad spec or command line (raised as UsageError/SpecError).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.judges.client import (
    ContextOverflow,
    Grade,
    InvalidGrade,
    JudgeClient,
    JudgeError,
    JudgeUnavailable,
)
from agent.judges.extraction import Extracted, extract_answer
from agent.judges.rubrics import Rubric, RubricError, rubric_from_spec
from launch.spec.config import RunConfig
from launch.spec.errors import UsageError
from launch.spec.sections import JudgeConfig
from schemas import RunDir, RunDirError, names

__all__ = [
    "EXIT_NOT_GRADED",
    "EXIT_OK",
    "GradeArgs",
    "Target",
    "classify",
    "grade",
    "managed_endpoint",
    "resolve_target",
]

EXIT_OK = 0
EXIT_NOT_GRADED = 1

# The kinds of a failed grade (``error.kind`` of --json), from the judge client's exceptions.
TRUNCATED, EMPTY, UNPARSEABLE, OUT_OF_SCALE = "truncated", "empty", "unparseable", "out_of_scale"
UNAVAILABLE, REFUSED, OVERFLOW = "unavailable", "refused", "overflow"

_ENDPOINT_RECORD = re.compile(r"^judge-(?P<name>[a-z][a-z0-9_-]*)-(?P<rank>\d+)\.json$")


@dataclass(frozen=True)
class GradeArgs:
    """What `gym-launch grade` was asked (its command line, typed)."""

    binding: str
    question: str
    answer: str
    reference: str | None = None
    run: str | None = None
    endpoint: str | None = None
    output_root: str | None = None
    json: bool = False


@dataclass(frozen=True)
class Target:
    """The binding resolved: its judge, where to reach it, and its rubric."""

    verifier: str
    judge: JudgeConfig
    endpoint: str
    endpoint_source: str  # how the endpoint was found, for people
    rubric: Rubric


def resolve_target(config: RunConfig, args: GradeArgs) -> Target:
    """The binding's judge, endpoint and rubric; UsageError (exit 2) saying what to pass."""
    bindings = config.judging.bindings
    binding = bindings.get(args.binding)
    if binding is None:
        known = ", ".join(f'"{v}"' for v in sorted(bindings)) or 'none (add [judging.bindings."VERIFIER"])'
        raise UsageError(f"--binding {args.binding!r}: the spec has no such binding; its bindings: {known}")
    judge = config.judges[binding.judge]  # validation guarantees both exist
    try:
        rubric = rubric_from_spec(binding.rubric, config.rubrics[binding.rubric].table(config.spec.base_dir))
    except RubricError as exc:  # the template file changed since validation a moment ago
        raise UsageError(str(exc)) from None
    if args.run is not None and args.endpoint is not None:
        raise UsageError("--run and --endpoint both say where the judge is; pass one")
    if args.endpoint is not None:
        if not re.match(r"^https?://[^\s/]+", args.endpoint):
            raise UsageError(f"--endpoint {args.endpoint!r}: give the judge's base URL, e.g. http://HOST:PORT")
        endpoint, source = args.endpoint, "--endpoint"
    elif judge.managed:
        if args.run is None:
            raise UsageError(
                f"judge {judge.name} is managed: it runs only inside a run; pass --run OUTPUT/cluster/UUID of a "
                f"running run (its judge-{judge.name}-RANK.json record names the endpoint) or --endpoint URL"
            )
        endpoint, source = managed_endpoint(args.run, args.output_root, judge)
    else:
        if args.run is not None:
            raise UsageError(
                f"judge {judge.name} is external: the spec names its endpoint; --run finds a managed judge (drop it)"
            )
        assert judge.endpoint is not None  # an external judge has one (validation)
        endpoint, source = judge.endpoint, f"judges.{judge.name}.endpoint"
    if rubric.uses_reference and args.reference is None:
        raise UsageError(
            f"rubric {rubric.name!r} ({rubric.source}) grades against a reference answer: pass --reference R"
        )
    return Target(args.binding, judge, endpoint, source, rubric)


def managed_endpoint(run: str, output_root: str | None, judge: JudgeConfig) -> tuple[str, str]:
    """The endpoint of ``judge`` in the run directory ``run``, from its ready endpoint record."""
    from launch._status import resolve_run_dir  # the one reading of RUN (a path, or a UUID with --output-root)

    path = resolve_run_dir(run, output_root)
    try:
        run_dir = RunDir.open(path)
    except RunDirError as exc:
        raise UsageError(f"--run {run}: {exc}") from None
    try:
        records = []
        for entry in run_dir.listdir():
            m = _ENDPOINT_RECORD.match(entry)
            if m is None or m.group("name") != judge.name:
                continue
            doc = run_dir.read_json(entry)
            if doc is not None and doc.get("ready") and isinstance(doc.get("endpoint"), str):
                records.append((entry, doc))
        # The run's clients reach the judge through its gateway (bounded, recorded): so does this grade.
        gateway = run_dir.read_json(names.gateway_record(judge.name))
    finally:
        run_dir.close()
    if not records:
        raise UsageError(
            f"--run {path}: no ready endpoint record of judge {judge.name} (judge-{judge.name}-RANK.json); is the "
            "run still starting, or over? pass --endpoint URL for a judge you started yourself"
        )
    entry, doc = records[0]
    if doc.get("model") != judge.model:
        raise UsageError(
            f"--run {path}: {entry} serves model {doc.get('model')!r}, the spec's judges.{judge.name}.model is "
            f"{judge.model!r}: that run is not of this spec's judge"
        )
    if gateway is not None and isinstance(gateway.get("endpoint"), str):
        return str(gateway["endpoint"]), str(Path(path) / names.gateway_record(judge.name))
    return str(doc["endpoint"]), str(Path(path) / entry)


def classify(exc: JudgeError) -> str:
    """The kind of a failed grade, for people and --json."""
    if isinstance(exc, InvalidGrade):
        d = exc.diagnostics
        if "raw_reply" not in d:  # the HTTP body was not a chat completion (not JSON)
            return UNPARSEABLE
        raw = d.get("raw_reply")
        if not isinstance(raw, str) or not raw.strip():
            return EMPTY
        if d.get("finish_reason") != "stop":
            return TRUNCATED
        # agent/judges/_replies.py says "score N outside MIN..MAX" for a score off the scale.
        return OUT_OF_SCALE if " outside " in str(exc.__cause__ or "") else UNPARSEABLE
    if isinstance(exc, ContextOverflow):
        return OVERFLOW
    if isinstance(exc, JudgeUnavailable):
        return UNAVAILABLE
    return REFUSED  # JudgeRequestError (a status not worth retrying), or any other refusal


def _what(kind: str) -> str:
    return {
        TRUNCATED: "not a valid grade: the judge's reply is truncated (finish_reason is not stop)",
        EMPTY: "not a valid grade: the judge's reply is empty",
        UNPARSEABLE: "not a valid grade: the judge's reply holds no score in the rubric's reply format",
        OUT_OF_SCALE: "not a valid grade: the judge's score is outside the rubric's score_scale",
        UNAVAILABLE: "the judge is unreachable",
        REFUSED: "the judge refused the request",
        OVERFLOW: "the grading request does not fit the judge's context (it is never truncated)",
    }[kind]


def _header(target: Target, client: JudgeClient) -> dict[str, Any]:
    return {
        "binding": target.verifier,
        "judge": {"name": target.judge.name, "model": client.model, "endpoint": client.endpoint},
        "endpoint_from": target.endpoint_source,
        "rubric": target.rubric.identity(),
    }


def grade(config: RunConfig, args: GradeArgs, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    target = resolve_target(config, args)
    judge = target.judge
    extracted = extract_answer(args.answer, enabled=target.rubric.extract_answer)
    reference = args.reference if target.rubric.uses_reference else None
    if args.reference is not None and reference is None:
        err(f"note: rubric {target.rubric.name!r} ({target.rubric.source}) uses no reference; --reference not sent")
    with JudgeClient(
        target.endpoint,
        judge.model,
        timeout=float(judge.timeout),
        # Counted on the judge's /tokenize only where the judge's context_check says so, as drivers do.
        max_context_length=judge.max_context_length if judge.context_check == "tokenize" else None,
        max_connections=1,
    ) as client:
        header = _header(target, client)
        try:
            result = client.grade(target.rubric, args.question, args.answer, reference)
        except JudgeError as exc:
            kind = classify(exc)
            _report_failure(header, extracted, exc, kind, args.json, out, err)
            return EXIT_NOT_GRADED
    _report_grade(header, extracted, result, args.json, out)
    return EXIT_OK


def _report_grade(
    header: dict[str, Any], extracted: Extracted, result: Grade, as_json: bool, out: Callable[[str], None]
) -> None:
    d = result.verifier_diagnostics
    if as_json:
        doc = {
            "score": result.score,
            "extracted_answer": extracted.answer,
            **header,
            "verifier_diagnostics": d,
        }
        out(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    low, high = d.get("score_scale", [None, None])
    scale = f"{_num(low)}..{_num(high)}"
    out(f"grade {result.score:g} (SCORE {_num(d.get('raw_score'))} on {scale}; the reward is SCORE / {_num(high)})")
    _report_common(header, extracted, d, out)


def _report_failure(
    header: dict[str, Any],
    extracted: Extracted,
    exc: JudgeError,
    kind: str,
    as_json: bool,
    out: Callable[[str], None],
    err: Callable[[str], None],
) -> None:
    message = f"{kind}: {_what(kind)}: {exc}"
    if as_json:
        doc = {
            "score": None,
            "extracted_answer": extracted.answer,
            **header,
            "verifier_diagnostics": exc.diagnostics,
            "error": {"kind": kind, "message": message},
        }
        out(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        out(f"no grade: {kind}")
        _report_common(header, extracted, exc.diagnostics, out)
    err(f'gym-launch: grade: binding "{header["binding"]}": {message}')


def _report_common(
    header: dict[str, Any], extracted: Extracted, diagnostics: dict[str, Any], out: Callable[[str], None]
) -> None:
    rubric = header["rubric"]
    source = f"template {rubric['template_file']}" if rubric.get("template_file") else f"profile {rubric['profile']}"
    judge = header["judge"]
    where = f"{judge['model']} at {judge['endpoint']}, from {header['endpoint_from']}"
    out(f'binding "{header["binding"]}": judge {judge["name"]} ({where})')
    out(f"rubric {rubric['name']}: {source}, digest {rubric['digest']}")
    out(f"extracted answer ({extracted.rule.value}):")
    out(_indent(extracted.answer))
    out("verifier_diagnostics:")
    out(_indent(json.dumps(diagnostics, indent=2, ensure_ascii=False, default=str)))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in (text.splitlines() or [""]))


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
