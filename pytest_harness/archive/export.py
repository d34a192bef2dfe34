"""Export a recorded run's journal as a `.hx` archive, from a harness or from a bare store.

`export_incident(store, session_id, run_id, dest)` needs no spec and runs nothing: after a
crash, open the store (`open_store`) and export what its journal holds. By default the archive
is metadata only (payloads marked omitted, no artifact bytes); payloads and artifacts each need
their own flag. With payloads, the policy's `redact(kind, payload)` runs on a copy of each
payload (None omits it), then credential redaction (`pytest_harness.redaction`) always runs
(the model declarations of `run.started` kept as golden files keep them: redacted, with the
digests of what redaction hid of their options, `recording.kept`); a record that either
changed says `redacted: true`.
"""

from __future__ import annotations

import copy
import hashlib
import os
import platform
import tempfile
import time
import zipfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_harness.archive.format import (
    ARCHIVE_FORMAT,
    MANIFEST,
    RECORDS,
    BundleLimits,
    artifact_member,
    dumps,
    outstanding,
)
from pytest_harness.errors import ArchiveError, HarnessError, RecordingError, StoreError
from pytest_harness.redaction import redact as redact_credentials
from pytest_harness.store.base import JournalEntry, RunRecord, Store
from pytest_harness.tools.artifacts import ARTIFACT_URI

if TYPE_CHECKING:
    from pytest_harness.spec.spec import Spec

__all__ = ["ExportPolicy", "export_incident", "export_run", "open_store"]

Redactor = Callable[[str, dict[str, Any]], "dict[str, Any] | None"]

_KEPT_WHEN_OMITTED = ("model", "name", "tool", "event", "status", "how", "decision")
"""Identifiers a metadata-only record keeps, so its timeline still reads."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportPolicy:
    """What an export includes. Default: metadata only.

    `include_payloads` keeps each record's payload (after `redact` and credential
    redaction); `include_artifacts` adds the bytes of every artifact the exported payloads
    refer to; `redact(kind, payload) -> payload | None` runs on a copy first (None omits
    that payload); `limits` bound the archive (an export over one fails, naming it).
    """

    include_payloads: bool = False
    include_artifacts: bool = False
    redact: Redactor | None = None
    limits: BundleLimits = field(default_factory=BundleLimits)


@asynccontextmanager
async def open_store(path_or_url: str | os.PathLike[str]) -> AsyncIterator[Store]:
    """Open an existing store for export, without loading a spec (use it with `async with`).

    A path is a sqlite file (it must exist: opening never creates an empty store); a
    `postgresql://` URL (`?schema=` names the schema, default `harness`) opens the Postgres
    store (the `postgres` extra; the password from `$PGPASSWORD` or a `.pgpass`) without
    creating or migrating anything. The store is closed on exit. `StoreError` when there is
    nothing to open (no such file, no store in that schema, a store of another version).
    """
    text = os.fspath(path_or_url)
    store: Store
    if text.startswith(("postgresql://", "postgres://")):
        from pytest_harness.postgres import store_from_url

        try:
            # a `schema=` query parameter picks the schema; an export never changes the database
            store = store_from_url(text, migrate=False)
        except ValueError as exc:
            raise StoreError(f"cannot open {_safe_url(text)}: {exc}") from None
    else:
        path = Path(text)
        if not path.is_file():
            what = "a folder, not a file" if path.is_dir() else "no such file"
            raise StoreError(
                f"cannot open store {path}: {what} (give the sqlite file of the "
                "harness's state.path, e.g. .harness/state.db)"
            )
        from pytest_harness.store.sqlite import SQLiteStore
        from pytest_harness.store.sqlite_file import check_store_file

        check_store_file(path)  # read-only: opening the store would create its tables
        store = SQLiteStore(path)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def _safe_url(url: str) -> str:
    """A URL with any password replaced, for messages."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "the database URL"
    if parts.password:
        return url.replace(f":{parts.password}@", ":[REDACTED]@", 1)
    return url


async def export_incident(
    store: Store,
    session_id: str,
    run_id: str,
    dest: str | os.PathLike[str],
    *,
    policy: ExportPolicy | None = None,
) -> Path:
    """Export run `run_id` of session `session_id` from `store` as a `.hx` archive at `dest`.

    Reads the store only: the run is not resumed and no spec is loaded. `HarnessError` when
    the run is not in that session, `RecordingError` when it was not recorded;
    `FileExistsError` for an existing `dest`; `ArchiveError` for a limit the archive would
    exceed. Authorize the caller's access to the session before exposing this: knowing the
    ids is not authentication.
    """
    record = await store.get_run(run_id)
    if record.session_id != session_id:
        raise HarnessError(
            f"run {run_id} does not belong to session {session_id!r}; nothing was exported"
        )
    return await export_run(store, record, Path(dest), policy=policy)


async def export_run(
    store: Store,
    record: RunRecord,
    dest: Path,
    *,
    policy: ExportPolicy | None = None,
    spec: Spec | None = None,
) -> Path:
    """Write the archive of a stored, recorded run (see `export_incident`).

    The manifest names the spec the run was started with (its `run.started` record); `spec`,
    the exporting harness's, stands in when the journal has no such record.
    """
    policy = policy or ExportPolicy()
    if dest.suffix != ".hx":
        raise ArchiveError(f"cannot export to {dest}: an incident archive's name ends in .hx")
    if dest.exists() or dest.is_symlink():
        raise FileExistsError(f"{dest} exists; export never overwrites a file")
    if not record.record:
        raise RecordingError(
            f"run {record.run_id} was not recorded, so it has no journal to export; start runs "
            "with state.record: true (or load(..., record=True))"
        )
    record, entries = await _snapshot(store, record.run_id)
    limits = policy.limits
    if len(entries) > limits.max_records:
        raise ArchiveError(
            f"cannot export run {record.run_id}: its journal has {len(entries)} records, over "
            f"BundleLimits.max_records={limits.max_records}; nothing was written"
        )
    records, references = _records(entries, policy)
    catalogue, blobs = await _catalogue(store, references, policy)
    records_text = "".join(dumps(r) + "\n" for r in records).encode()
    named = _spec_of(entries, spec)
    manifest = _manifest(record, named, records, records_text, catalogue, policy)
    members = [(MANIFEST, dumps(manifest, indent=2).encode() + b"\n"), (RECORDS, records_text)]
    members += [(artifact_member(sha), data) for sha, data in sorted(blobs.items())]
    data = _zip(members, limits, record.run_id)
    _publish(data, dest)
    return dest


async def _snapshot(store: Store, run_id: str) -> tuple[RunRecord, list[JournalEntry]]:
    """The run and its journal as of one moment, though another worker may drive it meanwhile.

    The journal is read first and the run after it, so the run is at least as new as the
    journal; when the run has stopped and the journal's last checkpoint says otherwise, a
    commit landed in between and the journal is read again.
    """
    for _ in range(5):
        entries = await store.journal(run_id)
        record = await store.get_run(run_id)
        if record.status == "running":
            return record, entries
        last = next((e for e in reversed(entries) if e.kind == "checkpoint"), None)
        if last is not None and last.payload.get("status") == record.status:
            return record, entries
    raise ArchiveError(
        f"cannot export run {run_id}: it kept changing while it was read (another worker "
        "drives it); retry, or export once it stops"
    )


def _records(
    entries: list[JournalEntry], policy: ExportPolicy
) -> tuple[list[dict[str, Any]], list[str]]:
    """The archive records and the artifact hashes they refer to, in order of first mention."""
    records: list[dict[str, Any]] = []
    references: dict[str, None] = {}
    for entry in entries:
        data = entry.to_dict()
        original = data["payload"]
        payload: dict[str, Any] | None = original
        redacted = False
        if policy.include_payloads:
            if policy.redact is not None:
                payload = policy.redact(entry.kind, copy.deepcopy(original))
                redacted = payload != original
            if payload is not None and entry.kind == "run.started":
                payload = _kept_declarations(payload)
            if payload is not None:
                cleaned = redact_credentials(payload)
                redacted = redacted or cleaned != payload
                payload = cleaned
        omitted = payload is None or not policy.include_payloads
        scanned = original if not policy.include_payloads else payload
        if scanned is not None:
            for match in ARTIFACT_URI.finditer(dumps(scanned)):
                references.setdefault(match.group(1))
        if omitted:
            payload = {"omitted": True}
            payload.update(
                {k: original[k] for k in _KEPT_WHEN_OMITTED if isinstance(original.get(k), str)}
            )
        data["payload"] = payload
        data["omitted"] = omitted
        data["redacted"] = redacted
        records.append(data)
    return records, list(references)


def _kept_declarations(started: dict[str, Any]) -> dict[str, Any]:
    """A `run.started` payload whose model declarations are kept as a golden file keeps them.

    Redacted, with the digests of the options redaction changes (`recording.kept`): an archive
    replays like a golden file, and an edit inside an option's hidden text is seen there too.
    """
    models = started.get("models")
    if not isinstance(models, dict) or not all(isinstance(m, dict) for m in models.values()):
        return started  # not a declaration this version wrote: left to the checks on loading
    from pytest_harness.recording.kept import kept_models

    return {**started, "models": kept_models(models)}


async def _catalogue(
    store: Store, references: list[str], policy: ExportPolicy
) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """Each referenced artifact: included, omitted, missing or corrupt; the included bytes."""
    catalogue: list[dict[str, Any]] = []
    blobs: dict[str, bytes] = {}
    for sha in references:
        stored = await store.artifact(sha)
        entry: dict[str, Any] = {"sha256": sha, "media_type": None, "name": None, "size": None}
        if stored is None:
            entry["status"] = "missing"
        else:
            entry.update(media_type=stored.media_type, name=stored.name, size=len(stored.data))
            if hashlib.sha256(stored.data).hexdigest() != sha:
                entry["status"] = "corrupt"
            elif policy.include_artifacts:
                entry["status"] = "included"
                blobs[sha] = stored.data
            else:
                entry["status"] = "omitted"
        catalogue.append(entry)
    return catalogue, blobs


def _manifest(
    record: RunRecord,
    spec: dict[str, Any],
    records: list[dict[str, Any]],
    records_text: bytes,
    catalogue: list[dict[str, Any]],
    policy: ExportPolicy,
) -> dict[str, Any]:
    from pytest_harness import __version__

    state = record.state
    final: dict[str, Any] = {
        "status": record.status,
        "usage": state.get("usage") or {},
        "limit": state.get("limit"),
        "error_type": (state.get("error") or {}).get("type"),
    }
    if policy.include_payloads:
        final["output"] = redact_credentials(state.get("output"))
    return {
        "format": ARCHIVE_FORMAT,
        "created_at": time.time(),
        "generator": {
            "pytest_harness": __version__,
            "python": platform.python_version(),
        },
        "session_id": record.session_id,
        "run_id": record.run_id,
        "task": record.task,
        "spec": spec,
        "final_state": final,
        "unresolved": outstanding(records),
        "policy": {
            "include_payloads": policy.include_payloads,
            "include_artifacts": policy.include_artifacts,
            "redact": policy.redact is not None,
        },
        "records": {
            "count": len(records),
            "bytes": len(records_text),
            "sha256": hashlib.sha256(records_text).hexdigest(),
        },
        "artifacts": catalogue,
    }


def _spec_of(entries: list[JournalEntry], spec: Spec | None) -> dict[str, Any]:
    """The manifest's `spec`: name, digest, and where they come from.

    The run's `run.started` record (what the run was started with), else the exporting
    harness's spec (`harness`), else nowhere (`source` None, name and digest null).
    """
    started = next((e for e in entries if e.kind == "run.started"), None)
    if started is not None:
        name, digest = started.payload.get("spec"), started.payload.get("spec_digest")
        if isinstance(name, str) and isinstance(digest, str) and digest:
            return {"name": name, "digest": digest, "source": "run.started"}
    if spec is not None:
        return {"name": spec.document.name, "digest": spec.digest, "source": "harness"}
    return {"name": None, "digest": None, "source": None}


def _zip(members: list[tuple[str, bytes]], limits: BundleLimits, run_id: str) -> bytes:
    def over(limit: str, value: int, what: str) -> ArchiveError:
        return ArchiveError(
            f"cannot export run {run_id}: {what} is {value}, over BundleLimits.{limit}="
            f"{getattr(limits, limit)}; nothing was written (raise the limit, or export "
            "without payloads or artifacts)"
        )

    if len(members) > limits.max_members:
        raise over("max_members", len(members), "the number of members")
    for name, data in members:
        if len(data) > limits.max_member_bytes:
            raise over("max_member_bytes", len(data), f"the size of {name}")
    expanded = sum(len(data) for _, data in members)
    if expanded > limits.max_expanded_bytes:
        raise over("max_expanded_bytes", expanded, "the expanded size")
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100600 << 16  # a regular file, owner read/write
            archive.writestr(info, data)
    data = buffer.getvalue()
    if len(data) > limits.max_archive_bytes:
        raise over("max_archive_bytes", len(data), "the archive's size")
    return data


def _publish(data: bytes, dest: Path) -> None:
    """Write `data` to `dest` atomically, mode 0600, refusing an existing `dest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        try:
            os.link(tmp, dest)  # atomic, and refuses an existing name
        except FileExistsError:
            raise FileExistsError(f"{dest} exists; export never overwrites a file") from None
        except OSError:  # a file system without hard links
            try:
                out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                raise FileExistsError(f"{dest} exists; export never overwrites a file") from None
            with os.fdopen(out, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
