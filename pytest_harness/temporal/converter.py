"""The data converter of the harness's Temporal clients and workers: JSON in the order built.

Temporal's default JSON payload converter writes every mapping with its keys sorted, so what a
run's workflow is handed (its input, each activity's answer) and hands back (its result) came
back in alphabetical order, and a golden file written from a Temporal run differed in key order
from the local golden of the same run. This converter writes mappings in the order they were
built; the payloads stay compact `json/plain` (any Temporal SDK reads them, and a worker or a
client of an earlier version decodes them as before). Every other encoding is the default's.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

__all__ = ["DATA_CONVERTER", "InOrderPayloadConverter"]


class _InOrderJSON(JSONPlainPayloadConverter):
    """`json/plain` with each mapping's keys in the order they were built (not sorted)."""

    def to_payload(self, value: Any) -> Payload | None:
        """The value as compact JSON text; what JSON cannot hold raises, as the default's."""
        text = json.dumps(value, cls=AdvancedJSONEncoder, separators=(",", ":"))
        return Payload(metadata={"encoding": self.encoding.encode()}, data=text.encode())


class InOrderPayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converters, with `_InOrderJSON` for JSON values."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _InOrderJSON() if isinstance(each, JSONPlainPayloadConverter) else each
                for each in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = dataclasses.replace(
    DataConverter.default, payload_converter_class=InOrderPayloadConverter
)
"""What `temporal.client.connect` gives its clients (and so the workers built on them)."""
