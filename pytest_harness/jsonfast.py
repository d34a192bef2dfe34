"""JSON encoders made once: the text of `json.JSONEncoder(...).encode`, without its set-up per call.

`JSONEncoder.encode` builds a new C encoder (`json.encoder.c_make_encoder`) for every value it
encodes, which costs about as much as encoding a small mapping. A run encodes some forty values
(its checkpoints, events and journal payloads) and digests its model requests in canonical JSON;
`encoder` builds the C encoder once and keeps it.

Such an encoder does no circular check (`check_circular=False`): it keeps no state between
calls, so it can be shared, and a cycle ends in `RecursionError`, as nesting too deep does.
Every caller here encodes values that are its own or were read from JSON or YAML, or catches
`RecursionError` with the other encoding errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["encoder"]


def encoder(
    *,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    allow_nan: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> Callable[[Any], str]:
    """What `json.JSONEncoder` with these options encodes, as a function made once.

    The encoder's separators are compact (`","`, `":"`) and it has no circular check. Where
    this Python has no C encoder (or one with another signature), it is that
    `JSONEncoder`'s own `encode`.
    """
    fallback = json.JSONEncoder(
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        allow_nan=allow_nan,
        default=default,
        separators=(",", ":"),
        check_circular=False,
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    strings = (
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    )
    try:
        c_encode = make(  # type: ignore[misc]
            None, fallback.default, strings, None, ":", ",", sort_keys, False, allow_nan
        )
        sample = {"b": [1.5, None, "é"], "a": True}
        if "".join(c_encode(sample, 0)) != fallback.encode(sample) or _nan(
            lambda: "".join(c_encode([float("nan")], 0))
        ) != _nan(lambda: fallback.encode([float("nan")])):
            return fallback.encode
    except TypeError:  # no C encoder, or another signature
        return fallback.encode

    def encode(value: Any) -> str:
        return "".join(c_encode(value, 0))

    return encode


def _nan(encode: Callable[[], str]) -> str:
    """What encoding a NaN gives: its text, or the error's type."""
    try:
        return encode()
    except ValueError as exc:
        return type(exc).__name__
