"""Read a `.hx` archive in memory and check everything (DESIGN §10, §12).

Nothing is extracted and nothing is imported: members are read by name from an allow-list,
with their decompressed bytes counted while reading, so a lying size or a decompression bomb
stops at the limit. `verify_archive` never raises on a malformed archive: every defect is an
`ArchiveIssue` with a code. `playback` raises `ArchiveError` for an invalid archive.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

from pytest_harness.archive.format import (
    ARCHIVE_FORMAT,
    ARCHIVE_VERSION,
    ARTIFACT_MEMBER,
    MANIFEST,
    RECORDS,
    BundleLimits,
    DuplicateKey,
    loads,
    outstanding,
)
from pytest_harness.archive.report import ArchiveIssue, Playback, VerificationReport
from pytest_harness.errors import ArchiveError
from pytest_harness.store.base import JOURNAL_FORMAT
from pytest_harness.tools.artifacts import ARTIFACT_URI

__all__ = ["playback", "replayable_records", "verify_archive"]

_CHUNK = 64 * 1024
_ENDED = frozenset({"completed", "refused", "limited", "failed", "cancelled"})
_STATUSES = _ENDED | {"running", "awaiting_approval", "awaiting_resolution", "paused"}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ARTIFACT_STATUSES = frozenset({"included", "omitted", "missing", "corrupt"})


def _kinds() -> frozenset[str]:
    from pytest_harness.runtime.journal import KINDS

    return KINDS


class _Invalid(Exception):
    """Stop reading: the archive is invalid (the issue is already noted)."""


@dataclass
class _Read:
    """What reading gathered so far."""

    path: str
    limits: BundleLimits
    issues: list[ArchiveIssue] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)

    def issue(self, code: str, message: str, seq: int | None = None) -> None:
        self.issues.append(ArchiveIssue(code=code, message=message, seq=seq))

    def fatal(self, code: str, message: str, seq: int | None = None) -> _Invalid:
        self.issue(code, message, seq)
        return _Invalid()

    def report(self) -> VerificationReport:
        valid = all(issue.affects == "complete" for issue in self.issues)
        return VerificationReport(
            path=self.path,
            valid=valid,
            complete=valid and not self.issues,
            issues=tuple(self.issues),
            manifest=self.manifest,
        )


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

    `ArchiveError` when the file is missing, malformed, or was exported metadata-only.
    """
    shown = os.fspath(path)
    if not Path(shown).is_file():
        raise ArchiveError(f"{shown}: file not found")
    read = playback(path)
    if any(r.get("omitted") for r in read.records):
        raise ArchiveError(
            f"{shown} has no payloads to replay: it was exported metadata-only (the default). "
            "Export the run again with payloads: harness.export(run_id, 'incident.hx', "
            "policy=ExportPolicy(include_payloads=True)), or `pytest-harness export RUN_ID "
            "incident.hx --include-payloads` (`export-incident STORE SESSION_ID RUN_ID "
            "incident.hx --include-payloads` after a crash)"
        )
    return read.records


# -- reading ----------------------------------------------------------------------------------


def _read(source: str | os.PathLike[str] | bytes, limits: BundleLimits) -> _Read:
    shown = "(bytes)" if isinstance(source, bytes) else os.fspath(source)
    read = _Read(path=shown, limits=limits)
    try:
        data = _archive_bytes(source, read)
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = _members(archive, read)
            _contents(archive, members, read)
    except _Invalid:
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


def _archive_bytes(source: str | os.PathLike[str] | bytes, read: _Read) -> bytes:
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


def _members(archive: zipfile.ZipFile, read: _Read) -> dict[str, zipfile.ZipInfo]:
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
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, read: _Read, budget: list[int]
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


def _json(data: bytes, what: str, read: _Read, seq: int | None = None) -> Any:
    try:
        return loads(data.decode("utf-8"))
    except DuplicateKey as exc:
        raise read.fatal("duplicate_key", f"{what}: {exc}", seq) from None
    except UnicodeDecodeError:
        raise read.fatal("bad_json", f"{what} is not UTF-8", seq) from None
    except (ValueError, RecursionError) as exc:
        raise read.fatal("bad_json", f"{what} is not JSON: {exc}", seq) from None


def _contents(archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], read: _Read) -> None:
    budget = [read.limits.max_expanded_bytes]
    manifest = _json(_member(archive, members[MANIFEST], read, budget), MANIFEST, read)
    _check_manifest(manifest, read)
    read.manifest = manifest
    records_bytes = _member(archive, members[RECORDS], read, budget)
    _check_records(records_bytes, manifest, read)
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
    _check_catalogue(manifest, read)
    _check_state(manifest, read)
    _check_complete(manifest, read)


# -- checks -----------------------------------------------------------------------------------


def _want(
    value: Any,
    kind: type | tuple[type, ...],
    what: str,
    read: _Read,
    code: str = "bad_manifest",
    seq: int | None = None,
) -> Any:
    if isinstance(value, bool) and kind in (int, (int, float)):
        raise read.fatal(code, f"{what} must be {_kind_name(kind)}, got {value!r}", seq)
    if not isinstance(value, kind):
        raise read.fatal(code, f"{what} must be {_kind_name(kind)}, got {_short(value)}", seq)
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_manifest(manifest: Any, read: _Read) -> None:
    _want(manifest, dict, "manifest.json", read)
    fmt = manifest.get("format")
    if fmt != ARCHIVE_FORMAT:
        raise read.fatal(
            "bad_manifest", f"manifest format must be {ARCHIVE_FORMAT!r}, got {_short(fmt)}"
        )
    version = manifest.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise read.fatal(
            "bad_manifest", f"manifest version must be an integer, got {_short(version)}"
        )
    if version != ARCHIVE_VERSION:
        newer = "newer than" if version > ARCHIVE_VERSION else "not"
        raise read.fatal(
            "unsupported_version",
            f"the archive is {ARCHIVE_FORMAT}@{version}, {newer} the version this "
            f"pytest-harness reads ({ARCHIVE_FORMAT}@{ARCHIVE_VERSION})"
            + ("; upgrade pytest-harness" if version > ARCHIVE_VERSION else ""),
        )
    for key in ("session_id", "run_id", "task"):
        _want(manifest.get(key), str, f"manifest {key}", read)
    final = _want(manifest.get("final_state"), dict, "manifest final_state", read)
    if final.get("status") not in _STATUSES:
        raise read.fatal(
            "bad_manifest",
            f"manifest final_state.status is {_short(final.get('status'))}, not a run status",
        )
    _want(manifest.get("unresolved"), list, "manifest unresolved", read)
    policy = _want(manifest.get("policy"), dict, "manifest policy", read)
    for key in ("include_payloads", "include_artifacts"):
        _want(policy.get(key), bool, f"manifest policy.{key}", read)
    records = _want(manifest.get("records"), dict, "manifest records", read)
    _want(records.get("count"), int, "manifest records.count", read)
    _want(records.get("bytes"), int, "manifest records.bytes", read)
    sha = _want(records.get("sha256"), str, "manifest records.sha256", read)
    if not _HEX64.match(sha):
        raise read.fatal("bad_manifest", f"manifest records.sha256 is not a SHA-256: {_short(sha)}")
    catalogue = _want(manifest.get("artifacts"), list, "manifest artifacts", read)
    seen: set[str] = set()
    for index, entry in enumerate(catalogue):
        _want(entry, dict, f"manifest artifacts[{index}]", read)
        sha = entry.get("sha256")
        if not isinstance(sha, str) or not _HEX64.match(sha):
            raise read.fatal("bad_manifest", f"manifest artifacts[{index}].sha256 is not a SHA-256")
        if sha in seen:
            raise read.fatal("bad_manifest", f"artifact {sha} is catalogued twice")
        seen.add(sha)
        if entry.get("status") not in _ARTIFACT_STATUSES:
            raise read.fatal(
                "bad_manifest",
                f"artifact {sha} has status {_short(entry.get('status'))} (expected included, "
                "omitted, missing or corrupt)",
            )


_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "seq": int,
    "format": int,
    "session_id": str,
    "run_id": str,
    "step": int,
    "attempt_id": (str, type(None)),
    "ts": (int, float),
    "execution_key": (str, type(None)),
    "kind": str,
    "payload": dict,
    "omitted": bool,
    "redacted": bool,
}


def _check_records(data: bytes, manifest: dict[str, Any], read: _Read) -> None:
    declared = manifest["records"]
    if hashlib.sha256(data).hexdigest() != declared["sha256"] or len(data) != declared["bytes"]:
        raise read.fatal(
            "checksum_mismatch", "records.jsonl does not match its checksum in the manifest"
        )
    if data and not data.endswith(b"\n"):
        raise read.fatal("bad_record", "records.jsonl does not end with a newline")
    lines = data.split(b"\n")[:-1] if data else []
    limit = read.limits.max_records
    if len(lines) > limit:
        raise read.fatal(
            "too_many_records", f"{len(lines)} records, over BundleLimits.max_records={limit}"
        )
    if len(lines) != declared["count"]:
        raise read.fatal(
            "checksum_mismatch",
            f"records.jsonl holds {len(lines)} records; the manifest says {declared['count']}",
        )
    kinds = _kinds()
    ids: set[str] = set()
    for index, line in enumerate(lines, start=1):
        record = _json(line, f"record {index} of records.jsonl", read, index)
        _want(record, dict, f"record {index}", read, "bad_record", index)
        for key, kind in _RECORD_FIELDS.items():
            _want(record.get(key), kind, f"record {index} field {key!r}", read, "bad_record", index)
        unknown = set(record) - set(_RECORD_FIELDS)
        if unknown:
            raise read.fatal(
                "bad_record", f"record {index} has unknown fields {sorted(unknown)}", index
            )
        if record["format"] != JOURNAL_FORMAT:
            raise read.fatal(
                "unsupported_version",
                f"record {index} is journal format {record['format']}; this pytest-harness "
                f"reads format {JOURNAL_FORMAT}",
                index,
            )
        if record["seq"] != index:
            raise read.fatal(
                "sequence_gap",
                f"record {index} has seq {record['seq']}: the sequence must run 1, 2, 3, … "
                "without gaps",
                index,
            )
        if record["run_id"] != manifest["run_id"]:
            raise read.fatal(
                "mixed_run_ids",
                f"record {index} belongs to run {_short(record['run_id'])}, not "
                f"{manifest['run_id']}",
                index,
            )
        if record["session_id"] != manifest["session_id"]:
            raise read.fatal(
                "mixed_session_ids",
                f"record {index} belongs to session {_short(record['session_id'])}, not "
                f"{manifest['session_id']}",
                index,
            )
        if record["kind"] not in kinds:
            raise read.fatal(
                "bad_record", f"record {index} has unknown kind {_short(record['kind'])}", index
            )
        if record["id"] in ids:
            raise read.fatal(
                "bad_record", f"record {index} repeats the id of an earlier record", index
            )
        ids.add(record["id"])
        read.records.append(record)


def _check_catalogue(manifest: dict[str, Any], read: _Read) -> None:
    catalogue = {entry["sha256"]: entry for entry in manifest["artifacts"]}
    for sha in read.artifacts:
        entry = catalogue.get(sha)
        if entry is None or entry["status"] != "included":
            raise read.fatal(
                "artifact_not_catalogued", f"artifact member {sha} is not catalogued as included"
            )
    for sha, entry in catalogue.items():
        if entry["status"] == "included" and sha not in read.artifacts:
            raise read.fatal(
                "missing_member", f"artifact {sha} is catalogued as included but absent"
            )
    for record in read.records:
        if record["omitted"]:
            continue
        for match in ARTIFACT_URI.finditer(_text(record["payload"])):
            if match.group(1) not in catalogue:
                raise read.fatal(
                    "artifact_not_catalogued",
                    f"record {record['seq']} refers to artifact {match.group(1)}, which the "
                    "manifest does not catalogue",
                    record["seq"],
                )


def _text(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def _check_state(manifest: dict[str, Any], read: _Read) -> None:
    status = manifest["final_state"]["status"]
    checkpoints = [r for r in read.records if r["kind"] == "checkpoint"]
    if status != "running" and read.records:
        last = checkpoints[-1]["payload"].get("status") if checkpoints else None
        if last != status:
            raise read.fatal(
                "final_state_mismatch",
                f"the manifest says the run is {status}, but its last checkpoint record says "
                f"{_short(last)}",
            )
    computed = [(u["kind"], u["attempt_id"], u["execution_key"]) for u in outstanding(read.records)]
    declared = [
        (u.get("kind"), u.get("attempt_id"), u.get("execution_key"))
        for u in manifest["unresolved"]
        if isinstance(u, dict)
    ]
    if computed != declared or len(declared) != len(manifest["unresolved"]):
        raise read.fatal(
            "unresolved_mismatch",
            "the manifest's unresolved attempts do not match the records",
        )


def _check_complete(manifest: dict[str, Any], read: _Read) -> None:
    records = read.records
    if not records or records[0]["kind"] != "run.started":
        read.issue(
            "initial_record_missing", "the first record is not run.started", 1 if records else None
        )
    omitted = sum(1 for r in records if r["omitted"])
    if omitted:
        read.issue(
            "payloads_omitted",
            f"{omitted} of {len(records)} payloads are omitted (exported metadata-only; export "
            "with include_payloads=True for a complete archive)",
        )
    redacted = [r["seq"] for r in records if r["redacted"] and not r["omitted"]]
    if redacted:
        read.issue(
            "payload_redacted",
            f"{len(redacted)} payloads were redacted on export (first: record {redacted[0]})",
            redacted[0],
        )
    for entry in manifest["artifacts"]:
        status = entry["status"]
        if status != "included":
            read.issue(f"artifact_{status}", f"artifact {entry['sha256']} is {status}")
    status = manifest["final_state"]["status"]
    if status not in _ENDED:
        read.issue("not_terminal", f"the run had not ended when it was exported: it was {status}")
    for attempt in outstanding(records):
        what = (
            f"model attempt {attempt['attempt_id']}"
            if attempt["kind"] == "model"
            else f"tool attempt {attempt['attempt_id']} (execution key {attempt['execution_key']})"
        )
        read.issue(
            "outstanding_attempt",
            f"{what} started at record {attempt['seq']} and has no outcome",
            attempt["seq"],
        )
