"""What only the Postgres store has: migrations under a lock, a version check, its spec keys,
DSN errors, a server that drops connections, LISTEN/NOTIFY streams and their reconnects.

The store contract it shares with memory and sqlite is in `tests/store/test_contract.py`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio

import pytest_harness as ph
from pytest_harness.errors import StoreError
from pytest_harness.postgres import is_postgres_url, store_from_url
from pytest_harness.postgres.migrate import latest_version
from pytest_harness.postgres.store import PostgresStore
from pytest_harness.runtime.events import EventHub, follow
from pytest_harness.runtime.journal import draft
from pytest_harness.store.base import EventDraft, NewApproval, NewRun

pytestmark = pytest.mark.asyncio


def new_run(**fields: Any) -> NewRun:
    values: dict[str, Any] = {
        "run_id": f"run_{uuid.uuid4().hex}",
        "session_id": "ses_1",
        "task": "orders",
        "tenant": None,
        "principal": {"id": "ann"},
        "input": "hi",
        "labels": {},
        "idempotency_key": None,
        "status": "running",
        "state": {"n": 0},
        "events": (EventDraft("run_started", {}),),
    }
    values.update(fields)
    return NewRun(**values)


@pytest_asyncio.fixture
async def store(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_dsn, schema=pg_schema, pool_max=4) as made:
        yield made


def sql(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description is not None else []


# -- migrations -------------------------------------------------------------------------------


async def test_many_stores_opening_at_once_all_succeed_and_migrate_once(
    pg_dsn: str, pg_schema: str
) -> None:
    stores = [PostgresStore(pg_dsn, schema=pg_schema, pool_min=0, pool_max=1) for _ in range(8)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        record, _ = await stores[0].create_run(new_run())
        assert (await stores[-1].get_run(record.run_id)).run_id == record.run_id
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    rows = sql(pg_dsn, f"SELECT version, name FROM {pg_schema}.schema_migrations ORDER BY version")
    assert [version for version, _ in rows] == list(range(1, latest_version() + 1))


@pytest.mark.slow
async def test_worker_processes_starting_at_once_migrate_once(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    script = tmp_path / "open.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys, time
            from pytest_harness.postgres import PostgresStore

            async def main(dsn, schema, start):
                time.sleep(max(0.0, start - time.time()))
                async with PostgresStore(dsn, schema=schema, pool_min=0) as store:
                    print(len(await store.list_runs()))

            asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
            """
        )
    )
    start = str(time.time() + 1.5)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), pg_dsn, pg_schema, start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == ["0"] * 4
    rows = sql(pg_dsn, f"SELECT count(*) FROM {pg_schema}.schema_migrations")
    assert rows == [(latest_version(),)]


async def test_a_schema_newer_than_the_code_is_refused_naming_both_versions(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    sql(
        pg_dsn,
        f"INSERT INTO {pg_schema}.schema_migrations (version, name, applied_at) "
        "VALUES (99, 'from_the_future', 0)",
    )
    newer = PostgresStore(pg_dsn, schema=pg_schema)
    with pytest.raises(StoreError) as info:
        await newer.open()
    message = str(info.value)
    assert "version 99" in message and f"version {latest_version()}" in message
    assert pg_schema in message
    await newer.close()


# -- bad input --------------------------------------------------------------------------------


async def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    store = PostgresStore("postgresql://ann:s3cret@127.0.0.1:1/test", connect_timeout=2)
    with pytest.raises(StoreError, match="cannot connect") as info:
        await store.open()
    message = str(info.value)
    assert "127.0.0.1" in message and "port=1" in message and "s3cret" not in message
    assert "***" in message
    await store.close()


async def test_opening_cancelled_while_the_pool_connects_leaves_no_pool_behind(
    pg_dsn: str, pg_schema: str
) -> None:
    """A proxy lets the migration's connection through and holds the pool's first one."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    server = conninfo_to_dict(pg_dsn)
    host, port = server.get("host", "127.0.0.1"), int(server.get("port", 5432))
    held: list[asyncio.StreamWriter] = []
    pumps: list[asyncio.Task[None]] = []
    second = asyncio.Event()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if held or pumps:  # the pool's connection: never answered
            held.append(writer)
            second.set()
            return
        up_reader, up_writer = await asyncio.open_connection(host, port)
        pumps.append(asyncio.create_task(pump(reader, up_writer)))
        pumps.append(asyncio.create_task(pump(up_reader, writer)))

    proxy = await asyncio.start_server(accept, "127.0.0.1", 0)
    proxy_port = proxy.sockets[0].getsockname()[1]
    dsn = make_conninfo(pg_dsn, host="127.0.0.1", port=str(proxy_port))
    store = PostgresStore(dsn, schema=pg_schema, connect_timeout=30)
    try:
        opening = asyncio.create_task(store.open())
        await asyncio.wait_for(second.wait(), 30)
        opening.cancel()
        for writer in held:  # the held connection fails now, so no pool worker waits on it
            writer.close()
        with pytest.raises(asyncio.CancelledError):
            await opening

        def left() -> list[str]:
            return [t.get_name() for t in asyncio.all_tasks() if "pytest-harness:" in t.get_name()]

        deadline = time.monotonic() + 10
        while left() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert left() == []  # before: the pool was never closed; its tasks stayed for good
        await store.close()
    finally:
        for writer in held:
            writer.close()
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        proxy.close()
        await proxy.wait_closed()


async def test_a_malformed_dsn_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="malformed"):
        PostgresStore("host=127.0.0.1 port")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": "Bad-Name"}, "schema must be lower-case"),
        ({"schema": "1abc"}, "schema must be lower-case"),
        ({"pool_min": -1}, "pool min"),
        ({"pool_max": 0}, "pool max"),
        ({"pool_min": 5, "pool_max": 2}, "smaller than pool min"),
    ],
)
async def test_bad_settings_are_value_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PostgresStore("postgresql://127.0.0.1/test", **kwargs)


SPEC = """
version: 1
name: pg
models:
  default: {{use: scripted, script: [{{say: hello}}]}}
tasks:
  t: {{prompt: p}}
state: {{use: postgres, {state}}}
"""


def write_spec(tmp_path: Path, state: str) -> Path:
    spec = tmp_path / "harness.yaml"
    spec.write_text(SPEC.format(state=state), encoding="utf-8")
    return spec


async def test_a_missing_dsn_variable_is_a_spec_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_DSN", raising=False)
    spec = write_spec(tmp_path, "dsn_env: NO_SUCH_DSN")
    with pytest.raises(ph.SpecError, match="'NO_SUCH_DSN' is not set") as info:
        ph.load(spec)
    assert info.value.key == "state.dsn_env" and info.value.line == 8


@pytest.mark.parametrize(
    ("state", "key", "message"),
    [
        ("dsn_env: PG_TEST_DSN, schema: Bad-Name", "state.schema", "lower-case"),
        ("dsn_env: PG_TEST_DSN, pool: {min: 5, max: 2}", "state.pool", "smaller than"),
        ("dsn_env: PG_TEST_DSN, pool: {min: -1}", "state.pool.min", "greater than or equal"),
        ("dsn_env: PG_TEST_DSN, pool: {size: 3}", "state.pool.size", "unknown key .size."),
    ],
)
async def test_bad_state_keys_are_spec_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str, key: str, message: str
) -> None:
    monkeypatch.setenv("PG_TEST_DSN", "postgresql://127.0.0.1/test")
    with pytest.raises(ph.SpecError, match=message) as info:
        ph.load(write_spec(tmp_path, state))
    assert info.value.key == key


async def test_a_harness_runs_on_postgres_from_its_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, pg_schema: str
) -> None:
    monkeypatch.setenv("PG_TEST_DSN", pg_dsn)
    spec = write_spec(tmp_path, f"dsn_env: PG_TEST_DSN, schema: {pg_schema}, pool: {{max: 2}}")
    async with ph.load(spec) as harness:
        assert isinstance(harness.store, PostgresStore)
        assert (harness.store.schema, harness.store.pool_max) == (pg_schema, 2)
        result = await harness.run("t", "hi", principal="ann")
    assert result.ok and result.output == "hello"
    async with ph.load(spec) as other:
        assert (await other.result(result.run_id)).output == "hello"


async def test_store_from_url_takes_the_schema_out_of_the_query(
    pg_dsn: str, pg_schema: str
) -> None:
    assert is_postgres_url(pg_dsn) and not is_postgres_url("state.db")
    store = store_from_url(f"{pg_dsn}?schema={pg_schema}&connect_timeout=5")
    assert store.schema == pg_schema and "schema" not in store.dsn
    assert "connect_timeout=5" in store.dsn
    async with store:
        record, _ = await store.create_run(new_run())
        assert (await store.get_run(record.run_id)).state == {"n": 0}
    assert store_from_url(pg_dsn).schema == "harness"


async def test_the_plugin_is_an_entry_point_and_imports_no_psycopg_until_used() -> None:
    code = textwrap.dedent(
        """
        import sys
        from pytest_harness.plugins import plugin_manager, registry
        assert "postgres" in registry("harness_stores").names()
        assert plugin_manager().get_plugin("postgres") is not None
        print("psycopg" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


# -- a server that goes away ------------------------------------------------------------------


def terminate(dsn: str, application_name: str) -> int:
    rows = sql(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (application_name,),
    )
    return len(rows)


async def test_connections_killed_mid_run_give_a_store_error_and_no_half_write(
    store: PostgresStore, pg_dsn: str
) -> None:
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    await store.commit(record.run_id, 1, status="running", state={"n": 1})
    assert terminate(pg_dsn, store.application_name) >= 1
    await asyncio.sleep(0.1)
    with pytest.raises(StoreError, match="the server or the connection failed"):
        for n in range(2, 10):  # each pooled connection was killed: one of them fails
            await store.commit(
                record.run_id,
                1,
                status="completed",
                state={"n": n},
                events=[EventDraft("e", {"n": n})],
            )
    got = await store.get_run(record.run_id)  # the pool replaced the dead connections
    events = await store.events(record.run_id)
    # Whatever did commit, committed whole: the state and its event agree.
    assert [e.data.get("n") for e in events[1:]] == list(range(2, got.state["n"] + 1))


# -- LISTEN / NOTIFY --------------------------------------------------------------------------


async def test_a_stream_in_another_process_is_woken_by_notify_not_polling(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as writer,
        PostgresStore(pg_dsn, schema=pg_schema) as reader,
    ):
        record, _ = await writer.create_run(new_run(lease_owner="w1", lease_ttl=30))
        reads = 0
        real_events = reader.events

        async def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await real_events(*args, **kwargs)

        monkeypatch.setattr(reader, "events", counting)
        seen: list[tuple[str, float]] = []

        async def consume() -> None:
            async for event in follow(reader, EventHub(), record.run_id):
                seen.append((event.kind, time.monotonic()))

        task = asyncio.create_task(consume())
        await asyncio.sleep(1.5)  # nothing written: a polling stream would read ~7 times
        idle_reads = reads
        sent = time.monotonic()
        await writer.commit(record.run_id, 1, status="running", state={}, events=[EventDraft("a")])
        await asyncio.sleep(0.3)
        await writer.commit(
            record.run_id, 1, status="completed", state={}, events=[EventDraft("b")], release=True
        )
        await asyncio.wait_for(task, 5)
    assert idle_reads <= 2, idle_reads
    assert [kind for kind, _ in seen] == ["run_started", "a", "b"]
    assert seen[1][1] - sent < 0.25  # woken at once by the notification


async def test_a_stream_reconnects_without_gaps_or_repeats(pg_dsn: str, pg_schema: str) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as writer,
        PostgresStore(pg_dsn, schema=pg_schema) as reader,
    ):
        record, _ = await writer.create_run(new_run(lease_owner="w1", lease_ttl=30))
        seen: list[Any] = []

        async def consume() -> None:
            async for event in follow(reader, EventHub(), record.run_id):
                seen.append(event)

        task = asyncio.create_task(consume())
        for i in range(3):
            await writer.commit(
                record.run_id, 1, status="running", state={}, events=[EventDraft("e", {"i": i})]
            )
        await asyncio.sleep(0.2)
        listener = reader._listener
        assert listener is not None and listener.connected
        assert terminate(pg_dsn, f"{reader.application_name} listen") == 1
        for i in range(3, 6):  # written while the listener is away
            await writer.commit(
                record.run_id, 1, status="running", state={}, events=[EventDraft("e", {"i": i})]
            )
        await asyncio.sleep(0.5)
        for i in range(6, 8):
            await writer.commit(
                record.run_id, 1, status="running", state={}, events=[EventDraft("e", {"i": i})]
            )
        await writer.commit(
            record.run_id, 1, status="completed", state={}, events=[EventDraft("end")], release=True
        )
        await asyncio.wait_for(task, 10)
        assert listener.reconnects >= 1 and listener.connected
    assert [e.kind for e in seen] == ["run_started"] + ["e"] * 8 + ["end"]
    assert [e.data.get("i") for e in seen[1:-1]] == list(range(8))
    cursors = [int(e.cursor) for e in seen]
    assert cursors == sorted(set(cursors))


async def test_events_of_concurrent_writers_to_one_run_are_visible_in_cursor_order(
    store: PostgresStore,
) -> None:
    """Answers and commits race on one run; a reader after its cursor misses none of them."""
    record, _ = await store.create_run(new_run())
    run_id = record.run_id
    approvals = [
        NewApproval(
            approval_id=f"apr_{uuid.uuid4().hex}",
            execution_key=f"k{i}",
            args_digest="d",
            tool="refund",
            args={},
            rule_id="R1",
            approvers=("finance",),
            requested_by="ann",
        )
        for i in range(20)
    ]
    await store.commit(run_id, 0, status="awaiting_approval", state={}, approvals=approvals)
    seen: list[Any] = []
    writing = True

    async def read() -> None:
        cursor = "0"
        while True:
            done = not writing
            batch = await store.events(run_id, after=cursor)
            for event in batch:
                seen.append(event)
                cursor = event.cursor
            if done and not batch:
                return
            await asyncio.sleep(0)

    async def answer(approval: NewApproval) -> None:
        await store.decide_approval(
            run_id,
            approval.approval_id,
            decision="approve",
            approver="fiona",
            approver_roles=(),
            reason=None,
            event=EventDraft("answered", {"key": approval.execution_key}),
        )

    async def commits() -> None:
        for i in range(20):
            await store.commit(
                run_id, 0, status="awaiting_approval", state={}, events=[EventDraft("c", {"i": i})]
            )

    reader = asyncio.create_task(read())
    await asyncio.gather(*(answer(a) for a in approvals), commits())
    writing = False
    await reader
    assert [e.cursor for e in seen] == [e.cursor for e in await store.events(run_id)]
    assert len(seen) == 41


async def test_a_commit_retried_after_its_reply_was_lost_writes_nothing_twice(
    store: PostgresStore, pg_dsn: str
) -> None:
    """The flight recorder retries a journaled write that raised; on Postgres the first attempt
    may have committed with its reply lost (a dropped connection). The retry carries the same
    journal entries, so it is recognised and writes no event or approval request again."""
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    entry = draft("checkpoint", {"status": "awaiting_approval"}, step=1)
    request = NewApproval(
        approval_id="apr_1",
        execution_key="k1",
        args_digest="d",
        tool="refund",
        args={"amount": 250},
        rule_id="big-refund",
        approvers=("finance",),
        requested_by="ann",
        self_approve=False,
    )
    write = dict(
        status="awaiting_approval",
        state={"n": 1},
        events=[EventDraft("approval_requested", {"approval_id": "apr_1"})],
        approvals=[request],
        journal=[entry],
    )
    assert await store.commit(record.run_id, 1, **write) is None
    await store.request_control(record.run_id, "cancel", statuses=("awaiting_approval",))

    assert await store.commit(record.run_id, 1, **write) == "cancel"  # the retry: it landed

    events = [e.kind for e in await store.events(record.run_id)]
    assert events == ["run_started", "approval_requested"]
    assert [a.approval_id for a in await store.approvals(record.run_id)] == ["apr_1"]
    assert [j.id for j in await store.journal(record.run_id)] == [entry.id]
    # a commit with a new entry still needs the lease: a stale token is refused as before
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.commit(
            record.run_id, 2, status="running", state={"n": 2},
            journal=[draft("checkpoint", {"status": "running"}, step=2)],
        )  # fmt: skip


async def test_a_commit_carrying_entries_a_failed_write_left_still_writes(
    store: PostgresStore,
) -> None:
    """Only a commit whose last entry is there already landed; old entries at the head are
    skipped and the rest of the commit is written."""
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30, record=True))
    old = draft("checkpoint", {"status": "running"}, step=1)
    await store.commit(record.run_id, 1, status="running", state={"n": 1}, journal=[old])
    new = draft("checkpoint", {"status": "completed"}, step=2)
    await store.commit(
        record.run_id, 1, status="completed", state={"n": 2},
        events=[EventDraft("run_completed", {})], journal=[old, new],
    )  # fmt: skip
    got = await store.get_run(record.run_id)
    assert (got.status, got.state) == ("completed", {"n": 2})
    assert [j.id for j in await store.journal(record.run_id)] == [old.id, new.id]
    assert [e.kind for e in await store.events(record.run_id)] == ["run_started", "run_completed"]
