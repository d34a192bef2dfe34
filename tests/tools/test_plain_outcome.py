"""A tool result of JSON's own types is copied and written without pydantic_core, identically."""

from __future__ import annotations

import dataclasses
import math
import random
import struct
from typing import Any

import pytest
from pydantic_core import to_json, to_jsonable_python

from pytest_harness.tools.outcome import ToolOutcome, _finite

RESULTS: list[Any] = [
    {"order_id": "A-1001", "amount": 250.0, "idempotency_key": "k"},
    {"a": [1, True, None, "x", 2.5, -0.0, 0.0001, 1e15], "b": {}, "c": []},
    [],
    0,
    -(2**70),
    2**64,
    True,
    None,
    1e16,
    1e-5,
    float("nan"),
    float("inf"),
    ["".join(chr(i) for i in range(0x250)) + '\u2028\U0001f600/\\"'],
    {"s": "a\ud800"},
    {1: "int key"},
    ("a", "tuple"),
    {"nested": ("t",)},
    {"set": {1}},
    {
        "deep": [
            [
                [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            "x"
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            ]
        ]
    },
    [float(i) / 7 for i in range(-50, 50)],
]


def through_pydantic(result: Any) -> tuple[Any, str]:
    try:
        value = _finite(to_jsonable_python(result, fallback=repr))
        return value, to_json(value).decode()
    except Exception:
        return repr(result), repr(result)


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: repr(r)[:40])
def test_an_outcome_is_what_pydantic_core_writes(result: Any) -> None:
    outcome = ToolOutcome.success(result)
    value, text = through_pydantic(result)
    assert same(outcome.value, value)
    assert outcome.text == text


def test_random_floats_are_written_as_pydantic_core_writes_them() -> None:
    rng = random.Random(13)
    bits = [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(3000)]
    floats = bits + [rng.uniform(-1e6, 1e6) for _ in range(3000)] + [rng.random() / 1e3]
    assert ToolOutcome.success(floats).text == through_pydantic(floats)[1]


def test_the_value_is_a_copy() -> None:
    result: dict[str, Any] = {"items": [1, 2]}
    outcome = ToolOutcome.success(result)
    result["items"].append(3)
    assert outcome.value == {"items": [1, 2]}


def test_a_dataclass_still_goes_through_pydantic_core() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    assert ToolOutcome.success(Point(1)).value == {"x": 1}
