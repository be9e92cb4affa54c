"""schemas/ owns the run-directory contract: no other module spells a file name and the shared
vocabularies equal the schemas' enums. (Which package may import which: tests/test_import_graph.py.)"""

from __future__ import annotations

import ast
import importlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit._first_cause import KIND_PRIORITY
from schemas import AgentState, DriverEnv, FailureKind, Phase, PhaseOutcome, RunOutcome, WriterKind, names, order
from schemas.vocab import FsCondition, GatewayOutcome, GradeOutcome, ProgressSource

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "schemas"
# Production code that must take every run-directory name from schemas.names.
CHECKED = ("agent", "audit", "launch", "bench", "examples")
# Files being rewritten elsewhere (the run-spec model); they move to schemas.names on merge.
PENDING: set[str] = set()
PLACEHOLDER = "0"


def _python_files() -> Iterator[Path]:
    for top in CHECKED:
        yield from sorted((REPO / top).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string literal, f-strings rendered with a placeholder rank/name for each hole."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    parts.append(v.value)
                    skip.add(id(v))
                else:
                    parts.append(PLACEHOLDER)
            yield node.lineno, "".join(parts)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


LISTED_PREFIXES = {
    "address-",
    "heartbeat-",
    "failure-",
    "ack-",
    "phases-",
    "placement-",
    "cleanup-",
    "judge-",
    "driver-",
    "agent-",
    "ray-",
    "request-",  # stack-requests/request-ID.json (issue 51: agent/stacks/live.py parsed it by hand)
}


def looks_like_run_dir_name(text: str) -> bool:
    candidate = text.replace("*", PLACEHOLDER)
    leaf = names.leaf(candidate)
    if names.parse(candidate) is not None or names.parse(leaf) is not None:
        return True
    if any(names.parse(f"{sub}/{leaf}") is not None for sub in names.SUBDIRS):
        return True
    return text in LISTED_PREFIXES  # a hand-written parser (name.startswith("failure-"))


def test_the_detector_catches_hand_built_names() -> None:
    for text in ("ack-0.json", "failures/failure-0.json", "spec.json", "judge-general-0.log", "failure-", "request-"):
        assert looks_like_run_dir_name(text), text
    for text in ("ray-head", "judge-general", "x.json", "RUN.toml", "judge-NAME-*.log", "gym-agent"):
        assert not looks_like_run_dir_name(text), text


def test_no_run_directory_name_is_spelled_outside_schemas() -> None:
    found = []
    for path in _python_files():
        rel = path.relative_to(REPO).as_posix()
        if rel in PENDING:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, text in _strings(tree):
            if looks_like_run_dir_name(text):
                found.append(f"{rel}:{line}: {text!r}")
    assert not found, "use schemas.names instead of:\n" + "\n".join(found)


def test_no_driver_environment_name_is_spelled_outside_schemas() -> None:
    env_names = {v for k, v in vars(DriverEnv).items() if k.isupper()}
    found = []
    for path in _python_files():
        rel = path.relative_to(REPO).as_posix()
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if text in env_names:
                found.append(f"{rel}:{line}: {text!r}")
    assert not found, "use schemas.DriverEnv instead of:\n" + "\n".join(found)


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("enum", "schema", "path"),
    [
        (FailureKind, "failure", ("properties", "kind", "enum")),
        (AgentState, "phases", ("properties", "state", "enum")),
        (Phase, "phases", ("properties", "phases", "items", "properties", "phase", "enum")),
        (PhaseOutcome, "phases", ("properties", "phases", "items", "properties", "outcome", "enum")),
        (RunOutcome, "cleanup", ("properties", "outcome", "enum")),
        (WriterKind, "common", ("$defs", "header", "properties", "writer", "enum")),
        (FsCondition, "failure", ("properties", "fs_condition", "enum")),
        (GradeOutcome, "grade", ("properties", "outcome", "enum")),
        (ProgressSource, "failure", ("properties", "hang", "properties", "source", "enum")),
        (GatewayOutcome, "judge-gateway", ("properties", "outcome", "enum")),
    ],
)
def test_vocabularies_equal_the_schema_enums(enum: type, schema: str, path: tuple[str, ...]) -> None:
    node = _schema(schema)
    for key in path:
        node = node[key]
    assert sorted(node) == sorted(str(m) for m in enum)  # type: ignore[attr-defined]


def test_ack_outcome_is_a_run_outcome() -> None:
    assert set(_schema("ack")["properties"]["outcome"]["enum"]) <= {str(m) for m in RunOutcome}


def test_every_failure_kind_has_an_audit_priority() -> None:
    assert set(KIND_PRIORITY) == set(FailureKind)


def test_names_round_trip_through_the_parser() -> None:
    for build, schema in (
        (names.address, "address"),
        (names.heartbeat, "heartbeat"),
        (names.failure, "failure"),
        (names.ack, "ack"),
        (names.phases, "phases"),
        (names.placement, "placement"),
        (names.cleanup, "cleanup"),
    ):
        parsed = names.parse(build(17))
        assert parsed is not None and (parsed.schema, parsed.rank, parsed.judge) == (schema, 17, None)
    assert names.parse(names.judge_endpoint("general", 3)) == names.Parsed("judge-endpoint", 3, "general")
    assert names.parse(names.judge_log("my-judge", 12)) == names.Parsed("log", 12, "my-judge", "judge")
    assert names.parse(names.driver_log(2)) == names.Parsed("log", 2, None, "driver")
    assert names.parse(names.REGISTRY) == names.Parsed("registry", None, None)
    assert names.parse("notes.txt") is None
    for sub, build in (
        (names.ADDRESSES_DIR, names.address),
        (names.FAILURES_DIR, names.failure),
        (names.ACKS_DIR, names.ack),
        (names.HEARTBEATS_DIR, names.heartbeat),
    ):
        assert names.rank_in(sub, names.leaf(build(5))) == 5
        assert names.rank_in(sub, names.temp_name(names.leaf(build(5)), "0" * 12)) is None
    assert names.is_temp(names.temp_name("spec.json", "abcdef012345"))
    assert names.stacks_request_id(names.leaf(names.stacks_request("0123abcd"))) == "0123abcd"
    for leaf in ("request-0123ABCD.json", "request-0123abcd.json.tmp", "other-0123abcd.json"):
        assert names.stacks_request_id(leaf) is None, leaf
    assert not names.is_temp("spec.json")


def test_one_address_order() -> None:
    addrs = {0: "10.0.0.10", 1: "10.0.0.9", 2: "::1", 3: "127.0.0.2", 4: "not-an-ip"}
    assert order.node_owners(addrs) == [1, 0, 3, 2, 4]


def test_the_placement_record_builder_and_the_audit_view_agree(tmp_path: Path) -> None:
    from audit._load import load_run
    from audit._views import placements
    from audit.safedir import SafeDir
    from schemas import RunDir, Writer, records

    fields = records.placement_fields(
        node_index=2,
        address="10.0.0.3",
        visible_devices=("4", "5", "6", "7"),
        trainer_gpus=0,
        rollout_gpus=2,
        ray_devices=(0, 1),
        ray_num_gpus=2,
        judge_devices={"general": (3,)},
        unused_devices=(2,),
        is_head=False,
        is_driver_node=True,
    )
    with RunDir.create(tmp_path, "place", mode=0o750) as run:
        run.write_artifact(names.placement(5), Writer("d" * 64, 5, "me"), fields)  # validates
        with SafeDir(run.path) as safe:
            rec = placements(load_run(safe))[5]
    assert (rec.node_index, rec.address, rec.ray_devices, rec.ray_mask, rec.ray_num_gpus) == (
        2,
        "10.0.0.3",
        (0, 1),
        "4,5",
        2,
    )
    assert rec.judges["general"].devices == (3,) and rec.judges["general"].mask == "7"
    assert (rec.unused_devices, rec.is_head, rec.is_driver_node) == ((2,), False, True)


def test_the_reference_judge_server_stays_stdlib_only() -> None:
    """It writes its port file through schemas.safe_io; importing that must not pull in the
    third-party modules the rest of the contract uses."""
    import subprocess
    import sys

    code = (
        "import sys, agent.judges.reference_server as s, schemas.safe_io; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'jsonschema', 'orjson', 'httpx', 'psutil'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_lazy_exports_are_complete() -> None:
    import schemas

    assert sorted(schemas.__all__) == sorted([*schemas._EXPORTS, *schemas._SUBMODULES])
    for name in schemas.__all__:
        assert getattr(schemas, name) is not None


def test_the_record_types_lazy_exports_are_complete() -> None:
    # schemas.records lists each name three times (static imports, __all__, _EXPORTS' module):
    # a name missing from _EXPORTS would fail only where it is first imported.
    from schemas import records

    assert sorted(records.__all__) == sorted(records._EXPORTS)
    for name, module in records._EXPORTS.items():
        assert getattr(records, name) is getattr(importlib.import_module(f"schemas.records.{module}"), name)


@pytest.mark.parametrize(
    "module", ["agent.driver_api", "agent.judges", "agent.judges.client", "audit.api", "launch.spec", "schemas"]
)
def test_each_public_surface_names_what_it_exports(module: str) -> None:
    """What drivers and the other packages import is named in __all__, and every name is there."""
    import importlib

    mod = importlib.import_module(module)
    exported = mod.__all__
    assert exported and len(set(exported)) == len(exported)
    for name in exported:
        value = getattr(mod, name, None)
        if value is None:  # a package's submodule
            value = importlib.import_module(f"{module}.{name}")
        assert value is not None, f"{module}.{name}"


def test_every_schema_is_one_declared_artifact() -> None:
    from schemas.validation import schema_names

    declared = [a.schema for a in (*names.ARTIFACTS, *names.JSONL_ARTIFACTS)]
    assert len(set(declared)) == len(declared)
    assert sorted(declared) == sorted(schema_names())


def test_write_artifact_derives_the_schema_from_the_name(tmp_path: Path) -> None:
    from schemas import RunDir, Writer

    run = RunDir.create(tmp_path, "u", mode=0o750)
    w = Writer("e" * 64, 0, "me")
    assert run.write_artifact(names.ack(0), w, {"outcome": "success"})["schema"] == "ack"
    with pytest.raises(ValueError, match="does not match its schema"):
        run.write_artifact(names.heartbeat(0), w, {"outcome": "success"})  # an ack's fields, a heartbeat's name
    with pytest.raises(TypeError):
        run.write_artifact(names.ack(1), "ack", w, {"outcome": "success"})  # type: ignore[call-arg,arg-type]
    with pytest.raises(ValueError, match="not the name of a run-directory artifact"):
        run.write_artifact("notes.json", w, {})
    run.ensure_dir(names.attempt_dir(1))
    assert run.create_artifact(names.attempt_claim(1), w, _claim())["schema"] == "attempt"


def _claim() -> dict:
    return {"state": "claimed", "token": "t", "previous": None, "archived": []}


def test_one_rule_says_which_attempt_is_current(tmp_path: Path) -> None:
    from audit._load import current_attempt as audit_current
    from schemas import RunDir, Writer

    run = RunDir.create(tmp_path, "u", mode=0o750)
    assert names.current_attempt([]) == 1 and run.current_attempt() == 1 == audit_current(run.path)
    for n in (2, 3):
        run.ensure_dir(names.attempt_dir(n))
        run.create_artifact(names.attempt_claim(n), Writer("e" * 64, 0, "me"), _claim())
    run.ensure_dir(names.attempt_dir(5))  # a folder without a claim is no attempt
    assert names.claimed_attempts(run.listdir) == [2, 3]
    assert RunDir.open(run.path).current_attempt() == 3 == audit_current(run.path)
