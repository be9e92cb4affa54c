"""Run spec loading, --set overrides, canonical JSON and fingerprints."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from launch.spec._overrides import apply_overrides, parse_override
from launch.spec.errors import SpecError, UsageError
from launch.spec.load import ResolvedSpec, canonical_json, load_spec, resolved_from_dict

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

JUDGE = """
[judges.general]
mode = "managed"
backend = "reference"
model = "reference-judge"
gpus = 1
max_context_length = 4096
max_concurrent_calls = 4
"""


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_canonical_json_is_sorted_compact_utf8() -> None:
    spec = resolved_from_dict({"b": {"y": 1, "x": "é"}, "a": [3, 1.5, True]})
    assert spec.canonical_json() == '{"a":[3,1.5,true],"b":{"x":"é","y":1}}'
    expected = hashlib.sha256('{"a":[3,1.5,true],"b":{"x":"é","y":1}}'.encode()).hexdigest()
    assert spec.fingerprint == expected


def test_keys_as_spelled_no_defaults_injected(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, JUDGE))
    assert spec.data == {
        "judges": {
            "general": {
                "mode": "managed",
                "backend": "reference",
                "model": "reference-judge",
                "gpus": 1,
                "max_context_length": 4096,
                "max_concurrent_calls": 4,
            }
        }
    }
    assert "timeout" not in spec.data["judges"]["general"]


def test_omitted_cuda_graphs_and_explicit_false_differ(tmp_path: Path) -> None:
    omitted = load_spec(write(tmp_path, JUDGE, "a.toml"))
    explicit = load_spec(write(tmp_path, JUDGE + "cuda_graphs = false\n", "b.toml"))
    via_set = load_spec(write(tmp_path, JUDGE, "c.toml"), ["judges.general.cuda_graphs=false"])
    assert omitted.fingerprint != explicit.fingerprint
    assert explicit.fingerprint == via_set.fingerprint
    assert explicit.data["judges"]["general"]["cuda_graphs"] is False


def test_int_and_float_spellings_differ() -> None:
    # Keys as spelled: 120 and 120.0 are different resolved specs.
    assert resolved_from_dict({"a": 120}).fingerprint != resolved_from_dict({"a": 120.0}).fingerprint


def test_resolved_spec_is_a_private_copy() -> None:
    source = {"launch": {"gpus_per_replica": 8}}
    spec = resolved_from_dict(source)
    before = spec.fingerprint
    source["launch"]["gpus_per_replica"] = 4
    assert spec.data["launch"]["gpus_per_replica"] == 8
    assert spec.fingerprint == before == ResolvedSpec({"launch": {"gpus_per_replica": 8}}).fingerprint
    copy = spec.to_dict()
    copy["launch"]["gpus_per_replica"] = 2
    assert spec.data["launch"]["gpus_per_replica"] == 8


def test_json_round_trip_keeps_fingerprint(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "three-node.toml")
    plain = write(tmp_path, spec.canonical_json(), "plain.json")
    wrapped = write(
        tmp_path,
        json.dumps({"schema": "spec/1", "fingerprint": spec.fingerprint, "spec": spec.data}),
        "spec.json",
    )
    assert load_spec(plain).fingerprint == spec.fingerprint
    assert load_spec(wrapped).fingerprint == spec.fingerprint
    assert load_spec(wrapped).data == spec.data


@pytest.mark.parametrize(
    ("item", "path", "value"),
    [
        ("judges.general.timeout=300", ["judges", "general", "timeout"], 300),
        (
            'judging.bindings."general-quality".judge="big"',
            ["judging", "bindings", "general-quality", "judge"],
            "big",
        ),
        ("judging.bindings.'a.b'.rubric = 'r'", ["judging", "bindings", "a.b", "rubric"], "r"),
        ('judging.bindings."x=y".judge="j"', ["judging", "bindings", "x=y", "judge"], "j"),
        ("judges.g.cuda_graphs=false", ["judges", "g", "cuda_graphs"], False),
        ("launch.coordination.poll_interval=0.5", ["launch", "coordination", "poll_interval"], 0.5),
        ('driver.command=["python", "x.py"]', ["driver", "command"], ["python", "x.py"]),
        ('driver.env={A = "1"}', ["driver", "env"], {"A": "1"}),
        ("output.dir_mode=0o700", ["output", "dir_mode"], 0o700),
        # A bare word that is not TOML is taken as a string.
        ("judges.g.model=Qwen/Qwen3-32B", ["judges", "g", "model"], "Qwen/Qwen3-32B"),
        ("name=demo", ["name"], "demo"),
    ],
)
def test_parse_override(item: str, path: list[str], value: object) -> None:
    assert parse_override(item) == (path, value)


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("judges.general.timeout", "expected KEY=VALUE"),
        ("=3", "key is empty"),
        ("a..b=1", "not a valid dotted key"),
        ('judges.g.model="unterminated', "not valid TOML"),
        ("driver.command=[1,", "not valid TOML"),
    ],
)
def test_bad_override_is_a_usage_error(item: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_override(item)


def test_overrides_apply_in_order_and_create_tables() -> None:
    data = {"judges": {"general": {"timeout": 600}}}
    out = apply_overrides(
        data,
        ["judges.general.timeout=300", "judges.general.timeout=200", 'judging.bindings."q".judge="general"'],
    )
    assert out == {
        "judges": {"general": {"timeout": 200}},
        "judging": {"bindings": {"q": {"judge": "general"}}},
    }
    assert data == {"judges": {"general": {"timeout": 600}}}  # input untouched


def test_override_through_a_value_is_rejected() -> None:
    with pytest.raises(UsageError, match="name is a value, not a table"):
        apply_overrides({"name": "x"}, ["name.sub=1"])


def test_load_spec_applies_set(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, JUDGE), ["judges.general.timeout=300"])
    assert spec.data["judges"]["general"]["timeout"] == 300


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_spec(tmp_path / "missing.toml")


def test_directory_is_not_a_spec(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        load_spec(tmp_path)


def test_bad_toml_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n[trainer]\ngpus_per_node = \n')
    with pytest.raises(UsageError) as info:
        load_spec(path)
    assert "invalid TOML" in str(info.value)
    assert "line 3" in str(info.value) and "column" in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_json(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"invalid JSON.*line 1"):
        load_spec(write(tmp_path, "{nope", "spec.json"))
    with pytest.raises(UsageError, match="expected a JSON object"):
        load_spec(write(tmp_path, "[1, 2]", "list.json"))


def test_values_json_cannot_hold_are_spec_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "[data]\nwhen = 2024-01-01\n[launch.coordination]\npoll_interval = nan\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    keys = [p.key for p in info.value.problems]
    assert keys == ["data.when", "launch.coordination.poll_interval"]


def test_spec_error_lists_every_problem_one_per_line() -> None:
    from launch.spec.errors import Problem

    err = SpecError([Problem("a.b", "fix a"), Problem("c", "fix c")])
    assert str(err) == "a.b: fix a\nc: fix c"
    assert canonical_json({"z": 1, "a": None}) == '{"a":null,"z":1}'
