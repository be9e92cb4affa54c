"""INIT without a lifecycle (agent/lifecycle/init.py): each refusal comes back as one `Refusal`,
exit code 2, tagged with the rank once it is known, and a replica that does not join writes
nothing of its own."""

from __future__ import annotations

from pathlib import Path

from agent.coord.identity import resolve
from agent.coord.rendezvous import claim
from agent.lifecycle.init import Refusal, Request, init
from schemas import RunDir, Writer, names
from tests.harness import small_spec

FP = "0" * 64


def _spec(tmp: Path) -> str:
    path = tmp / "run.toml"
    path.write_text(small_spec(replicas=2, ray=False))
    return str(path)


def _refused(request: Request, env: dict[str, str]) -> Refusal:
    got = init(request, 0.0, env)
    assert isinstance(got, Refusal), got
    assert got.exit_code == 2
    return got


def test_no_spec_is_refused_before_the_rank_is_known() -> None:
    got = _refused(Request(uuid="u"), {})
    assert got.rank is None
    assert got.line().startswith("gym-agent: [agent] error: no run spec: pass --config RUN.toml")


def test_a_spec_of_another_fingerprint_is_refused_naming_where_it_came_from(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    got = _refused(Request(uuid="u", config=path, rank=1, expect_fingerprint=FP), {})
    assert got.line().startswith(f"gym-agent: [rank 1] error: {path}: the spec's fingerprint is ")
    assert not (tmp_path / "out").exists()


def test_an_unknown_resume_value_is_refused_with_the_rank_and_nothing_written(tmp_path: Path) -> None:
    request = Request(
        uuid="u", config=_spec(tmp_path), output_root=str(tmp_path / "out"), rank=0, replicas=2, address="127.0.0.1"
    )
    got = _refused(request, {"GYM_RESUME": "again"})
    assert got.rank == 0 and "$GYM_RESUME is 'again'" in got.message
    assert not (tmp_path / "out").exists()


def test_a_claimed_rank_is_refused_and_the_loser_writes_nothing(tmp_path: Path) -> None:
    request = Request(
        uuid="u", config=_spec(tmp_path), output_root=str(tmp_path / "out"), rank=0, replicas=2, address="127.0.0.1"
    )
    run = RunDir.create(tmp_path / "out", "u", mode=0o750)
    claim(run, Writer(FP, 0, "first"), resolve(0, 2, "127.0.0.1", {}))
    before = sorted(p.name for p in run.path.rglob("*"))
    got = _refused(request, {})
    assert got.line().startswith("gym-agent: [rank 0] error: rank 0 of this run was already claimed"), got
    assert sorted(p.name for p in run.path.rglob("*")) == before  # no log, no spec.json
    assert not (run.path / names.agent_log(0)).exists()
