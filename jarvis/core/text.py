"""Text that is not valid Unicode: lone surrogates.

A Python string can hold a lone surrogate (U+D800-U+DFFF): JSON's `"\\udc80"` escape decodes
to one, and so does a command-line argument with a byte that is not UTF-8 (Python decodes
argv with surrogateescape: byte 0x80 becomes U+DC80). Such a string cannot be encoded as
UTF-8: SQLite, an HTTP body or a terminal refuse it with a UnicodeEncodeError. So:

- what a person or a model sends (a question, tool-call arguments) is refused with a message
  naming the character and where it is (`problem`, `find_problem`);
- what is stored (the run log) has each one escaped as the six characters `\\udc80`
  (`escape`), and says how many were;
- what a server answers has each one replaced by U+FFFD (`replace`).
"""

from __future__ import annotations

import re
from typing import Any

_LONE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
# Nested values are walked up to this many items (arguments are bounded before this).
MAX_ITEMS = 100_000


def has_lone_surrogate(text: str) -> bool:
    return _LONE.search(text) is not None


def describe(char: str) -> str:
    """'U+DC80, a lone surrogate (...)' for one lone surrogate."""
    code = ord(char)
    return (f"U+{code:04X}, a lone surrogate (half of a UTF-16 pair: an unpaired "
            f"\"\\u{code:04x}\" escape, or a byte that is not UTF-8)")


def problem(text: Any, what: str) -> str | None:
    """Why `text` (a string) is not valid Unicode text, naming `what` it is; None if it is."""
    if not isinstance(text, str):
        return None
    match = _LONE.search(text)
    if match is None:
        return None
    return (f"{what} is not valid Unicode text: character {match.start() + 1} is "
            f"{describe(match.group())}; send it as UTF-8 text")


def find_problem(value: Any, what: str) -> str | None:
    """problem() for the first string in a nested value (keys too), naming where it is:
    `arguments for think: "thought" is not valid Unicode text: ...`."""
    stack: list[tuple[str, Any]] = [("", value)]
    seen = 0
    while stack and seen < MAX_ITEMS:
        where, item = stack.pop()
        seen += 1
        if isinstance(item, str):
            found = problem(item, f'{what}: "{where}"' if where else what)
            if found:
                return found
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                # The path is shown: its own lone surrogates escaped (the message must be
                # sendable as UTF-8 itself).
                shown = escape(str(key))[0]
                name = f"{where}.{shown}" if where else shown
                if isinstance(key, str) and _LONE.search(key):
                    return problem(key, f'{what}: the name "{name}"')
                stack.append((name, inner))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", inner) for i, inner in reversed(list(enumerate(item))))
    return None


def escape(value: Any) -> tuple[Any, int]:
    """`value` with every lone surrogate in its strings (keys too) written as the six
    characters `\\udc80`, and how many there were. Other values are returned as they are."""
    count = 0

    def text(item: str) -> str:
        nonlocal count
        if not _LONE.search(item):
            return item

        def one(match: re.Match[str]) -> str:
            nonlocal count
            count += 1
            return f"\\u{ord(match.group()):04x}"

        return _LONE.sub(one, item)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return text(item)
        if isinstance(item, dict):
            return {text(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return item

    return walk(value), count


def replace(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (for what a server sends)."""
    return _LONE.sub(REPLACEMENT, text) if _LONE.search(text) else text


def ask_problem(query: str, system: str | None, history: Any) -> str | None:
    """Why an ask's question, system prompt or history is not valid Unicode text (a lone
    surrogate), or None."""
    found = problem(query, "the question") or problem(system, "the system prompt")
    for i, message in enumerate(history or ()):
        found = found or find_problem(getattr(message, "content", None),
                                      f"message {i + 1} of the history")
    return found
