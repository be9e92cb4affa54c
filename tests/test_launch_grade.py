"""`gym-launch grade SPEC --binding NAME --question Q --answer A [--reference R] [--json]`: one
sample graded through a binding's judge and rubric by the judge client library drivers use, against
real judges (the reference judge as an external service and as a run's managed judge, and a
stand-in external judge), with the exit codes the issue's interface names."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _judge_server import RunningServer, dead_port, start_module
from _recording_judge import recording_judge

from schemas import RunDir, Writer, names
from schemas.vocab import WriterKind

ROOT = Path(__file__).resolve().parent.parent
GYM_LAUNCH = ROOT / ".venv" / "bin" / "gym-launch"
EXAMPLE = ROOT / "examples" / "rubrics" / "graded-against-reference.txt"
Factory = Callable[..., RunningServer]

QUESTION = "What is the capital of France?"
THINKING = "<think>Lyon? No: the capital of France is Paris.</think>\nThe capital of France is Paris."


def spec_text(endpoint: str, *, model: str = "judge-model", tiny_tokens: int = 3) -> str:
    """The demo spec plus an external judge at ``endpoint`` bound three ways: the example template
    (JSON on 1..10), a built-in profile, and a profile whose output reservation cannot hold a reply."""
    demo = (ROOT / "examples" / "demo.toml").read_text(encoding="utf-8")
    demo = demo.replace('"examples/demo_driver.py"', f'"{ROOT / "examples" / "demo_driver.py"}"')
    demo = demo.replace('"data/', f'"{ROOT / "examples" / "data"}/')
    digest = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    return (
        demo
        + f"""
[judges.ext]
mode = "external"
model = "{model}"
endpoint = "{endpoint}"
timeout = 10

[rubrics.mine]
template_file = "{EXAMPLE}"
template_sha256 = "{digest}"
reply_format = "json"
score_scale = [1, 10]
max_output_tokens = 256

[rubrics.plain]
profile = "general-quality"
max_output_tokens = 256

[rubrics.tiny]
profile = "general-quality"
max_output_tokens = {tiny_tokens}

[judging.bindings."general-mine"]
judge = "ext"
rubric = "mine"

[judging.bindings."general-plain"]
judge = "ext"
rubric = "plain"

[judging.bindings."general-tiny"]
judge = "ext"
rubric = "tiny"
"""
    )


def write(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "run.toml"
    spec.write_text(text, encoding="utf-8")
    return spec


def grade(spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(GYM_LAUNCH), "grade", str(spec), "--question", QUESTION, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_grade_through_the_reference_judge_prints_the_grade_and_every_diagnostic(
    tmp_path: Path, judge_server: Factory
) -> None:
    server = judge_server()
    spec = write(tmp_path, spec_text(server.base_url + "/v1"))
    done = grade(spec, "--binding", "general-mine", "--answer", THINKING, "--reference", "Paris", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {"score", "extracted_answer", "verifier_diagnostics"} <= set(doc) and "error" not in doc
    assert doc["extracted_answer"] == "The capital of France is Paris."
    assert 0.1 <= doc["score"] <= 1.0
    d = doc["verifier_diagnostics"]
    assert d["answer"]["raw"] == THINKING and d["answer"]["rule"] == "after_think"
    assert d["rubric"]["template_file"] == str(EXAMPLE) and d["reply_format"] == "json"
    (message,) = d["request"]["messages"]
    assert message["role"] == "user" and "<think>" not in message["content"]
    assert d["model"]["served"] == server.model and d["finish_reason"] == "stop"
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in server.log()

    text = grade(spec, "--binding", "general-plain", "--answer", "Paris is the capital of France.")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("grade ") and "extracted answer (unchanged):" in text.stdout
    assert "verifier_diagnostics:" in text.stdout and '"raw_reply"' in text.stdout
    assert "profile general-quality" in text.stdout


def test_a_truncated_reply_exits_1_saying_truncated(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server()
    spec = write(tmp_path, spec_text(server.base_url))
    done = grade(spec, "--binding", "general-tiny", "--answer", "Paris.")
    assert done.returncode == 1, done.stderr
    assert (
        "truncated: not a valid grade" in done.stderr
        and "general-tiny" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert done.stdout.startswith("no grade: truncated")
    as_json = grade(spec, "--binding", "general-tiny", "--answer", "Paris.", "--json")
    assert as_json.returncode == 1
    doc = json.loads(as_json.stdout)
    assert doc["error"]["kind"] == "truncated" and doc["score"] is None
    assert doc["verifier_diagnostics"]["finish_reason"] == "length" and doc["extracted_answer"] == "Paris."


def test_an_unparseable_reply_exits_1_saying_so(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server("--fault", "invalid")
    spec = write(tmp_path, spec_text(server.base_url))
    done = grade(spec, "--binding", "general-plain", "--answer", "Paris.", "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["error"]["kind"] == "unparseable" and "no score" in doc["error"]["message"]
    assert "rather not give a number" in doc["verifier_diagnostics"]["raw_reply"]
    assert "unparseable: not a valid grade" in done.stderr and "no score in the rubric's reply format" in done.stderr


@pytest.mark.parametrize(
    ("reply", "finish", "kind"),
    [
        ('{"REASONING": "off the chart", "SCORE": 15}', "stop", "out_of_scale"),
        ("I cannot grade this.", "stop", "unparseable"),
        ('{"REASONING": "The answer is', "length", "truncated"),
    ],
)
def test_a_stand_in_external_judge_reply_that_is_no_grade_exits_1(
    tmp_path: Path, reply: str, finish: str, kind: str
) -> None:
    with recording_judge(reply=reply, finish_reason=finish) as judge:
        spec = write(tmp_path, spec_text(judge.base_url, model=judge.model))
        once = ("--set", "rubrics.mine.invalid_reply_attempts=1")  # else asked again 1 s, 2 s later
        done = grade(spec, *once, "--binding", "general-mine", "--answer", "Paris.", "--reference", "Paris", "--json")
        assert len(judge.requests) == 1
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["error"]["kind"] == kind and doc["verifier_diagnostics"]["raw_reply"] == reply
    assert f"{kind}: not a valid grade" in done.stderr, done.stderr


def test_a_request_beyond_the_judges_context_exits_1_as_overflow(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server()
    spec = write(tmp_path, spec_text(server.base_url))
    counted = ("--set", 'judges.ext.context_check="tokenize"', "--set", "judges.ext.max_context_length=500")
    long_answer = "Paris is the capital of France. " * 60
    done = grade(spec, *counted, "--binding", "general-plain", "--answer", long_answer, "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["error"]["kind"] == "overflow" and "not truncated" in doc["error"]["message"]
    assert "POST /v1/chat/completions" not in server.log()  # counted, refused, never sent
    fits = grade(spec, *counted, "--binding", "general-plain", "--answer", "Paris.", "--json")
    assert fits.returncode == 0, fits.stderr
    assert json.loads(fits.stdout)["verifier_diagnostics"]["prompt_tokens"] > 0


def test_an_unreachable_judge_exits_1_saying_so(tmp_path: Path) -> None:
    spec = write(tmp_path, spec_text(f"http://127.0.0.1:{dead_port()}"))
    done = grade(spec, "--binding", "general-plain", "--answer", "Paris.", "--json")
    assert done.returncode == 1, done.stderr
    assert "unavailable: the judge is unreachable" in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"]["kind"] == "unavailable"


def test_bad_command_lines_exit_2_saying_what_to_pass(tmp_path: Path) -> None:
    spec = write(tmp_path, spec_text("http://127.0.0.1:9"))
    unknown = grade(spec, "--binding", "general-nope", "--answer", "A")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    for known in ('"general-mine"', '"general-plain"', '"general-quality"', '"general-quality_ref"'):
        assert known in unknown.stderr, unknown.stderr
    no_reference = grade(spec, "--binding", "general-mine", "--answer", "A")
    assert no_reference.returncode == 2 and "pass --reference R" in no_reference.stderr
    managed = grade(spec, "--binding", "general-quality", "--answer", "A")
    assert managed.returncode == 2 and "--run OUTPUT/cluster/UUID" in managed.stderr
    assert "--endpoint URL" in managed.stderr
    external_run = grade(spec, "--binding", "general-plain", "--answer", "A", "--run", str(tmp_path))
    assert external_run.returncode == 2 and "judge ext is external" in external_run.stderr
    both = grade(spec, "--binding", "general-plain", "--answer", "A", "--run", "x", "--endpoint", "http://h:1")
    assert both.returncode == 2
    missing = subprocess.run(
        [str(GYM_LAUNCH), "grade", str(spec), "--binding", "general-plain"], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "--question" in missing.stderr
    bad_spec = write(
        tmp_path, spec_text("http://127.0.0.1:9").replace("max_output_tokens = 256", "max_output_tokens = 0", 1)
    )
    assert grade(bad_spec, "--binding", "general-plain", "--answer", "A").returncode == 2


def test_a_managed_judge_is_reached_through_the_runs_endpoint_record(tmp_path: Path, judge_server: Factory) -> None:
    server = judge_server(model="reference-judge")  # the demo's managed judge serves this model
    spec = write(tmp_path, spec_text("http://127.0.0.1:9"))
    run = RunDir.create(tmp_path / "out", "run-1", mode=0o750)
    try:
        writer = Writer("0" * 64, 2, "test", WriterKind.AGENT)
        run.write_artifact(
            names.judge_endpoint("general", 2),
            writer,
            {
                "name": "general",
                "backend": "reference",
                "model": "reference-judge",
                "endpoint": server.base_url,
                "host": "127.0.0.1",
                "port": server.port,
                "pid": server.proc.pid,
                "devices": [1],
                "argv": ["python", "-m", "agent.judges.reference_server"],
                "ready": True,
            },
        )
    finally:
        run.close()
    run_dir = tmp_path / "out" / "cluster" / "run-1"
    done = grade(spec, "--binding", "general-quality", "--answer", "Paris is the capital.", "--run", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert f"from {run_dir / names.judge_endpoint('general', 2)}" in done.stdout
    by_uuid = grade(
        spec,
        "--binding",
        "general-quality",
        "--answer",
        "Paris.",
        "--run",
        "run-1",
        "--output-root",
        str(tmp_path / "out"),
    )
    assert by_uuid.returncode == 0, by_uuid.stderr
    # A run with gateways: the grade goes through the judge's gateway, as every client of the run does.
    gw = start_module(
        tmp_path,
        "agent.judges._gateway",
        *("--judge", "general", "--host", "127.0.0.1", "--upstream", server.base_url),
        *("--max-concurrent-calls", "2", "--timeout", "30", "--run-dir", str(tmp_path)),
        name="gateway",
    )
    try:
        with RunDir.open(run_dir) as again:
            record = {"judge": "general", "mode": "managed", "endpoint": gw.base_url, "host": "127.0.0.1"}
            record |= {"port": gw.port, "pid": gw.proc.pid, "upstream": server.base_url, "max_concurrent_calls": 2}
            record |= {"requests_log": names.gateway_log("general"), "log": names.gateway_process_log("general", 2)}
            again.write_artifact(names.gateway_record("general"), Writer("0" * 64, 2, "test", WriterKind.AGENT), record)
        through = grade(spec, "--binding", "general-quality", "--answer", "Paris.", "--run", str(run_dir))
    finally:
        gw.stop()
    assert through.returncode == 0, through.stderr
    assert f"from {run_dir / names.gateway_record('general')}" in through.stdout
    assert '"path":"/v1/chat/completions"' in (tmp_path / names.gateway_log("general")).read_text()
    empty = RunDir.create(tmp_path / "out", "run-2", mode=0o750)
    empty.close()
    none = grade(spec, "--binding", "general-quality", "--answer", "A", "--run", str(tmp_path / "out/cluster/run-2"))
    assert none.returncode == 2 and "no ready endpoint record of judge general" in none.stderr


def test_help_names_the_command_and_its_exit_codes() -> None:
    top = subprocess.run([str(GYM_LAUNCH), "--help"], capture_output=True, text=True)
    assert "grade" in top.stdout and "grade: no valid grade" in top.stdout
    sub = subprocess.run([str(GYM_LAUNCH), "grade", "--help"], capture_output=True, text=True)
    for needle in ("--binding", "--run OUTPUT/cluster/UUID", "--endpoint URL", "grade exit codes:", "out_of_scale"):
        assert needle in sub.stdout
