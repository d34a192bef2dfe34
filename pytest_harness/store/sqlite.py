"""`SQLiteStore`: runs, events and approvals in one SQLite file, shared by processes on one host.

The file is created with mode 0600 (it holds raw prompts, answers and tool arguments), and an
existing one (with its `-wal` and `-shm`) that others may read is tightened to 0600 on open, or
opening fails naming its mode. It is used in WAL mode, with `PRAGMA synchronous` as configured
and a busy timeout, so several processes can use it at once without `database is locked`
reaching them.

Every write the runtime makes is a single SQL statement, atomic together with its triggers,
run inline on the event loop's thread when it can take the write lock at once (busy timeout
zero), and otherwise on the store's worker thread, where it waits up to the busy timeout
(`store.sqlite_connection` says why and how long a write can hold the loop). Reads run on the
worker thread.

- `commit` is one fenced `UPDATE runs … WHERE run_id = ? AND lease_token = ? RETURNING
  control`. The events and approval requests of the boundary travel in the `pending_events`
  and `pending_approvals` columns as JSON arrays; an `AFTER UPDATE` trigger moves their items
  into the `events` and `approvals` tables (`json_each`) and clears the columns. A stale token
  updates no row, so the trigger never fires and nothing is written. The `RETURNING` clause
  hands the driver any pending pause or cancel request in the same round trip.
- `request_control` is one `UPDATE runs SET control = …` guarded by the run's status.
- `create_run` is one `INSERT … ON CONFLICT (tenant_key, task, idempotency_key) DO NOTHING`,
  with an `AFTER INSERT` trigger for its first events.
- `decide_approval` is one compare-and-set `UPDATE approvals … WHERE status = 'pending'`, and
  its event travels in `approvals.pending_event` to a trigger the same way.
- Leases are single `UPDATE … RETURNING lease_token` statements.

A single write statement in autocommit mode takes the write lock when it starts, so the busy
timeout applies and no read-then-write upgrade can fail. The only multi-statement writes are
the schema migrations, run in `BEGIN IMMEDIATE … COMMIT` before the connection is handed out.
One statement per write also keeps the connection safe to share between asyncio tasks: a
transaction spread over several awaited calls would let another task's statement slip into
it. (A caller cancelled while it awaits a write does not stop the write: the statement still
runs, whole or not at all.) Event cursors are the `events` table's `AUTOINCREMENT` ids:
writers are serialized, so ids become visible in order.

The connection is opened lazily in the process that uses it and refused in any other (a
connection must never cross `fork()`); make a new store in each process.

The store is put together from parts, each in its own module: `store.sqlite_file` (the file,
opening, migrating), `store.sqlite_connection` (the connection, where each statement runs,
errors), `store.sqlite_schema` (the migrations),
`store.sqlite_statements` (the statements and row decoding), `store.sqlite_runs`,
`store.sqlite_approvals` and `store.sqlite_journal` (the operations of the `Store` protocol).
"""

from __future__ import annotations

from pytest_harness.store.sqlite_approvals import SQLiteApprovals
from pytest_harness.store.sqlite_connection import Synchronous as Synchronous
from pytest_harness.store.sqlite_journal import SQLiteJournal
from pytest_harness.store.sqlite_runs import SQLiteRuns
from pytest_harness.store.sqlite_schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]


class SQLiteStore(SQLiteRuns, SQLiteApprovals, SQLiteJournal):
    """Runs in a SQLite file; several processes on one host may share it."""

    kind = "sqlite"
