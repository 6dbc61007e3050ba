"""Text from untrusted sources, made safe to print on a terminal.

An MCP server's descriptions, progress messages, errors and questions, a model's tool
arguments and a tool's output are all written by someone else. Printed as they are, their
escape sequences act on the person's terminal: clear the screen, retitle the window (OSC),
rewrite the line an approval prompt stands on (`\\r`, cursor moves), reverse the order in which
text reads (bidi overrides), or on some terminals answer back into the input. `visible()` shows
every such character as an escape (`\\x1b`, `\\u202e`) instead, so the text is still readable
and nothing in it is interpreted.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, the C1 controls (0x9b is a one-byte CSI), and the
# invisible characters that change how text around them reads: bidi embeddings, overrides and
# isolates, directional marks, the line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                          "\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, limit: int | None = None, *, one_line: bool = False) -> str:
    """`text` with every character that acts on a terminal shown as an escape.

    `one_line` escapes newlines and tabs too (a field of a listing); `limit` cuts the result to
    that many characters with an ellipsis (a server's text has no size bound of its own).
    """
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit]
        cut = True
    else:
        cut = False
    text = (_UNSAFE_LINE if one_line else _UNSAFE).sub(_shown, text)
    if limit is not None and len(text) > limit:  # escapes grew it
        text, cut = text[:limit], True
    return text + "…" if cut else text


# --- colour --------------------------------------------------------------------------------
_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
          "magenta": "35", "cyan": "36"}


def colour_on(stream: object) -> bool:
    """Whether to colour what goes to `stream`: a terminal only, never with NO_COLOR set (to
    anything, https://no-color.org) or TERM=dumb."""
    import os

    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def paint(text: str, *styles: str, stream: object = None) -> str:
    """`text` in the given styles (red, green, yellow, cyan, dim, bold, ...) when `stream`
    (default stderr) is a terminal that takes colour; unchanged otherwise."""
    import sys

    if not styles or not colour_on(sys.stderr if stream is None else stream):
        return text
    return f"\033[{';'.join(_CODES[s] for s in styles)}m{text}\033[0m"
