"""`runtime.ids`: what `uuid.uuid4()` would print, with version 4 and the RFC 4122 variant."""

from __future__ import annotations

import os
import re
import sys
import uuid

import pytest

from pytest_harness.runtime import ids
from pytest_harness.runtime.ids import unique_text, uuid4_hex, uuid4_text


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


def test_unique_ids_have_the_form_of_str_uuid4_and_never_repeat() -> None:
    seen = [unique_text() for _ in range(5000)]
    assert len(set(seen)) == len(seen)
    for text in seen[:200]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)


def test_unique_ids_draw_a_new_prefix_when_the_count_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix, _ = ids._drawn
    monkeypatch.setattr(ids, "_drawn", (prefix, iter([(1 << 48) - 1, 1 << 48])))
    last = unique_text()
    assert last == f"{prefix}ffffffffffff"
    following = unique_text()
    assert not following.startswith(prefix)
    assert uuid.UUID(following).version == 4


@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
def test_a_forked_child_draws_its_own_prefix() -> None:
    unique_text()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, unique_text().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child[:24] != unique_text()[:24]


def test_ids_drawn_past_one_pool_stay_version_4_uuids() -> None:
    drawn = [uuid4_hex() for _ in range(3 * ids._POOL + 1)]
    assert len(set(drawn)) == len(drawn)
    assert {uuid.UUID(hex=text).version for text in drawn} == {4}


@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
def test_a_forked_child_draws_its_own_random_ids() -> None:
    uuid4_hex()  # the parent's pool holds ids not given yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, uuid4_hex().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child != uuid4_hex()
