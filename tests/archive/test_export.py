"""Export: metadata only by default, redaction on a copy, limits that fail, atomic 0600 files."""

from __future__ import annotations

import asyncio
import json
import stat
import zipfile
from pathlib import Path

import pytest

import pytest_harness as ph

from .conftest import make_archives


def records(path: Path) -> list[dict]:
    with zipfile.ZipFile(path) as archive:
        return [json.loads(line) for line in archive.read("records.jsonl").splitlines()]


def test_metadata_only_is_the_default(archives) -> None:
    meta = archives["meta"]
    report = ph.verify_archive(meta)
    assert report.valid and not report.complete
    assert [i.code for i in report.issues] == ["payloads_omitted"]
    for record in records(meta):
        assert record["omitted"] is True and record["payload"]["omitted"] is True
        assert "args" not in record["payload"] and "input" not in record["payload"]
    manifest = report.manifest
    assert manifest is not None and "output" not in manifest["final_state"]
    assert manifest["policy"] == {
        "include_payloads": False,
        "include_artifacts": False,
        "redact": False,
    }
    with pytest.raises(ph.ArchiveError, match=r"no payloads to replay.*--include-payloads"):
        ph.Recording.load(meta)


def test_payloads_are_credential_redacted_and_marked(archives) -> None:
    full = archives["full"]
    text = full.read_bytes()
    assert b"sk-live-123" not in zipfile.ZipFile(full).read("records.jsonl")
    assert text  # the archive exists
    started = next(r for r in records(full) if r["kind"] == "tool.started")
    assert started["payload"]["args"]["api_key"] == "[REDACTED]" and started["redacted"]
    report = ph.verify_archive(full)
    assert report.valid and not report.complete
    assert {i.code for i in report.issues} == {"payload_redacted"}
    assert report.manifest["final_state"]["output"] == "Refunded A-1."  # type: ignore[index]


def test_an_archive_with_payloads_loads_and_replays(app, archives) -> None:
    recording = ph.Recording.load(archives["full"])
    assert recording.task == "orders" and recording.status == "completed"
    assert [t.name for t in recording.tool_results] == ["lookup_order", "refund"]

    async def replay() -> ph.ReplayReport:
        async with ph.load(app.spec) as harness:
            return await harness.replay(str(archives["full"]))

    report = asyncio.run(replay())
    assert report.same, report.render()


def test_the_redact_callback_runs_on_a_copy_then_credentials(app, tmp_path: Path) -> None:
    seen: list[str] = []

    def redact(kind: str, payload: dict) -> dict | None:
        seen.append(kind)
        if kind == "run.started":
            return None
        if kind == "tool.returned":
            payload["outcome"]["value"] = "hidden"
            payload["token"] = "abc"  # credential redaction runs after the callback
        return payload

    async def go() -> tuple[Path, list]:
        paths = await make_archives(app, tmp_path / "a")
        async with ph.load(app.spec) as harness:
            run_id = str(paths["run_id"])
            policy = ph.ExportPolicy(include_payloads=True, redact=redact)
            path = await harness.export(run_id, tmp_path / "r.hx", policy=policy)
            journal = await harness.store.journal(run_id)
        return path, journal

    path, journal = asyncio.run(go())
    assert "run.started" in seen
    got = records(path)
    assert got[0]["omitted"] and got[0]["redacted"]
    returned = next(r for r in got if r["kind"] == "tool.returned")
    assert returned["payload"]["outcome"]["value"] == "hidden"
    assert returned["payload"]["token"] == "[REDACTED]"
    stored = next(e for e in journal if e.kind == "tool.returned")
    assert stored.payload["outcome"]["value"] != "hidden" and "token" not in stored.payload
    report = ph.verify_archive(path)
    assert report.valid and {"payload_redacted", "payloads_omitted"} <= {
        i.code for i in report.issues
    }


def test_payloads_a_redact_hook_omitted_are_not_called_metadata_only(
    app, archives, tmp_path: Path
) -> None:
    """The manifest's policy tells why payloads are missing: exported metadata-only, or
    exported with payloads and omitted by the redact hook (whose advice is not
    include_payloads)."""

    def drop_start(kind: str, payload: dict) -> dict | None:
        return None if kind == "run.started" else payload

    async def go() -> Path:
        async with ph.load(app.spec) as harness:
            policy = ph.ExportPolicy(include_payloads=True, redact=drop_start)
            return await harness.export(str(archives["run_id"]), tmp_path / "r.hx", policy=policy)

    path = asyncio.run(go())
    total = len(records(path))
    report = ph.verify_archive(path)
    assert report.valid and not report.complete
    (issue,) = [i for i in report.issues if i.code == "payloads_omitted"]
    assert issue.message.startswith(f"1 of {total} payloads are omitted by the export policy's")
    assert "redact hook" in issue.message and issue.seq == 1
    assert "metadata-only" not in issue.message and "include_payloads" not in issue.message
    with pytest.raises(ph.ArchiveError, match="redact hook") as raised:
        ph.Recording.load(path)
    assert "metadata-only" not in str(raised.value)

    (meta,) = [i for i in ph.verify_archive(archives["meta"]).issues]
    assert meta.code == "payloads_omitted"
    assert meta.message.startswith(
        f"{total} of {total} payloads are omitted (exported metadata-only"
    )
    assert "include_payloads=True" in meta.message and "redact" not in meta.message


def test_the_file_is_private_and_never_overwritten(app, archives) -> None:
    full = archives["full"]
    assert stat.S_IMODE(full.stat().st_mode) == 0o600
    before = full.read_bytes()

    async def again() -> None:
        async with ph.load(app.spec) as harness:
            await harness.export(str(archives["run_id"]), full)

    with pytest.raises(FileExistsError):
        asyncio.run(again())
    assert full.read_bytes() == before
    assert sorted(p.name for p in full.parent.iterdir()) == ["full.hx", "meta.hx"]  # no temp


@pytest.mark.parametrize(
    ("limit", "value"),
    [
        ("max_records", 3),
        ("max_member_bytes", 200),
        ("max_expanded_bytes", 500),
        ("max_archive_bytes", 300),
        ("max_members", 1),
    ],
)
def test_a_limit_fails_the_export_and_writes_nothing(
    app, tmp_path: Path, limit: str, value: int
) -> None:
    async def go() -> None:
        paths = await make_archives(app, tmp_path / "a")
        async with ph.load(app.spec) as harness:
            policy = ph.ExportPolicy(
                include_payloads=True, limits=ph.BundleLimits(**{limit: value})
            )
            await harness.export(str(paths["run_id"]), tmp_path / "big.hx", policy=policy)

    with pytest.raises(ph.ArchiveError, match=f"BundleLimits.{limit}={value}"):
        asyncio.run(go())
    assert not (tmp_path / "big.hx").exists()
    hidden = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert hidden in ([], [".harness"])  # no temporary file (`.harness/`: the spec cache)


def test_bad_limits_and_suffixes_are_typed_errors(app, archives, tmp_path: Path) -> None:
    with pytest.raises(ph.ArchiveError, match="max_records must be a positive integer"):
        ph.BundleLimits(max_records=0)

    async def go() -> None:
        async with ph.load(app.spec) as harness:
            await harness.export(str(archives["run_id"]), tmp_path / "x.zip")

    with pytest.raises(ph.ArchiveError, match=r"must end in \.hx .* or \.yaml"):
        asyncio.run(go())


def test_export_incident_from_a_postgres_url(
    app, tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    from pytest_harness.postgres import PostgresStore

    async def go() -> Path:
        app.write(
            "tasks:\n  orders:\n    prompt: p\n    tools: [lookup_order]\nstate: {record: true}\n"
        )
        script = "[{call: lookup_order, args: {order_id: A-1}}, {say: done}]"
        app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))
        store = PostgresStore(pg_dsn, schema=pg_schema)
        async with ph.load(app.spec, store=store) as harness:
            done = await harness.run("orders", "hi", principal="ann")
        assert done.ok
        async with ph.open_store(f"{pg_dsn}?schema={pg_schema}") as opened:
            return await ph.export_incident(
                opened,
                done.session_id,
                done.run_id,
                tmp_path / "pg.hx",
                policy=ph.ExportPolicy(include_payloads=True),
            )

    report = ph.verify_archive(asyncio.run(go()))
    assert report.valid and report.complete, report.issues


def test_open_store_on_postgres_changes_nothing_in_the_database(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    """Forensics never migrates: a schema without a store is an error, and stays absent."""
    import psycopg

    async def go() -> None:
        async with ph.open_store(f"{pg_dsn}?schema={pg_schema}"):
            pass

    with pytest.raises(ph.StoreError, match=rf"no pytest-harness store in schema '{pg_schema}'"):
        asyncio.run(go())
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
            (pg_schema,),
        ).fetchone()
    assert row == (0,)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # an older store is refused too
        conn.execute(f"CREATE SCHEMA {pg_schema}".encode())
        conn.execute(
            f"CREATE TABLE {pg_schema}.schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at double precision NOT NULL)".encode()
        )
        conn.execute(f"INSERT INTO {pg_schema}.schema_migrations VALUES (1, 'runs', 0)".encode())
    with pytest.raises(ph.StoreError, match=r"at version 1, older than .* open it once"):
        asyncio.run(go())


@pytest.mark.parametrize("content", ["another app's table", "empty", "not sqlite"])
def test_open_store_on_a_file_that_is_no_store_changes_nothing(
    tmp_path: Path, content: str
) -> None:
    """Forensics never creates a store: another app's database, an empty file and random bytes
    are each a `StoreError` naming the file, and the file is left byte for byte as it was."""
    import sqlite3

    path = tmp_path / "other.db"
    if content == "another app's table":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE foo (x INTEGER)")
        conn.close()
    elif content == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"\x00not a database\xff" * 64)
    before = path.read_bytes()

    async def go() -> None:
        async with ph.open_store(path):
            pass

    with pytest.raises(ph.StoreError, match=r"cannot open store .*other\.db: it is not a"):
        asyncio.run(go())
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, no -shm
