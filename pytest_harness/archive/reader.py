"""Read a `.hx` archive in memory and check everything (DESIGN §10, §12).

Nothing is extracted and nothing is imported: members are read by name from an allow-list,
with their decompressed bytes counted while reading, so a lying size or a decompression bomb
stops at the limit. `verify_archive` never raises on a malformed archive: every defect is an
`ArchiveIssue` with a code. `playback` raises `ArchiveError` for an invalid archive.

This module reads the ZIP (member names and headers, sizes, decompression); `archive.checks`
checks what the members hold.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Mapping
from io import BytesIO
from pathlib import Path
from typing import Any

from pytest_harness.archive.checks import (
    ArchiveRead,
    Invalid,
    check_catalogue,
    check_complete,
    check_manifest,
    check_records,
    check_state,
    decode_json,
    metadata_only,
    omitted_why,
)
from pytest_harness.archive.format import ARTIFACT_MEMBER, MANIFEST, RECORDS, BundleLimits
from pytest_harness.archive.report import Playback, VerificationReport
from pytest_harness.errors import ArchiveError

__all__ = ["playback", "replayable_records", "verify_archive"]

_CHUNK = 64 * 1024


def verify_archive(
    path: str | os.PathLike[str] | bytes, *, limits: BundleLimits | None = None
) -> VerificationReport:
    """Check a `.hx` archive; never raises on malformed input (issues say what is wrong)."""
    return _read(path, limits or BundleLimits()).report()


def playback(
    path: str | os.PathLike[str] | bytes, *, limits: BundleLimits | None = None
) -> Playback:
    """Read a valid archive: manifest, ordered records, report, included artifact bytes.

    `ArchiveError` naming the file and its first defects when the archive is invalid. Nothing
    is executed: no model, tool or code from the archive runs.
    """
    read = _read(path, limits or BundleLimits())
    report = read.report()
    if not report.valid or read.manifest is None:
        problems = "; ".join(
            f"{i.code}: {i.message}" for i in report.issues if i.affects == "valid"
        )
        raise ArchiveError(f"{read.path}: not a valid .hx archive: {problems}")
    return Playback(
        manifest=read.manifest,
        records=tuple(read.records),
        report=report,
        artifacts=dict(read.artifacts),
    )


def replayable_records(path: str | os.PathLike[str]) -> tuple[Mapping[str, Any], ...]:
    """The records of an archive exported with payloads, for `Recording.from_archive`.

    `ArchiveError` when the file is missing, malformed, or was exported metadata-only, or
    when the export policy's redact hook omitted any payload.
    """
    shown = os.fspath(path)
    if not Path(shown).is_file():
        raise ArchiveError(f"{shown}: file not found")
    read = playback(path)
    omitted = [r["seq"] for r in read.records if r.get("omitted")]
    if omitted and metadata_only(read.manifest):
        raise ArchiveError(
            f"{shown} has no payloads to replay: it was exported metadata-only (the default). "
            "Export the run again with payloads: harness.export(run_id, 'incident.hx', "
            "policy=ExportPolicy(include_payloads=True)), or `pytest-harness export RUN_ID "
            "incident.hx --include-payloads` (`export-incident STORE SESSION_ID RUN_ID "
            "incident.hx --include-payloads` after a crash)"
        )
    if omitted:
        raise ArchiveError(
            f"{shown} cannot be replayed: {len(omitted)} of its {len(read.records)} payloads "
            f"are {omitted_why(read.manifest)} (first: record {omitted[0]}); a replay needs "
            "every payload: export the run again with a redact hook that keeps them"
        )
    return read.records


# -- reading ----------------------------------------------------------------------------------


def _read(source: str | os.PathLike[str] | bytes, limits: BundleLimits) -> ArchiveRead:
    shown = "(bytes)" if isinstance(source, bytes) else os.fspath(source)
    read = ArchiveRead(path=shown, limits=limits)
    try:
        data = _archive_bytes(source, read)
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = _members(archive, read)
            _contents(archive, members, read)
    except Invalid:
        pass
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        read.issue("bad_zip", f"not a readable ZIP archive: {exc}")
    except (
        OSError,
        EOFError,
        ValueError,
        NotImplementedError,
        RuntimeError,
        OverflowError,
        zlib.error,
    ) as exc:
        read.issue("bad_zip", f"not a readable ZIP archive: {type(exc).__name__}: {exc}")
    return read


def _archive_bytes(source: str | os.PathLike[str] | bytes, read: ArchiveRead) -> bytes:
    limit = read.limits.max_archive_bytes
    if isinstance(source, bytes):
        data = source
    else:
        try:
            with open(source, "rb") as stream:
                data = stream.read(limit + 1)
        except OSError as exc:
            raise read.fatal(
                "unreadable", f"cannot read {read.path}: {exc.strerror or exc}"
            ) from None
    if len(data) > limit:
        raise read.fatal(
            "archive_too_large",
            f"the archive is over BundleLimits.max_archive_bytes={limit} bytes",
        )
    return data


def _members(archive: zipfile.ZipFile, read: ArchiveRead) -> dict[str, zipfile.ZipInfo]:
    """Check every member's name and header before reading anything."""
    limits = read.limits
    infos = archive.infolist()
    if len(infos) > limits.max_members:
        raise read.fatal(
            "too_many_members",
            f"{len(infos)} members, over BundleLimits.max_members={limits.max_members}",
        )
    members: dict[str, zipfile.ZipInfo] = {}
    declared = 0
    for info in infos:
        name = info.orig_filename
        if (
            "\x00" in name
            or "\\" in name
            or name.startswith("/")
            or re.match(r"^[A-Za-z]:", name)
            or ".." in name.split("/")
        ):
            raise read.fatal("unsafe_member_name", f"member name {name!r} is not a safe path")
        if name in members:
            raise read.fatal("duplicate_member", f"member {name!r} appears more than once")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise read.fatal("symlink_member", f"member {name!r} is a symbolic link")
        if info.flag_bits & 0x1:
            raise read.fatal("encrypted_member", f"member {name!r} is encrypted")
        if name not in (MANIFEST, RECORDS) and not ARTIFACT_MEMBER.match(name):
            raise read.fatal(
                "unknown_member",
                f"member {name!r} is not part of the format (manifest.json, records.jsonl, "
                "artifacts/<sha256>)",
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise read.fatal(
                "unsupported_compression",
                f"member {name!r} uses compression method {info.compress_type}",
            )
        if info.file_size > limits.max_member_bytes:
            raise read.fatal(
                "member_too_large",
                f"member {name!r} declares {info.file_size} bytes, over "
                f"BundleLimits.max_member_bytes={limits.max_member_bytes}",
            )
        declared += info.file_size
        members[name] = info
    if declared > limits.max_expanded_bytes:
        raise read.fatal(
            "expanded_too_large",
            f"the members declare {declared} bytes, over "
            f"BundleLimits.max_expanded_bytes={limits.max_expanded_bytes}",
        )
    for required in (MANIFEST, RECORDS):
        if required not in members:
            raise read.fatal("missing_member", f"the archive has no {required}")
    return members


def _member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, read: ArchiveRead, budget: list[int]
) -> bytes:
    """Read one member, counting decompressed bytes against the limits as they come."""
    limit = min(read.limits.max_member_bytes, budget[0])
    which = "max_member_bytes" if limit == read.limits.max_member_bytes else "max_expanded_bytes"
    chunks: list[bytes] = []
    total = 0
    name = info.orig_filename
    try:
        with archive.open(info) as stream:
            while True:
                chunk = stream.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise read.fatal(
                        "member_too_large",
                        f"member {name!r} expands past {limit} bytes (BundleLimits.{which})",
                    )
                chunks.append(chunk)
    except zipfile.BadZipFile as exc:
        code = "crc_mismatch" if "CRC" in str(exc) else "bad_zip"
        raise read.fatal(code, f"member {name!r}: {exc}") from None
    except (OSError, EOFError, ValueError, RuntimeError, NotImplementedError, zlib.error) as exc:
        raise read.fatal("bad_zip", f"member {name!r}: {type(exc).__name__}: {exc}") from None
    if total != info.file_size:
        raise read.fatal(
            "size_mismatch",
            f"member {name!r} declares {info.file_size} bytes but holds {total}",
        )
    budget[0] -= total
    return b"".join(chunks)


def _contents(
    archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], read: ArchiveRead
) -> None:
    budget = [read.limits.max_expanded_bytes]
    manifest = decode_json(_member(archive, members[MANIFEST], read, budget), MANIFEST, read)
    check_manifest(manifest, read)
    read.manifest = manifest
    records_bytes = _member(archive, members[RECORDS], read, budget)
    check_records(records_bytes, manifest, read)
    for name, info in members.items():
        match = ARTIFACT_MEMBER.match(name)
        if match is None:
            continue
        data = _member(archive, info, read, budget)
        sha = match.group(1)
        if hashlib.sha256(data).hexdigest() != sha:
            raise read.fatal(
                "checksum_mismatch", f"artifact member {name!r} does not hash to its name"
            )
        read.artifacts[sha] = data
    check_catalogue(manifest, read)
    check_state(manifest, read)
    check_complete(manifest, read)
