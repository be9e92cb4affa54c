"""One error root (schemas/errors.py): every exception class the product defines is a ``GymError``,
which carries its command's exit code, or is named below as internal, with why it never reaches a
person; and each command prints a user error as one line and exits with the error's code."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.errors import EXIT_RUN_FAILED, EXIT_USAGE, GymError

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("agent", "audit", "launch", "schemas")

# Exceptions outside the root: none reaches a command's `main`; each is caught where it is raised
# (or by the library's caller) and turned into something else. Module path -> why.
INTERNAL = {
    # The doorbell's refusal of a datagram: counted by reason in the doorbell thread.
    "agent.coord.doorbell_msg.Dropped": "counted, never raised past the doorbell",
    # The judge client library's API to drivers (their code decides); gym-launch grade reports
    # them as "not graded" (exit 1), the canaries and the judges' runtime record them.
    "agent.judges.client.JudgeError": "judge client library",
    "agent.judges.client.ContextOverflow": "judge client library",
    "agent.judges.client.JudgeUnavailable": "judge client library",
    "agent.judges.client.JudgeRequestError": "judge client library",
    "agent.judges.client.InvalidGrade": "judge client library",
    "agent.judges.client.TruncatedGrade": "judge client library",
    "agent.judges.client.JudgeDegraded": "judge client library",
    # The rubric half of the same library (ValueErrors its callers catch): gym-launch validate
    # turns them into spec problems, grade into a UsageError, the agent into a failure record.
    "agent.judges.rubrics.RubricError": "rubric library, turned into a spec problem or UsageError",
    "agent.judges._templates.TemplateError": "rubric library, turned into spec problems",
    "agent.judges._open_instruct.OpenInstructError": "rubric library, turned into a RubricError",
    "agent.judges._replies.ReplyFormatError": "reply parsing, turned into an invalid grade",
    # Judge health and the gateway: control flow inside one loop or one request.
    "agent.judges._engine_health.UnhealthyStatus": "a probe's retry decision",
    "agent.judges._engine_health.UnknownEngine": "a registry lookup (KeyError) of an id never registered",
    "agent.judges._gateway.UpstreamError": "the gateway answers the caller 502/504",
    "agent.judges._http1.ProtocolError": "the gateway answers the caller 4xx/5xx",
    "agent.judges._grade_log.PartlyWritten": "an OSError the gateway's log writer counts",
    # An agent bug: the lifecycle records it as the failure `internal`.
    "agent.lifecycle._state.IllegalTransition": "an agent bug, recorded as internal",
}

# The exit code of each class under the root whose code is not the usage code (2).
RUN_FAILED = {"agent.ground.failure.AgentFailed", "agent.ray.node.PortsError"}


def _product_modules() -> list[str]:
    found = []
    for top in PRODUCT:
        package = importlib.import_module(top)
        found.append(top)
        for info in pkgutil.walk_packages(package.__path__, f"{top}."):
            if info.name.rsplit(".", 1)[-1] != "__main__":  # an entry point runs when imported
                found.append(info.name)
    return found


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined at the top level of a product module, by its full name."""
    out: dict[str, type[BaseException]] = {}
    for name in _product_modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == name:
                out[f"{name}.{obj.__qualname__}"] = obj
    return out


def test_every_product_exception_is_under_the_root_or_named_internal() -> None:
    classes = _exception_classes()
    assert "schemas.errors.GymError" in classes and "launch.spec.errors.SpecError" in classes
    stray = sorted(n for n, c in classes.items() if not issubclass(c, GymError) and n not in INTERNAL)
    assert not stray, f"derive these from schemas.errors.GymError, or list them in INTERNAL with why: {stray}"
    stale = sorted(set(INTERNAL) - set(classes))
    assert not stale, f"INTERNAL names classes that no longer exist: {stale}"
    both = sorted(n for n in INTERNAL if issubclass(classes[n], GymError))
    assert not both, f"under the root and listed as internal: {both}"


def test_each_error_under_the_root_carries_its_commands_exit_code() -> None:
    classes = {n: c for n, c in _exception_classes().items() if issubclass(c, GymError)}
    assert set(classes) >= RUN_FAILED
    for name, cls in classes.items():
        assert cls.exit_code == (EXIT_RUN_FAILED if name in RUN_FAILED else EXIT_USAGE), name


def test_the_root_has_one_home_and_builtin_bases_callers_catch_are_kept() -> None:
    from launch.spec import errors
    from launch.spec.sglang_argv import JudgeCommandError
    from schemas import RunDirError, UnsafeEntry

    assert errors.GymError is GymError  # re-exported beside SpecError and UsageError, not a copy
    assert issubclass(UnsafeEntry, RunDirError) and issubclass(RunDirError, GymError)
    assert issubclass(JudgeCommandError, ValueError)


# --- each command: the one line and the error's exit code ------------------------------------


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_gym_launch_reports_a_run_directory_error_through_the_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from launch.cli import main

    # RunDir.create (schemas/) refuses the uuid before any agent starts: a RunDirError, one root.
    spec = REPO / "examples" / "demo.toml"
    assert main(["local", str(spec), "--uuid", "../escape", "--output-root", str(tmp_path)]) == EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("gym-launch: error: uuid '../escape' is not allowed"), line


def test_gym_audit_names_the_subcommand_with_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from audit.cli import main

    missing = tmp_path / "nope"
    assert main([str(missing)]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err).startswith(f"gym-audit: cannot audit {missing}: ")
    assert main(["logs", str(missing)]) == EXIT_USAGE
    assert (
        _one_line(capsys.readouterr().err)
        == f"gym-audit logs: {missing} does not exist; pass OUTPUT/cluster/UUID of a run"
    )
    (tmp_path / "file").write_text("")
    assert main(["ls", str(tmp_path / "file")]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err).startswith(f"gym-audit ls: {tmp_path / 'file'} is not a directory")


def test_gym_agent_reports_an_error_no_step_worded_with_its_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import agent.cli

    def refuse(_argv: object) -> int:
        raise GymError("the run directory is refused")

    monkeypatch.setattr(agent.cli, "_main", refuse)
    assert agent.cli.main(["--uuid", "u"]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err) == "gym-agent: error: the run directory is refused"


def test_gym_launch_preflight_reports_a_bad_set_with_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.preflight.__main__ import main

    spec = REPO / "examples" / "node.toml"
    assert main([str(spec), "--set", "trainer.nodes=x"]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err).startswith("gym-launch preflight: ")


def test_the_reaper_reports_a_run_directory_it_cannot_open_in_one_line(tmp_path: Path) -> None:
    argv = ["--run-dir", str(tmp_path / "gone"), "--rank", "0", "--incarnation", "i", "--fingerprint", "f"]
    proc = subprocess.run(
        [sys.executable, "-m", "agent.reaper", *argv, "--agent-pid", str(os.getpid()), "--poll", "0.01"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert _one_line(proc.stderr).startswith("gym-agent-reaper: error: "), proc.stderr
