"""Prompts of the FMSP loops (generate, repair, judge) and strict parsing of the FM's answers.

The paper's exact prompts are not public in any source we could read (see the FMSP note); these follow its
described structure: context = a member of each population, their head-to-head score and the member's
nearest neighbours; the judge follows the ACD pattern with a final "Decision: Yes/No" line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from fmsp.archive import ArchiveEntry

SYSTEM = ("You are an expert in game theory, control and algorithms who writes game-playing policies as "
          "self-contained Python code. Follow the requested answer format exactly.")  # fmt: skip

ANSWER_FORMAT = """Answer in exactly this format:
NAME: <a short unique snake_case name>
DESCRIPTION: <one sentence: the idea of the policy>
```python
<the complete code: imports and ONE policy class>
```"""

JUDGE_SYSTEM = "You are a strict reviewer of game-playing algorithms. You judge ideas, not surface details."


def _show(entry: ArchiveEntry, max_chars: int) -> str:
    code = entry.code if len(entry.code) <= max_chars else entry.code[:max_chars] + "\n# ...[truncated]"
    return f"### {entry.name} ({entry.side})\n{entry.description}\n```python\n{code}\n```"


@dataclass(frozen=True)
class Context:
    """What the generator sees: own-side member, opponent member, their head-to-head score, neighbours."""

    own: ArchiveEntry | None
    opponent: ArchiveEntry | None
    own_score: float | None  # score of `own` against `opponent`, in [0, 1]
    neighbours: list[ArchiveEntry]


# What each variant asks for (the paper: vFMSP refines its one incumbent; NSSP and QDSP ask for a policy
# distinct from everything in the context; the open-loop baseline sees no archive and no result at all).
_INSTRUCTIONS = {
    "vfmsp": ("Write an IMPROVED version of the incumbent {side} policy shown first: it must score higher than the "
              "incumbent against the opponent. Keep what works, fix what loses, or change the approach entirely."),
    "nssp": ("Write a NEW {side} policy that is conceptually distinct from every policy above and that you "
             "expect to score well against the opponent. Think about which idea is missing."),
    "open_loop": "Write a {side} policy that you expect to score well.",
}  # fmt: skip
_INSTRUCTIONS["qdsp"] = _INSTRUCTIONS["nssp"]


def generation_messages(task: str, side: str, context: Context, variant: str,
                        max_code_chars: int = 3000) -> list[dict[str, str]]:  # fmt: skip
    """The generation request: the domain's task, the context (what `variant` may see) and its instruction."""
    if variant not in _INSTRUCTIONS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(_INSTRUCTIONS)}")
    parts = [task, ""]
    own_label = "The incumbent" if variant == "vfmsp" else "A current"
    if context.own is not None:
        parts.append(f"{own_label} {side} policy from the archive:\n{_show(context.own, max_code_chars)}")
    if context.opponent is not None:
        parts.append(f"A current opponent policy:\n{_show(context.opponent, max_code_chars)}")
    if context.own_score is not None and context.own is not None and context.opponent is not None:
        parts.append(f"Head-to-head: {context.own.name} scored {context.own_score:.3f} (in [0, 1], higher is "
                     f"better for it) against {context.opponent.name}.")  # fmt: skip
    if context.neighbours:
        shown = "\n\n".join(_show(n, max_code_chars) for n in context.neighbours)
        parts.append(f"Other {side} policies similar to the first one:\n{shown}")
    parts.append(f"{_INSTRUCTIONS[variant].format(side=side)}\n{ANSWER_FORMAT}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def repair_messages(previous: list[dict[str, str]], answer: str, error: str) -> list[dict[str, str]]:
    """Continue the conversation with the failing answer and the test error (Reflexion-style repair)."""
    feedback = (f"Your policy failed the unit tests:\n```\n{error[-3000:]}\n```\nFix the bug and answer with the "
                f"complete corrected code.\n{ANSWER_FORMAT}")  # fmt: skip
    return [*previous, {"role": "assistant", "content": answer}, {"role": "user", "content": feedback}]


def judge_messages(candidate: ArchiveEntry, neighbours: list[ArchiveEntry], max_code_chars: int = 3000) -> list[dict[str, str]]:
    shown = "\n\n".join(_show(n, max_code_chars) for n in neighbours)
    user = (f"Archived policies most similar to a new one:\n{shown}\n\nThe new policy:\n"
            f"{_show(candidate, max_code_chars)}\n\nIs the new policy a genuinely novel strategy, i.e. does it "
            f"implement an idea that none of the archived policies implements (not just different constants, "
            f"names or code style)? Explain briefly, then end with a final line that is exactly "
            f"'Decision: Yes' or 'Decision: No'.")  # fmt: skip
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


_DECISION = re.compile(r"^\W*decision\W*:\W*(yes|no)\W*$", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True/False from the last non-empty line 'Decision: Yes|No' (markdown allowed); None if unparseable."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    match = _DECISION.match(lines[-1])
    return None if match is None else match.group(1).lower() == "yes"


@dataclass(frozen=True)
class ParsedPolicy:
    name: str | None
    description: str | None
    code: str


# An opening fence line: ``` plus an optional info string ("python", "Python", "python3", "py", ...); the closing
# ``` ends a line. Blocks labelled with another language (bash, text, json, ...) are never policies.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)```[ \t]*$", re.DOTALL | re.MULTILINE)
_PYTHON_TAGS = ("", "python", "python3", "py", "py3")
_FIELD = re.compile(r"^\s*\**(NAME|DESCRIPTION)\**\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_CODE_START = re.compile(r"^(?:import|from|class)\b", re.MULTILINE)


class AnswerFormatError(ValueError):
    """The FM's answer holds no code; the message is fed back to it."""


def defines_class(code: str) -> bool:
    """Whether `code` defines a class at top level (by its syntax tree, or a `class` line if it does not parse:
    a policy with a syntax error is still the policy, and the unit test reports the error for repair)."""
    try:
        return any(isinstance(node, ast.ClassDef) for node in ast.parse(code).body)
    except (SyntaxError, ValueError):
        return re.search(r"^class\s+\w+", code, re.MULTILINE) is not None


def _unfenced_code(text: str) -> str | None:
    """Code written without a closing fence (cut off, or never fenced): from the first import/class line on,
    minus an opening fence line and trailing prose lines that stop it from parsing."""
    text = re.sub(r"^[ \t]*```[^\n]*\n", "", text, count=1, flags=re.MULTILINE)
    start = _CODE_START.search(text)
    if start is None or not defines_class(text[start.start():]):
        return None
    lines = text[start.start():].rstrip().splitlines()
    for end in range(len(lines), max(0, len(lines) - 20), -1):
        candidate = "\n".join(lines[:end]).rstrip() + "\n"
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        if defines_class(candidate):
            return candidate
    return "\n".join(lines) + "\n"


def parse_policy_answer(text: str) -> ParsedPolicy:
    """The policy code of an answer plus its NAME/DESCRIPTION lines when present.

    The code is the last fenced Python (or unlabelled) block that defines a class, so a trailing usage example
    or a first draft before the final version are not taken; without such a block, the last Python block;
    without any fence, the code from the first import/class line on. CRLF line ends are accepted.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = [code for tag, code in _FENCE.findall(text) if tag.lower() in _PYTHON_TAGS and code.strip()]
    policies = [code for code in blocks if defines_class(code)]
    code = policies[-1] if policies else blocks[-1] if blocks else _unfenced_code(text)
    if code is None:
        raise AnswerFormatError("the answer contains no Python code block defining the policy class")
    fields = {key.upper(): value for key, value in _FIELD.findall(text.split("```")[0])}
    return ParsedPolicy(name=fields.get("NAME"), description=fields.get("DESCRIPTION"), code=code)
