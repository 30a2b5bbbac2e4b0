"""JSON messages from WebSockets, parsed without letting a client exhaust the parser.

Python's json module recurses once per nested array or object, so a message of a few kilobytes
nested two thousand deep raises RecursionError (and took the socket down without a close code).
`loads` counts the nesting first, in one pass over the text, and refuses beyond `max_depth`.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32


class BadMessage(ValueError):
    """A message that is not JSON, or nested deeper than the limit."""


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets in strings skipped)."""
    deepest = level = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The message's JSON value; BadMessage when it is not JSON or nests beyond `max_depth`."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise BadMessage("the message is not UTF-8 text") from None
    if depth(text) > max_depth:
        raise BadMessage(f"the message nests deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadMessage(f"the message is not JSON: {exc.msg}") from None
