"""Hostile archives, built here: every one is rejected (`valid=False`, `ArchiveError`), nothing
is written to disk, and no reading raises anything but typed errors (hypothesis)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_harness as ph

Members = list[tuple[str, bytes]]


def unzip(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(i.filename, archive.read(i)) for i in archive.infolist()]


def rezip(members: Members, *, attr: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with (
        warnings.catch_warnings(),  # duplicate names are the point of some cases
        zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive,
    ):
        warnings.simplefilter("ignore")
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (attr or {}).get(name, 0o100600 << 16)
            archive.writestr(info, data)
    return buffer.getvalue()


def edit(data: bytes, *, records=None, manifest=None, fix: bool = True) -> bytes:
    """Change records.jsonl (a function of its list of dicts) and/or the manifest, and
    recompute the records checksum so the intended check is the one that fails."""
    members = dict(unzip(data))
    rows = [json.loads(line) for line in members["records.jsonl"].splitlines()]
    text = members["records.jsonl"]
    if records is not None:
        rows = records(rows)
        text = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    meta = json.loads(members["manifest.json"])
    if fix:
        meta["records"] = {
            "count": len(rows),
            "bytes": len(text),
            "sha256": hashlib.sha256(text).hexdigest(),
        }
    if manifest is not None:
        manifest(meta)
    members["records.jsonl"] = text
    members["manifest.json"] = json.dumps(meta).encode()
    return rezip(list(members.items()))


def patch_central(data: bytes, name: str, offset: int, fmt: str, value: int) -> bytes:
    """Overwrite a field of `name`'s central directory header."""
    raw = bytearray(data)
    start = 0
    while True:
        at = raw.index(b"PK\x01\x02", start)
        length = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + length] == name.encode():
            struct.pack_into(fmt, raw, at + offset, value)
            return bytes(raw)
        start = at + 4


def rename(data: bytes, old: str, new: bytes) -> bytes:
    assert len(old.encode()) == len(new)
    return data.replace(old.encode(), new)


def with_member(data: bytes, name: str, body: bytes, **attr: int) -> bytes:
    return rezip([*unzip(data), (name, body)], attr={name: attr["mode"]} if attr else None)


def dup_manifest_key(data: bytes) -> bytes:
    members = dict(unzip(data))
    text = members["manifest.json"].decode()
    members["manifest.json"] = text.replace('"task":', '"task": "x", "task":', 1).encode()
    return rezip(list(members.items()))


def bomb(data: bytes) -> bytes:
    zeros = b"\0" * (3 * 1024 * 1024)
    sha = hashlib.sha256(zeros).hexdigest()
    return patch_central(
        with_member(data, f"artifacts/{sha}", zeros), f"artifacts/{sha}", 24, "<I", 10
    )


def honest_bomb(data: bytes) -> bytes:
    zeros = b"\0" * (3 * 1024 * 1024)
    return with_member(data, f"artifacts/{hashlib.sha256(zeros).hexdigest()}", zeros)


def records_mixed(rows: list[dict]) -> list[dict]:
    rows[3]["run_id"] = "run_" + "0" * 32
    return rows


def records_gap(rows: list[dict]) -> list[dict]:
    del rows[4]
    return rows


def future(meta: dict) -> None:
    meta["format"] = "pytest-harness/archive@2"


def wrong_status(meta: dict) -> None:
    meta["final_state"]["status"] = "failed"


CORPUS: dict[str, tuple[Callable[[bytes], bytes], set[str]]] = {
    "zip-slip": (lambda d: with_member(d, "../evil.txt", b"x"), {"unsafe_member_name"}),
    "absolute name": (lambda d: with_member(d, "/etc/evil", b"x"), {"unsafe_member_name"}),
    "backslash name": (lambda d: with_member(d, "artifacts\\evil", b"x"), {"unsafe_member_name"}),
    "NUL in a name": (
        lambda d: rename(
            with_member(d, "artifacts/evilXtxt", b"x"), "artifacts/evilXtxt", b"artifacts/evil\0txt"
        ),
        {"unsafe_member_name"},
    ),
    "symlink member": (
        lambda d: with_member(d, "artifacts/" + "a" * 64, b"/etc/passwd", mode=0o120777 << 16),
        {"symlink_member"},
    ),
    "duplicate names": (lambda d: rezip([*unzip(d), unzip(d)[0]]), {"duplicate_member"}),
    "duplicate JSON keys": (dup_manifest_key, {"duplicate_key"}),
    "encrypted flag": (
        lambda d: patch_central(d, "records.jsonl", 8, "<H", 1),
        {"encrypted_member"},
    ),
    "lying size": (
        lambda d: patch_central(d, "records.jsonl", 24, "<I", 7),
        {"size_mismatch", "crc_mismatch"},
    ),
    "decompression bomb (lying size)": (bomb, {"size_mismatch", "crc_mismatch"}),
    "decompression bomb": (honest_bomb, {"member_too_large"}),
    "seq gap": (lambda d: edit(d, records=records_gap), {"sequence_gap"}),
    "mixed run ids": (lambda d: edit(d, records=records_mixed), {"mixed_run_ids"}),
    "wrong checksum": (
        lambda d: edit(d, records=lambda r: r[:-1], fix=False),
        {"checksum_mismatch"},
    ),
    "future version": (lambda d: edit(d, manifest=future), {"unsupported_version"}),
    "unknown member": (lambda d: with_member(d, "run.py", b"import os"), {"unknown_member"}),
    "final state lies": (lambda d: edit(d, manifest=wrong_status), {"final_state_mismatch"}),
    "not a zip": (lambda d: b"PK\x03\x04" + d[4:40], {"bad_zip"}),
}


@pytest.fixture(scope="module")
def valid_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    import asyncio
    import sys
    import uuid

    from ..conftest import TOOLS, App
    from .conftest import make_archives

    root = tmp_path_factory.mktemp("app")
    module = f"apptools_{uuid.uuid4().hex[:12]}"
    (root / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    try:
        paths = asyncio.run(make_archives(App(root, module), root / "out"))
    finally:
        sys.modules.pop(module, None)
        while str(root) in sys.path:
            sys.path.remove(str(root))
    return paths["full"].read_bytes()


def test_the_untouched_archive_is_valid(valid_bytes: bytes) -> None:
    report = ph.verify_archive(valid_bytes)
    assert report.valid, report.issues


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_the_hostile_corpus_is_rejected_and_nothing_is_written(
    valid_bytes: bytes, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build, codes = CORPUS[case]
    hostile = tmp_path / "hostile.hx"
    hostile.write_bytes(build(valid_bytes))
    monkeypatch.chdir(tmp_path)
    limits = ph.BundleLimits(max_member_bytes=2 * 1024 * 1024)
    before = sorted(os.walk(tmp_path))
    report = ph.verify_archive(hostile, limits=limits)
    assert not report.valid and not report.complete
    assert {i.code for i in report.issues if i.affects == "valid"} & codes, report.issues
    with pytest.raises(ph.ArchiveError, match=r"not a valid \.hx archive"):
        ph.playback(hostile, limits=limits)
    with pytest.raises(ph.ArchiveError):
        ph.Recording.load(hostile)
    assert sorted(os.walk(tmp_path)) == before
    assert not Path("/tmp/evil.txt").exists()


def test_the_corpus_table(valid_bytes: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for case, (build, _) in sorted(CORPUS.items()):
        report = ph.verify_archive(
            build(valid_bytes), limits=ph.BundleLimits(max_member_bytes=2 * 1024 * 1024)
        )
        rows.append((case, report.valid, ",".join(sorted({i.code for i in report.issues}))))
    assert all(not valid for _, valid, _ in rows)
    with capsys.disabled():
        print(f"\nhostile corpus: {len(rows)} archives, {sum(not v for _, v, _ in rows)} rejected")
        for case, valid, codes in rows:
            print(f"  {case:22} valid={valid!s:5} {codes}")


# -- hypothesis: typed errors only -------------------------------------------------------------

NAMES = st.sampled_from(
    [
        "manifest.json",
        "records.jsonl",
        "artifacts/" + "0" * 64,
        "../x",
        "/abs",
        "a\\b",
        "artifacts/",
        "records.jsonl",
    ]
) | st.text(min_size=1, max_size=20).filter(lambda name: name.split("\x00")[0] != "")
# (zipfile cuts a name at its first NUL, and an empty name cannot be written: such names are
# built by hand in the corpus above)


def _checked(data: bytes) -> None:
    report = ph.verify_archive(data)
    assert isinstance(report.valid, bool)
    try:
        ph.playback(data)
    except ph.ArchiveError:
        assert not report.valid
    else:
        assert report.valid


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=2000))
def test_random_bytes_are_an_invalid_archive(data: bytes) -> None:
    _checked(data)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(NAMES, st.binary(max_size=300)), max_size=5))
def test_random_zips_give_typed_answers(members: Members) -> None:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")
        for name, data in members:
            archive.writestr(name, data)
    _checked(buffer.getvalue())


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_flipped_bytes_of_a_valid_archive_give_typed_answers(
    valid_bytes: bytes, data: st.DataObject
) -> None:
    raw = bytearray(valid_bytes)
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), min_size=1, max_size=8
        )
    )
    for index, value in flips:
        raw[index] = value
    _checked(bytes(raw))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_edited_records_give_typed_answers(valid_bytes: bytes, data: st.DataObject) -> None:
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=6,
    )
    field = data.draw(
        st.sampled_from(
            ["seq", "run_id", "kind", "payload", "format", "attempt_id", "id", "omitted", "ts"]
        )
    )
    value = data.draw(json_values)
    index = data.draw(st.integers(0, 5))

    def change(rows: list[dict]) -> list[dict]:
        rows[index][field] = value
        return rows

    _checked(edit(valid_bytes, records=change))
