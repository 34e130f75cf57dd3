"""Strict reading of a model's final answer, shared by every game's `parse_action`.

The rule: strip any thinking, take the *last non-empty line*, drop a leading answer label and light
markdown, and accept it only if what remains is exactly one legal action (case and whitespace
insensitive). Words inside reasoning are never read, so "No defection" is not DEFECT and
"I will not DEFECT" is not DEFECT either: such text goes to the constrained fallback decode instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# Closed thinking blocks (Qwen-style <think>, Gemma 4's thought channel) are removed before parsing.
_THINK_BLOCKS = re.compile(r"<think>.*?</think>|<\|channel>.*?<channel\|>", re.DOTALL)
_OPEN_THINK = re.compile(r"<think>|<\|channel>")
# A label the answer line may start with: "Final action:", "Action -", "My bid:", "Answer =" ... A dash right
# before a digit is a minus sign, not a separator: "My bid is -1" states -1, not 1.
_LABEL = re.compile(
    r"^(?:(?:my|final|the)\s+)*(?:action|answer|move|choice|decision|bid|demand|offer)\s*(?:is)?\s*(?:[:=]|-(?!\d))?\s*",
    re.IGNORECASE,
)
_MARKDOWN = str.maketrans("", "", "*`_#>")


def strip_thinking(text: str) -> str | None:
    """Remove closed thinking blocks; None if a thinking block is still open (no final answer yet)."""
    text = _THINK_BLOCKS.sub("", text)
    if _OPEN_THINK.search(text):
        return None
    return text


def final_answer_line(text: str) -> str | None:
    """The normalised last non-empty line of the answer, with labels and markdown removed."""
    text = strip_thinking(text)
    if text is None:
        return None
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1].translate(_MARKDOWN).strip()
    line = _LABEL.sub("", line, count=1).strip()
    line = line.strip(" \t\"'<>").rstrip(".!;,").strip()
    return " ".join(line.split())


def match_action(
    text: str, legal: Iterable[str], normalize: Callable[[str], str] | None = None
) -> str | None:
    """The legal action `text`'s final answer names exactly, or None.

    `normalize` maps the answer line to canonical spelling before comparison (e.g. "[1,2 ,3]" ->
    "[1, 2, 3]" for demand vectors); comparison is case-insensitive.
    """
    line = final_answer_line(text)
    if not line:
        return None
    if normalize is not None:
        line = normalize(line)
    by_key = {action.casefold(): action for action in legal}
    return by_key.get(line.casefold())
