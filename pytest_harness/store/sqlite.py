"""`SQLiteStore`: runs, events and approvals in one SQLite file, shared by processes on one host.

The file is created with mode 0600 (it holds raw prompts, answers and tool arguments), and an
existing one (with its `-wal` and `-shm`) that others may read is tightened to 0600 on open, or
opening fails naming its mode. It is used in WAL mode, with `PRAGMA synchronous` as configured
and a busy timeout, so several processes can use it at once without `database is locked`
reaching them.

Every write the runtime makes is one transaction: a single SQL statement (atomic together with
its triggers), or a `BEGIN IMMEDIATE … COMMIT` of a row's statement and its events' inserts.
It runs inline on the event loop's thread when it can take the write lock at once (busy
timeout zero), and otherwise on the store's worker thread, where it waits up to the busy
timeout (`store.sqlite_connection` says why, and how long a write can hold the loop). Reads
run on the worker thread.

- `commit` is `BEGIN IMMEDIATE`, one fenced `UPDATE runs … WHERE run_id = ? AND lease_token
  = ?`, an `INSERT INTO events` per event when the `UPDATE` found the run, and `COMMIT`. The
  `UPDATE` is the narrowest of three that applies, tried in turn until one finds the row:
  the steady one (the status this store last wrote is unchanged: it is not written, so the
  `runs_status` index is not touched, and a `WHERE status = ? AND control IS NULL` checks
  it), one that writes the status (`AND control IS NULL`), and, when a pause or cancel is
  pending, one that clears the request the driver acted on and hands back what is left
  (`RETURNING control`). The first two return nothing: the cursor's row count says whether
  they found the run. When the last finds nothing too, the token is stale or the run
  unknown, and `store.sql_base` reads back which. The boundary's approval requests and
  journal entries travel in the `pending_approvals` and `pending_journal` columns as JSON
  arrays; `AFTER UPDATE` triggers move their items into the `approvals` and `journal`
  tables (`json_each`) and clear the columns. A statement that finds no row updates none, so
  the triggers never fire and nothing is written. Each statement names only what it writes
  (sqlite3 adapts a bound `None` or `bool` at the cost of two exceptions): no NULL or flag
  is bound.
- `create_run` is `BEGIN IMMEDIATE`, one `INSERT` of the columns it has values for (with
  `ON CONFLICT (tenant_key, task, idempotency_key) WHERE idempotency_key IS NOT NULL DO
  NOTHING` for a run with an idempotency key: the cursor's row count says whether it made
  the row), the inserts of its first events when it did, and `COMMIT`.
- `request_control` is one `UPDATE runs SET control = …` guarded by the run's status.
- `decide_approval` is one compare-and-set `UPDATE approvals … WHERE status = 'pending'`, and
  its event travels in `approvals.pending_event` to a trigger.
- Leases are single `UPDATE … RETURNING lease_token` statements.

A write statement in autocommit mode, like `BEGIN IMMEDIATE`, takes the write lock when it
starts, so the busy timeout applies and no read-then-write upgrade can fail; one that fails
to get the lock has written nothing, so trying it again (on the worker thread) neither loses
nor doubles a write. A transaction's statements run in one synchronous call that awaits
nothing, so another asyncio task's statement cannot slip into it. (A caller cancelled while it
awaits a write on the worker thread does not stop the write: it still runs, whole or not at
all.) The schema migrations run in one `BEGIN IMMEDIATE … COMMIT` before the connection is
handed out. Event cursors are the `events` table's integer ids, each the largest so far plus
one (no event is ever deleted; the table has no `AUTOINCREMENT` since schema version 5, which
spares each insert the `sqlite_sequence` row): writers are serialized, so ids become visible in
order.

The connection is opened lazily in the process that uses it and refused in any other (a
connection must never cross `fork()`); make a new store in each process.

The store is put together from parts, each in its own module: `store.sqlite_file` (the file,
opening, migrating), `store.sqlite_connection` (the connection, where each statement runs,
errors), `store.sqlite_schema` (the migrations),
`store.sqlite_statements` (the statements and row decoding), `store.sqlite_runs`,
`store.sqlite_approvals` and `store.sqlite_journal` (the operations of the `Store` protocol);
the leases and the read-backs of a write that found nothing are `store.sql_base`'s, which the
Postgres store shares.
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
