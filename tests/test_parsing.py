"""Strict final-answer parsing (envs.parsing): thinking, labels, markdown, adversarial reasoning text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envs.parsing import final_answer_line, match_action, strip_thinking

IPD = ("COOPERATE", "DEFECT")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a <think>x</think> b", "a  b"),
        ("<think>one</think><think>two</think>c", "c"),
        ("<think>\nmulti\nline\n</think>\nDEFECT", "\nDEFECT"),
        ("<|channel>thought\nDEFECT<channel|>COOPERATE", "COOPERATE"),
        ("<think>never closed", None),
        ("<|channel>never closed", None),
        ("plain", "plain"),
    ],
)
def test_strip_thinking(text, expected):
    assert strip_thinking(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reasoning\n\nFinal action: DEFECT\n\n", "DEFECT"),
        ("**Answer:** COOPERATE", "COOPERATE"),
        ("My final move is: `DEFECT`.", "DEFECT"),
        ("> Decision - cooperate!", "cooperate"),
        ('## Action\n"DEFECT"', "DEFECT"),
        ("Bid = 3", "3"),
        ("The demand: [1, 2, 3]", "[1, 2, 3]"),
        ("Your demand: [1, 2, 3]", "Your demand: [1, 2, 3]"),  # "Your" is not a label prefix
        ("   \n  \n", None),
        ("", None),
    ],
)
def test_final_answer_line(text, expected):
    assert final_answer_line(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the method's early bug read words from the reasoning; these must not parse
        ("No defection", None),
        ("I will not DEFECT", None),
        ("I choose to cooperate rather than DEFECT", None),
        ("COOPERATE or DEFECT", None),
        ("DEFECT.\nActually I am not sure.", None),
        ("DEFECTION", None),
        ("C", None),
        # the answer on the last line wins over anything earlier
        ("<think>DEFECT</think>\nCOOPERATE", "COOPERATE"),
        ("**Final action: defect.**", "DEFECT"),
        ("Opponent defected last round. Retaliating to discourage exploitation.\nDEFECT", "DEFECT"),
        ("cooperate", "COOPERATE"),
        ("  Cooperate  ", "COOPERATE"),
        ("<think>I'll defect\n", None),
    ],
)
def test_match_action_reads_only_the_final_answer(text, expected):
    assert match_action(text, IPD) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My bid is -1", None),  # a minus sign, not a label separator (found by tests/test_fuzz_outputs.py)
        ("choice is -1", None),
        ("Bid - 1", "1"),
        ("Bid: 2", "2"),
        ("Answer -3", None),
    ],
)
def test_a_dash_before_a_digit_is_a_sign(text, expected):
    assert match_action(text, ["1", "2", "3"]) == expected


def test_match_action_with_normalize():
    legal = ["[1, 2, 3]", "[0, 0, 0]"]

    def canon(line: str) -> str:
        return "[" + ", ".join(p.strip() for p in line.strip("[]").split(",")) + "]"

    assert match_action("Demand: [1,2 ,3]", legal, normalize=canon) == "[1, 2, 3]"
    assert match_action("[1,2]", legal, normalize=canon) is None


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_match_action_never_returns_an_illegal_action(text):
    assert match_action(text, IPD) in (None, *IPD)


@given(st.sampled_from(IPD), st.text(alphabet="abc xyz.,\n", max_size=80))
def test_any_reasoning_followed_by_an_answer_line_parses(action, reasoning):
    assert match_action(f"{reasoning}\n{action}", IPD) == action
