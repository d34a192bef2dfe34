"""`runtime.ids`: what `uuid.uuid4()` would print, with version 4 and the RFC 4122 variant."""

from __future__ import annotations

import re
import uuid

from pytest_harness.runtime.ids import uuid4_hex, uuid4_text


def test_hex_ids_are_version_4_uuids_and_differ() -> None:
    seen = {uuid4_hex() for _ in range(2000)}
    assert len(seen) == 2000
    for text in seen:
        assert re.fullmatch(r"[0-9a-f]{32}", text)
        parsed = uuid.UUID(hex=text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert parsed.hex == text


def test_every_variant_nibble_appears() -> None:
    assert {uuid4_hex()[16] for _ in range(2000)} == set("89ab")


def test_text_ids_have_the_dashed_form_of_str_uuid4() -> None:
    for _ in range(200):
        text = uuid4_text()
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
