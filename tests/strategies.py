"""Hypothesis strategies shared by the property tests of the loaders of untrusted input."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_like(words: list[str]) -> st.SearchStrategy[Any]:
    """Nested lists and mappings of JSON-like leaves, with `words` as strings and as keys.

    Integers beyond 64 bits, NaN and infinities are in: a loader must take them or refuse them.
    """
    leaf = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from(words)
        | st.text(max_size=20)
    )
    return st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=5)
            | st.dictionaries(st.sampled_from(words) | st.text(max_size=8), inner, max_size=6)
        ),
        max_leaves=30,
    )
