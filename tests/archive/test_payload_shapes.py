"""Archives whose record payloads have the wrong shape: `verify` only vouches for the records'
frame, so loading one for a replay checks what the replay will play back (as a golden file is
checked), and `playback` shows what is there. Nothing raises but a `HarnessError`."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_harness as ph
from pytest_harness.cli_archive import summary

from .conftest import make_archives
from .test_hostile import edit

Path_ = tuple[str | int, ...]
DELETE = object()


@pytest.fixture
def made(app, tmp_path: Path) -> tuple[Path, bytes]:
    """The spec of a run approved after a lookup and a refund, and its archive's bytes."""
    paths = asyncio.run(make_archives(app, tmp_path / "out"))
    return app.spec, paths["full"].read_bytes()


def records(data: bytes) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    edit(data, records=lambda rows: kept.extend(rows) or rows)
    return kept


def paths(value: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every path inside a JSON value, the value's own included."""
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from paths(inner, (*prefix, i))


def mutated(data: bytes, seq: int, path: Path_, value: Any) -> bytes:
    """The archive with record `seq`'s payload at `path` replaced by `value` (or deleted)."""

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        row = next(r for r in rows if r["seq"] == seq)
        if not path:
            row["payload"] = value
            return rows
        node = row["payload"]
        for part in path[:-1]:
            node = node[part]
        if value is DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return rows

    return edit(data, records=change)


async def replayed(spec: Path, archive: Path) -> ph.ReplayReport | ph.HarnessError:
    """The replay of `archive` (loaded as a recording), or the typed error on the way."""
    try:
        recording = ph.Recording.load(archive)
        async with ph.load(spec) as harness:
            return await harness.replay(recording)
    except ph.HarnessError as exc:
        return exc


def check(spec: Path, archive: Path) -> ph.ReplayReport | ph.HarnessError:
    """Every reader of the archive gives an answer or a typed error; the replay's is returned."""
    report = ph.verify_archive(archive)
    if report.valid:
        for record in ph.playback(archive).records:
            assert isinstance(summary(record), str)
    outcome = asyncio.run(replayed(spec, archive))
    if isinstance(outcome, ph.ReplayReport):  # no Python error hidden as the run's failure
        error = outcome.replayed.error or {}
        assert error.get("type") not in {"TypeError", "KeyError", "AttributeError", "ValueError"}
    return outcome


BROKEN = {
    "an answer that is text": ("model.response", ("answer",), ""),
    "an answer that is a list": ("model.response", ("answer",), []),
    "calls that are text": ("model.response", ("answer", "calls"), "x"),
    "a call without a name": ("model.response", ("answer", "calls", 0, "name"), DELETE),
    "token counts that are not numbers": (
        "model.response",
        ("answer", "usage", "input_tokens"),
        {},
    ),
    "text that is a boolean": ("model.response", ("answer", "text"), True),
    "request parts that are text": ("model.started", ("parts",), ""),
    "an outcome of no shape": ("tool.returned", ("outcome",), {}),
    "ok that is a number": ("tool.returned", ("outcome", "ok"), 0),
    "ok that is null": ("tool.returned", ("outcome", "ok"), None),
    "a tool name that is null": ("tool.returned", ("name",), None),
    "args that are text": ("tool.returned", ("args",), "x"),
    "an empty principal id": ("run.started", ("principal", "id"), ""),
    "an input that is null": ("run.started", ("input",), None),
    "a task that is a mapping": ("run.started", ("task",), {}),
    "a history that is text": ("run.started", ("history",), "x"),
    "approver roles that are numbers": ("tool.resolved", ("approver", "roles"), [1]),
    "an approver that is a number": ("tool.resolved", ("approver",), 0),
    "a trace that is text": ("checkpoint", ("trace",), "x"),
    "a decision without a step": ("checkpoint", ("trace", 0, "step"), DELETE),
    "an output that is a number": ("checkpoint", ("output",), 0),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_payload_a_replay_cannot_play_back_is_an_archive_error(
    made: tuple[Path, bytes], tmp_path: Path, case: str
) -> None:
    spec, data = made
    kind, path, value = BROKEN[case]
    rows = records(data)
    # the last record of the kind that has the path: the final checkpoint is the one read
    seq = max(r["seq"] for r in rows if r["kind"] == kind and path in set(paths(r["payload"])))
    archive = tmp_path / "broken.hx"
    archive.write_bytes(mutated(data, seq, path, value))
    assert ph.verify_archive(archive).valid  # the frame is sound: only the payload is wrong
    with pytest.raises(ph.ArchiveError, match="its records do not make a recording") as info:
        ph.Recording.load(archive)
    assert str(archive) in str(info.value)
    assert isinstance(check(spec, archive), ph.ArchiveError)


def test_the_error_names_the_key_and_the_value(made: tuple[Path, bytes], tmp_path: Path) -> None:
    _, data = made
    seq = next(r["seq"] for r in records(data) if r["kind"] == "tool.returned")
    archive = tmp_path / "broken.hx"
    archive.write_bytes(mutated(data, seq, ("outcome", "ok"), 0))
    with pytest.raises(ph.ArchiveError) as info:
        ph.Recording.load(archive)
    assert re.fullmatch(
        re.escape(f"{archive}: its records do not make a recording: ")
        + r"tool_results\[\d\]\.outcome\.ok: expected true or false, got 0",
        str(info.value),
    )


def test_playback_shows_payloads_of_any_shape(made: tuple[Path, bytes]) -> None:
    _, data = made
    for record in records(data):
        for bad in ("x", -1, True, [1], {"a": 1}, None):
            for path in list(paths(record["payload"]))[:12]:
                if not path:
                    shown = summary({**record, "payload": bad})
                else:
                    payload = json.loads(json.dumps(record["payload"]))
                    node = payload
                    for part in path[:-1]:
                        node = node[part]
                    node[path[-1]] = bad
                    shown = summary({**record, "payload": payload})
                assert isinstance(shown, str) and len(shown) <= 100


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "x", "ok", "A-1"]),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_payload_edit_gives_a_report_or_a_typed_error(
    made: tuple[Path, bytes], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    spec, raw = made
    rows = [r for r in records(raw) if isinstance(r.get("payload"), dict)]
    row = data.draw(st.sampled_from(rows))
    path = data.draw(st.sampled_from(list(paths(row["payload"]))))
    value = data.draw(st.just(DELETE) | JSON) if path else data.draw(JSON)
    archive = tmp_path_factory.mktemp("mutant") / "mutant.hx"
    archive.write_bytes(mutated(raw, row["seq"], path, value))
    outcome = check(spec, archive)
    assert isinstance(outcome, ph.ReplayReport | ph.HarnessError)
