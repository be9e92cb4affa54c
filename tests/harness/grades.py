"""A complete verifier_diagnostics, as the judge client writes one for a graded sample, for tests
that write grades lines themselves (schemas/common.schema.json, $defs/verifier_diagnostics)."""

from __future__ import annotations

from typing import Any


def diagnostics(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "rubric": {"name": "general-quality", "profile": "general-quality", "digest": "0" * 64},
        "model": {"requested": "judge", "served": "judge", "endpoint": "http://127.0.0.1:1"},
        "retries": 0,
        "latency_s": 0.01,
        "prompt_tokens": None,
        "max_output_tokens": 256,
        "usage": None,
        "answer": {"raw": "Paris.", "extracted": "Paris.", "rule": "verbatim"},
        "reference": None,
        "request": {"messages": [{"role": "user", "content": "grade it"}]},
        "reply_format": "score_line",
        "score_scale": [0, 10],
        "raw_reply": "Reasoning: ok\nSCORE: 7",
        "finish_reason": "stop",
        "reasoning": "ok",
        "raw_score": 7,
    }
    return {**base, **fields}
