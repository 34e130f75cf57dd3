"""`safe_text`: the one way untrusted text (a policy's exception message, traceback or prints, a manifest's
description, an FM's answer) is shown on a terminal or written to a log.

Control characters are escaped (`\\x1b`, `\\r`, `\\u202e`, ...), so carriage returns, ANSI escape sequences and
bidirectional overrides cannot hide lines, move the cursor or fake a verdict; the length is capped. In
`multiline` mode newlines and tabs are kept (tracebacks stay readable); otherwise they are escaped too, so one
message is one line.
"""

from __future__ import annotations

import re
from typing import Any

# C0 and C1 controls, DEL, and the invisible or reordering format characters (zero-width, bidi marks and
# overrides, line/paragraph separators, BOM, interlinear annotations); lone surrogates too.
_UNSAFE = r"\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff"
_ONE_LINE = re.compile(f"[\\t\\n{_UNSAFE}]")
_MULTILINE = re.compile(f"[{_UNSAFE}]")
DEFAULT_LIMIT = 2000


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(value: Any, limit: int = DEFAULT_LIMIT, multiline: bool = False) -> str:
    """`value` (a str; anything else is shown by its type name only) with control characters escaped and at
    most `limit` characters of the escaped text kept (then "...[truncated]")."""
    if not isinstance(value, str):
        return "" if value is None else f"<{type(value).__name__}>"
    text = value[: 4 * limit + 16]  # escaping grows a character to at most 6; no need to scan the rest
    text = (_MULTILINE if multiline else _ONE_LINE).sub(_escape, text)
    if len(text) > limit or len(value) > 4 * limit + 16:
        return text[:limit] + "...[truncated]"
    return text
