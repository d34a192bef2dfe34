"""`jsonfast.encoder` gives what `json.JSONEncoder` gives, text and errors, for any value."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_harness.jsonfast import encoder

OPTIONS = [
    {"sort_keys": False, "ensure_ascii": True, "allow_nan": True},
    {"sort_keys": True, "ensure_ascii": False, "allow_nan": True},
    {"sort_keys": False, "ensure_ascii": False, "allow_nan": False},
]

keys = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.booleans(), st.none())
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included
    st.text(),  # lone surrogates included
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        st.dictionaries(keys, inner, max_size=3),  # keys JSON turns into strings
    ),
    max_leaves=12,
)


def outcome(encode: Callable[[Any], str], value: Any) -> str | tuple[str, str]:
    try:
        return encode(value)
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("options", OPTIONS, ids=["ascii", "sorted", "no-nan"])
@given(value=values)
def test_the_text_and_the_errors_are_json_encoders(options: dict[str, Any], value: Any) -> None:
    reference = json.JSONEncoder(separators=(",", ":"), check_circular=False, **options)
    fast = encoder(**options)
    assert outcome(fast, value) == outcome(reference.encode, value)


def test_a_value_of_another_type_goes_to_default() -> None:
    fast = encoder(default=lambda value: sorted(value))
    assert fast({"tags": {"b", "a"}}) == '{"tags":["a","b"]}'
    with pytest.raises(TypeError, match="not JSON serializable"):
        encoder()({"when": object()})


def test_nan_is_an_error_only_when_not_allowed() -> None:
    assert encoder()([math.nan, math.inf]) == "[NaN,Infinity]"
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        encoder(allow_nan=False)([math.nan])


def test_a_cycle_is_a_recursion_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(RecursionError):
        encoder()(cycle)


def test_one_encoder_serves_every_call_after_an_error() -> None:
    """Nothing is left behind by a failed call (the encoder keeps no circular-check markers)."""
    fast = encoder(allow_nan=False)
    shared = {"a": 1}
    with pytest.raises(ValueError):
        fast([shared, math.nan])
    assert fast([shared, shared]) == '[{"a":1},{"a":1}]'
