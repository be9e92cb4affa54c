"""Answer extraction (agent/judges/extraction.py): open-instruct's rules, one case per rule and edge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.judges.extraction import ExtractionRule, extract_answer


@pytest.mark.parametrize(
    ("response", "answer", "rule"),
    [
        # 1. the first <answer> block's contents, stripped, wins over everything else
        ("<think>x</think> <answer> Paris </answer> <answer>Rome</answer>", "Paris", ExtractionRule.ANSWER_TAG),
        ("<answer>\nmulti\nline\n</answer>", "multi\nline", ExtractionRule.ANSWER_TAG),
        ("<answer></answer>", "", ExtractionRule.ANSWER_TAG),
        # 2. else everything after the FIRST </think>, stripped
        ("<think>Let me think.</think>\n\nParis.  ", "Paris.", ExtractionRule.AFTER_THINK),
        ("a</think>b</think>c", "b</think>c", ExtractionRule.AFTER_THINK),
        ("reasoning without an opening tag</think> 42", "42", ExtractionRule.AFTER_THINK),
        # 3. else the assistant marker is removed (and the rest stripped)...
        ("<|assistant|> Paris ", "Paris", ExtractionRule.ASSISTANT_MARKER),
        # ...and a response with none of these passes unchanged, not even stripped
        ("  Paris.\n", "  Paris.\n", ExtractionRule.UNCHANGED),
        # an unclosed <think> is graded as written
        ("<think>cut off mid-reasoning", "<think>cut off mid-reasoning", ExtractionRule.UNCHANGED),
        # an unclosed <answer> is not a final answer
        ("<think>t</think><answer>Paris", "<answer>Paris", ExtractionRule.AFTER_THINK),
    ],
)
def test_rules(response: str, answer: str, rule: ExtractionRule) -> None:
    got = extract_answer(response)
    assert (got.answer, got.rule) == (answer, rule)
    assert got.changed is (rule is not ExtractionRule.UNCHANGED)


def test_disabled_passes_the_response_verbatim() -> None:
    response = "<think>private</think> Paris"
    got = extract_answer(response, enabled=False)
    assert (got.answer, got.rule, got.changed) == (response, ExtractionRule.DISABLED, False)


@given(st.text())
def test_reasoning_never_survives_a_closed_think_block(body: str) -> None:
    """Whatever the reasoning says (barring its own tags), none of it reaches the judge."""
    reasoning = body.replace("</think>", "").replace("<answer>", "") + " SECRET-REASONING"
    got = extract_answer(f"<think>{reasoning}</think> final")
    assert got.answer == "final"
    assert "SECRET-REASONING" not in got.answer
