"""The manifest's format and spec (DESIGN §12 Format v1), and archives written the earlier way.

New archives say `format: pytest-harness/archive@1` and name the spec the run was started with.
Archives are evidence: those written by earlier builds (`format: pytest-harness/archive` with
`version: 1`, no spec; kept in `legacy_v1/`) still verify, play back and replay. Any other
format or version is refused, naming the archive's and the one this build reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph

from .conftest import SCRIPT, SPEC

LEGACY = Path(__file__).parent / "legacy_v1"
"""Archives written by the exporter before the format said `@1` (commit 143c1c2): the refund
flow of `conftest.make_archives`, with payloads and metadata-only."""


def manifest_of(path: Path | bytes) -> dict[str, Any]:
    source = io.BytesIO(path) if isinstance(path, bytes) else path
    with zipfile.ZipFile(source) as archive:
        data: dict[str, Any] = json.loads(archive.read("manifest.json"))
    return data


def with_manifest(data: bytes, change: Any) -> bytes:
    """The archive `data` with its manifest changed by `change(manifest)`."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(i.filename, archive.read(i)) for i in archive.infolist()]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, body in members:
            if name == "manifest.json":
                manifest = json.loads(body)
                change(manifest)
                body = json.dumps(manifest).encode()
            archive.writestr(name, body)
    return buffer.getvalue()


def test_a_new_archive_says_its_format_and_names_the_spec_it_ran(app, archives) -> None:
    async def digest() -> tuple[str, str]:
        async with ph.load(app.spec) as harness:
            return harness.spec.document.name, harness.spec.digest

    name, spec_digest = asyncio.run(digest())
    for which in ("full", "meta"):
        manifest = manifest_of(archives[which])
        assert manifest["format"] == "pytest-harness/archive@1"
        assert "version" not in manifest
        assert manifest["spec"] == {"name": name, "digest": spec_digest, "source": "run.started"}
        assert ph.verify_archive(archives[which]).valid


def test_without_a_run_started_record_the_exporting_harness_names_the_spec(
    app, tmp_path: Path
) -> None:
    """A journal without `run.started`: the exporting harness's spec, said to be so; from a
    bare store (`export_incident`), no spec at all."""
    from pytest_harness.archive.export import export_run

    class NoStart:
        def __init__(self, store: Any) -> None:
            self._store = store

        def __getattr__(self, name: str) -> Any:
            return getattr(self._store, name)

        async def journal(self, run_id: str) -> list[Any]:
            kept = [e for e in await self._store.journal(run_id) if e.kind != "run.started"]
            return [dataclasses.replace(e, seq=seq) for seq, e in enumerate(kept, 1)]

    async def go() -> tuple[Path, Path, str]:
        paths = await make(app, tmp_path / "a")
        run_id = str(paths["run_id"])
        async with ph.load(app.spec) as harness:
            record = await harness.store.get_run(run_id)
            store: Any = NoStart(harness.store)
            by_harness = await export_run(store, record, tmp_path / "h.hx", spec=harness.spec)
            bare = await export_run(store, record, tmp_path / "b.hx")
            return by_harness, bare, harness.spec.digest

    by_harness, bare, spec_digest = asyncio.run(go())
    assert manifest_of(by_harness)["spec"] == {
        "name": "test-app",
        "digest": spec_digest,
        "source": "harness",
    }
    assert manifest_of(bare)["spec"] == {"name": None, "digest": None, "source": None}
    for path in (by_harness, bare):
        report = ph.verify_archive(path)
        assert report.valid and "initial_record_missing" in {i.code for i in report.issues}


async def make(app: Any, folder: Path) -> dict[str, Path]:
    from .conftest import make_archives

    return await make_archives(app, folder)


@pytest.mark.parametrize("name", ["refund-payloads.hx", "refund-metadata.hx"])
def test_an_archive_of_the_earlier_format_still_verifies_and_plays_back(name: str) -> None:
    path = LEGACY / name
    manifest = manifest_of(path)
    assert (manifest["format"], manifest["version"]) == ("pytest-harness/archive", 1)
    assert "spec" not in manifest
    report = ph.verify_archive(path)
    assert report.valid, report.issues
    played = ph.playback(path)
    assert played.manifest["run_id"] == manifest["run_id"]
    assert [r["kind"] for r in played.records][:2] == ["run.started", "model.started"]


def test_an_archive_of_the_earlier_format_replays(app) -> None:
    app.write(SPEC.format())
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {SCRIPT}", 1))
    path = LEGACY / "refund-payloads.hx"
    recording = ph.Recording.load(path)
    assert recording.task == "orders" and recording.status == "completed"

    async def replay() -> ph.ReplayReport:
        async with ph.load(app.spec) as harness:
            return await harness.replay(str(path))

    report = asyncio.run(replay())
    assert report.same, report.render()


def _legacy(version: Any) -> Any:
    def change(manifest: dict[str, Any]) -> None:
        manifest["format"] = "pytest-harness/archive"
        manifest["version"] = version

    return change


def _format(value: Any) -> Any:
    def change(manifest: dict[str, Any]) -> None:
        manifest["format"] = value

    return change


def _both(manifest: dict[str, Any]) -> None:
    manifest["version"] = 2


@pytest.mark.parametrize(
    ("change", "code", "shown"),
    [
        (_format("pytest-harness/archive@2"), "unsupported_version", "pytest-harness/archive@2'"),
        (_format("pytest-harness/archive@0"), "unsupported_version", "pytest-harness/archive@0'"),
        (_legacy(2), "unsupported_version", "pytest-harness/archive with version 2;"),
        (_legacy("1"), "bad_manifest", "pytest-harness/archive with version '1';"),
        (_format("pytest-harness/recording@2"), "bad_manifest", "'pytest-harness/recording@2'"),
        (_format(None), "bad_manifest", "format is None;"),
        (_both, "bad_manifest", "archive@1 and version 2 disagree"),
    ],
)
def test_another_format_or_version_is_refused_naming_both(
    archives, change: Any, code: str, shown: str
) -> None:
    data = with_manifest(archives["full"].read_bytes(), change)
    report = ph.verify_archive(data)
    assert not report.valid
    (issue,) = report.issues
    assert issue.code == code and shown in issue.message, issue.message
    if "disagree" not in shown:
        assert "this pytest-harness reads pytest-harness/archive@1" in issue.message
    with pytest.raises(ph.ArchiveError, match=r"not a valid \.hx archive"):
        ph.playback(data)


def test_a_newer_format_says_to_upgrade(archives) -> None:
    data = with_manifest(archives["full"].read_bytes(), _format("pytest-harness/archive@2"))
    (issue,) = ph.verify_archive(data).issues
    assert issue.message.endswith("upgrade pytest-harness")


def test_a_spec_the_records_contradict_is_invalid(archives) -> None:
    def change(manifest: dict[str, Any]) -> None:
        manifest["spec"]["digest"] = "0" * 64

    report = ph.verify_archive(with_manifest(archives["full"].read_bytes(), change))
    assert not report.valid
    assert [i.code for i in report.issues if i.affects == "valid"] == ["spec_mismatch"]


def test_a_manifest_of_the_new_format_must_name_the_spec(archives) -> None:
    report = ph.verify_archive(
        with_manifest(archives["full"].read_bytes(), lambda m: m.pop("spec"))
    )
    assert not report.valid and "manifest spec must be an object" in report.issues[0].message
