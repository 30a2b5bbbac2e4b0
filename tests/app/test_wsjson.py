"""Bounded JSON parsing of WebSocket messages."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashscope.app.middleware.wsjson import BadMessage, depth, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=20,
)


def _depth(v) -> int:
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    return 0


@given(values)
def test_depth_counts_nesting_and_skips_brackets_in_strings(v):
    text = json.dumps(v)
    assert depth(text) == _depth(v)
    assert loads(text, max_depth=max(1, _depth(v))) == v


def test_deep_messages_are_refused_before_parsing():
    bomb = "[" * 2000 + "]" * 2000
    with pytest.raises(BadMessage, match="deeper than 32"):
        loads(bomb)
    with pytest.raises(BadMessage, match="not JSON"):
        loads('{"type": ')
    with pytest.raises(BadMessage, match="UTF-8"):
        loads(b"\xff\xfe")
