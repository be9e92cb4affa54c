"""Redaction as a second line (issue 47 item 3): the one rule of schemas/credentials.py, its fast
path, and every writer of the run directory, `gym-launch status` and the audit's reports going
through it."""

from __future__ import annotations

import random

import pytest

from schemas import credentials

# Words a fast path could get wrong: every kind the rule redacts, near misses, odd spacing, non-ASCII.
_WORDS = """
    --api-key --api_key -token --hub_token --password= --pass-rate HF_TOKEN= token= keyboard passage path
    author PAT key Key: auth = - -- -x a=b sk- sk_live hf_ ghp_ github_pat_ glpat- xoxb- AKIAABCDEFGHIJKLMNOP
    AIza ya29. eyJhbGc.eyJzdWIi -----BEGIN RSA PRIVATE KEY----- task-based risk-free value47 paß= ﬀ ſk- é …
    ${runtime:HF_TOKEN} " ' /v1/chat?api_key= --secret NAME
"""
PIECES = tuple(_WORDS.split())
SEPARATORS = (" ", "", "\n", "\t", "  ", "=", "\u00a0", "\x1c")


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) + rng.choice(SEPARATORS) for _ in range(rng.randint(1, 7))]
        out.append("".join(parts))
    return out


def test_the_fast_path_changes_nothing_the_rule_would_redact(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _texts(6000, seed=47)
    fast = [credentials.redact_text(t) for t in texts]
    fast_argv = [credentials.redact_argv(t.split("|")) for t in texts]
    monkeypatch.setattr(credentials, "_may_hold", lambda _text: True)  # the rule on every text
    assert [credentials.redact_text(t) for t in texts] == fast
    assert [credentials.redact_argv(t.split("|")) for t in texts] == fast_argv
    assert sum(f != t for f, t in zip(fast, texts, strict=True)) > 1000  # the corpus does hold credentials


def test_a_frozen_dataclass_is_redacted_field_by_field_and_keeps_its_shape() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Row:
        cause: str
        argv: tuple[str, ...]
        count: int

    row = credentials.redact(Row("exit 1: train --api-key hunter2xyz47", ("x", "--token", "abc47"), 3))
    assert row == Row("exit 1: train --api-key <redacted>", ("x", "--token", "<redacted>"), 3)
