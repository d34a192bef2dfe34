"""The checks of a `.hx` archive's content once its members are read (DESIGN §12).

`ArchiveRead` gathers what reading finds: the manifest, the records, the artifact bytes and
every `ArchiveIssue`. A defect that makes the archive invalid is noted and stops the reading
(`raise read.fatal(...)`); one that only makes it incomplete is noted and reading goes on.
The checks: the manifest's shape and version, each record's fields, sequence and run, the
artifact catalogue against the members and the records, the final state and outstanding
attempts against the records, and completeness (payloads, redaction, artifacts, ended run).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_harness.archive.format import (
    ARCHIVE_FORMAT,
    ARCHIVE_NAME,
    ARCHIVE_VERSION,
    BundleLimits,
    DuplicateKey,
    loads,
    outstanding,
)
from pytest_harness.archive.report import ArchiveIssue, VerificationReport
from pytest_harness.store.base import JOURNAL_FORMAT
from pytest_harness.tools.artifacts import ARTIFACT_URI

__all__ = [
    "ArchiveRead",
    "Invalid",
    "check_catalogue",
    "check_complete",
    "check_manifest",
    "check_records",
    "check_state",
    "decode_json",
    "metadata_only",
    "omitted_why",
]

_ENDED = frozenset({"completed", "refused", "limited", "failed", "cancelled"})
_STATUSES = _ENDED | {"running", "awaiting_approval", "awaiting_resolution", "paused"}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ARTIFACT_STATUSES = frozenset({"included", "omitted", "missing", "corrupt"})


def _kinds() -> frozenset[str]:
    from pytest_harness.runtime.journal import KINDS

    return KINDS


class Invalid(Exception):
    """Stop reading: the archive is invalid (the issue is already noted)."""


@dataclass
class ArchiveRead:
    """What reading gathered so far."""

    path: str
    limits: BundleLimits
    issues: list[ArchiveIssue] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)

    def issue(self, code: str, message: str, seq: int | None = None) -> None:
        """Note a defect; reading goes on."""
        self.issues.append(ArchiveIssue(code=code, message=message, seq=seq))

    def fatal(self, code: str, message: str, seq: int | None = None) -> Invalid:
        """Note a defect that makes the archive invalid; the caller raises what it returns."""
        self.issue(code, message, seq)
        return Invalid()

    def report(self) -> VerificationReport:
        """The `VerificationReport` of what was found."""
        valid = all(issue.affects == "complete" for issue in self.issues)
        return VerificationReport(
            path=self.path,
            valid=valid,
            complete=valid and not self.issues,
            issues=tuple(self.issues),
            manifest=self.manifest,
        )


def decode_json(data: bytes, what: str, read: ArchiveRead, seq: int | None = None) -> Any:
    """Decode `data` as strict JSON (duplicate keys refused); a fatal issue when it is not."""
    try:
        return loads(data.decode("utf-8"))
    except DuplicateKey as exc:
        raise read.fatal("duplicate_key", f"{what}: {exc}", seq) from None
    except UnicodeDecodeError:
        raise read.fatal("bad_json", f"{what} is not UTF-8", seq) from None
    except (ValueError, RecursionError) as exc:
        raise read.fatal("bad_json", f"{what} is not JSON: {exc}", seq) from None


# -- checks -----------------------------------------------------------------------------------


def _want(
    value: Any,
    kind: type | tuple[type, ...],
    what: str,
    read: ArchiveRead,
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


def check_manifest(manifest: Any, read: ArchiveRead) -> None:
    """Check the manifest's shape, format, version, final state, policy and catalogue."""
    _want(manifest, dict, "manifest.json", read)
    _check_format(manifest, read)
    for key in ("session_id", "run_id", "task"):
        _want(manifest.get(key), str, f"manifest {key}", read)
    if "spec" in manifest or manifest["format"] == ARCHIVE_FORMAT:
        spec = _want(manifest.get("spec"), dict, "manifest spec", read)
        for key in ("name", "digest", "source"):
            _want(spec.get(key), (str, type(None)), f"manifest spec.{key}", read)
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


_FORMAT = re.compile(r"^" + re.escape(ARCHIVE_NAME) + r"@([0-9]{1,9})$")


def _check_format(manifest: dict[str, Any], read: ArchiveRead) -> None:
    """Accept format version 1, in either spelling; refuse any other, naming both.

    `format: pytest-harness/archive@1`, or, as earlier builds wrote it, `format:
    pytest-harness/archive` with `version: 1` (archives are evidence: old ones still verify).
    """
    fmt = manifest.get("format")
    version: Any = manifest.get("version")
    if fmt == ARCHIVE_NAME:  # the earlier spelling: the version in a key of its own
        shown = f"{ARCHIVE_NAME} with version {_short(version)}"
        known = type(version) is int
    else:
        match = _FORMAT.match(fmt) if isinstance(fmt, str) else None
        shown = _short(fmt)
        known = match is not None
        if match is not None:
            if "version" in manifest and (type(version) is not int or version != int(match[1])):
                raise read.fatal(
                    "bad_manifest", f"manifest format {fmt} and version {_short(version)} disagree"
                )
            version = int(match[1])
    if known and version == ARCHIVE_VERSION:
        return
    newer = known and version > ARCHIVE_VERSION
    raise read.fatal(
        "unsupported_version" if known else "bad_manifest",
        f"the archive's format is {shown}; this pytest-harness reads {ARCHIVE_FORMAT} (and "
        f"{ARCHIVE_NAME} with version {ARCHIVE_VERSION}, as earlier builds wrote it)"
        + ("; the archive is newer: upgrade pytest-harness" if newer else ""),
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


def check_records(data: bytes, manifest: dict[str, Any], read: ArchiveRead) -> None:
    """Check `records.jsonl` against the manifest and gather its records into `read`."""
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
        record = decode_json(line, f"record {index} of records.jsonl", read, index)
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


def check_catalogue(manifest: dict[str, Any], read: ArchiveRead) -> None:
    """Check the artifact catalogue against the artifact members and the records' URIs."""
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


def check_state(manifest: dict[str, Any], read: ArchiveRead) -> None:
    """Check the manifest's spec, final status and unresolved attempts against the records."""
    spec = manifest.get("spec")
    started = read.records[0] if read.records else None
    if (
        isinstance(spec, dict)
        and spec.get("source") == "run.started"
        and started is not None
        and started["kind"] == "run.started"
        and not started["omitted"]
        and not started["redacted"]
    ):
        recorded = (started["payload"].get("spec"), started["payload"].get("spec_digest"))
        if recorded != (spec.get("name"), spec.get("digest")):
            raise read.fatal(
                "spec_mismatch",
                f"the manifest names spec {_short(spec.get('name'))} "
                f"({_short(spec.get('digest'))}), but the run.started record says "
                f"{_short(recorded[0])} ({_short(recorded[1])})",
                1,
            )
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


def metadata_only(manifest: Mapping[str, Any]) -> bool:
    """Whether the archive was exported without payloads (its manifest's policy says so)."""
    policy = manifest.get("policy")
    return not (isinstance(policy, Mapping) and policy.get("include_payloads") is True)


def omitted_why(manifest: Mapping[str, Any]) -> str:
    """Why an archive's payloads are omitted, from its manifest's policy.

    Exported metadata-only (the default), or exported with payloads and omitted by the
    policy's `redact` hook (it returned None for them).
    """
    if metadata_only(manifest):
        return (
            "omitted (exported metadata-only; export with include_payloads=True for a "
            "complete archive)"
        )
    if manifest["policy"].get("redact"):
        return "omitted by the export policy's redact hook (it returned None for them)"
    return "omitted, though the export policy included payloads and had no redact hook"


def check_complete(manifest: dict[str, Any], read: ArchiveRead) -> None:
    """Note what makes a valid archive incomplete (these issues never make it invalid)."""
    records = read.records
    if not records or records[0]["kind"] != "run.started":
        read.issue(
            "initial_record_missing", "the first record is not run.started", 1 if records else None
        )
    omitted = [r["seq"] for r in records if r["omitted"]]
    if omitted:
        why, seq = omitted_why(manifest), None
        if why != "metadata-only":
            why, seq = f"{why} (first: record {omitted[0]})", omitted[0]
        read.issue("payloads_omitted", f"{len(omitted)} of {len(records)} payloads are {why}", seq)
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
