"""`encode_json`, the one encoding every store writes: the C encoder made once, as `json` does."""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import Any

import pytest

from pytest_harness.errors import StoreError
from pytest_harness.store.helpers import _json_default, encode_json

VALUES: list[Any] = [
    {"a": 1, "b": [1, 2.5, "é", None, True], "c": {"d": 'x\n"y"'}},
    "text",
    3,
    1e-7,
    (1, (2, 3)),
    [],
    {},
    {1: "int key", 2.5: "float key", None: "null key"},
    MappingProxyType({"k": MappingProxyType({"z": 1})}),
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_text_is_the_json_encoders(value: Any) -> None:
    reference = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_json_default
    )
    assert encode_json(value, "v") == reference.encode(value)
    assert json.loads(encode_json(value, "v")) == json.loads(
        json.dumps(value, default=dict, separators=(",", ":"))
    )


def test_what_json_cannot_hold_is_a_store_error_naming_it() -> None:
    circular: list[Any] = []
    circular.append(circular)
    for bad, says in [
        (math.nan, "Out of range float values"),
        ({"a": object()}, "Object of type object is not JSON serializable"),
        ({(1, 2): 1}, "keys must be str"),
        (circular, "circular or nested too deep"),
        ({"text": "a\udc80b"}, "surrogates not allowed"),  # a lone surrogate is no UTF-8
    ]:
        with pytest.raises(StoreError, match="cannot store the state of run r") as caught:
            encode_json(bad, "the state of run r")
        assert says in str(caught.value)
        assert "nothing was written" in str(caught.value)
    # the encoder keeps nothing from a failed call
    assert encode_json({"a": [1]}, "v") == '{"a":[1]}'
