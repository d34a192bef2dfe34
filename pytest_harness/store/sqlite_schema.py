"""The SQLite store's schema: its migrations, in order, and the version they lead to.

Migration `n` (a tuple of statements) takes a file from schema version `n - 1` to `n`; they are
applied by `SQLiteConnection._migrate` in one `BEGIN IMMEDIATE` transaction.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION"]

_MIN_SQLITE = (3, 35, 0)
"""`RETURNING` arrived in SQLite 3.35."""

_EVENT_TRIGGERS = (
    # The first events of a new run.
    """
    CREATE TRIGGER runs_created AFTER INSERT ON runs
    WHEN NEW.pending_events IS NOT NULL
    BEGIN
        INSERT INTO events (run_id, kind, data, at)
            SELECT NEW.run_id, json_extract(value, '$.kind'), json_extract(value, '$.data'),
                   NEW.updated_at
            FROM json_each(NEW.pending_events) ORDER BY key;
        UPDATE runs SET pending_events = NULL WHERE seq = NEW.seq;
    END
    """,
    # The events and approval requests of a commit.
    """
    CREATE TRIGGER runs_committed AFTER UPDATE OF pending_events, pending_approvals ON runs
    WHEN NEW.pending_events IS NOT NULL OR NEW.pending_approvals IS NOT NULL
    BEGIN
        INSERT INTO events (run_id, kind, data, at)
            SELECT NEW.run_id, json_extract(value, '$.kind'), json_extract(value, '$.data'),
                   NEW.updated_at
            FROM json_each(NEW.pending_events) ORDER BY key;
        INSERT INTO approvals (
            approval_id, run_id, execution_key, args_digest, tool, args, rule_id,
            approvers, requested_by, self_approve, requested_at
        )
            SELECT json_extract(value, '$.approval_id'), NEW.run_id,
                   json_extract(value, '$.execution_key'),
                   json_extract(value, '$.args_digest'), json_extract(value, '$.tool'),
                   json_extract(value, '$.args'), json_extract(value, '$.rule_id'),
                   json_extract(value, '$.approvers'),
                   json_extract(value, '$.requested_by'),
                   json_extract(value, '$.self_approve'), NEW.updated_at
            FROM json_each(NEW.pending_approvals) ORDER BY key;
        UPDATE runs SET pending_events = NULL, pending_approvals = NULL WHERE seq = NEW.seq;
    END
    """,
    # The event of an approval's decision.
    """
    CREATE TRIGGER approvals_decided AFTER UPDATE OF pending_event ON approvals
    WHEN NEW.pending_event IS NOT NULL
    BEGIN
        INSERT INTO events (run_id, kind, data, at)
            VALUES (NEW.run_id, json_extract(NEW.pending_event, '$.kind'),
                    json_extract(NEW.pending_event, '$.data'), NEW.decided_at);
        UPDATE approvals SET pending_event = NULL WHERE seq = NEW.seq;
    END
    """,
)
"""The triggers that insert into `events` (version 1's; version 5 drops and makes them again
around its rebuild of the table)."""

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # version 1
    (
        """
        CREATE TABLE runs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            task TEXT NOT NULL,
            tenant TEXT,
            tenant_key TEXT NOT NULL,
            principal TEXT NOT NULL,
            input TEXT NOT NULL,
            labels TEXT NOT NULL,
            idempotency_key TEXT,
            status TEXT NOT NULL,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            lease_owner TEXT,
            lease_token INTEGER NOT NULL DEFAULT 0,
            lease_expires REAL,
            pending_events TEXT,
            pending_approvals TEXT
        )
        """,
        "CREATE UNIQUE INDEX runs_idempotency ON runs (tenant_key, task, idempotency_key)",
        "CREATE INDEX runs_session ON runs (session_id, seq)",
        "CREATE INDEX runs_status ON runs (status, seq)",
        """
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            at REAL NOT NULL
        )
        """,
        "CREATE INDEX events_run ON events (run_id, id)",
        """
        CREATE TABLE approvals (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            approval_id TEXT NOT NULL UNIQUE,
            run_id TEXT NOT NULL,
            execution_key TEXT NOT NULL,
            args_digest TEXT NOT NULL,
            tool TEXT NOT NULL,
            args TEXT NOT NULL,
            rule_id TEXT NOT NULL,
            approvers TEXT NOT NULL,
            requested_by TEXT NOT NULL,
            self_approve INTEGER NOT NULL,
            requested_at REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'approve', 'decline')),
            approver TEXT,
            approver_roles TEXT NOT NULL DEFAULT '[]',
            reason TEXT,
            decided_at REAL,
            pending_event TEXT
        )
        """,
        "CREATE INDEX approvals_run ON approvals (run_id, seq)",
        *_EVENT_TRIGGERS,
    ),
    # version 2: a pending pause or cancel request, written by any process, read by commits
    ("ALTER TABLE runs ADD COLUMN control TEXT",),
    # version 3: online eval samples, one per run and grader
    (
        """
        CREATE TABLE samples (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            task TEXT NOT NULL,
            grader TEXT NOT NULL,
            score REAL,
            passed INTEGER NOT NULL,
            detail TEXT,
            error TEXT,
            created_at REAL NOT NULL,
            UNIQUE (run_id, grader)
        )
        """,
        "CREATE INDEX samples_created ON samples (created_at, seq)",
        "CREATE INDEX samples_task_grader ON samples (task, grader, created_at)",
    ),
    # version 4: the flight recorder's journal and artifacts (DESIGN §12)
    (
        "ALTER TABLE runs ADD COLUMN record INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN pending_journal TEXT",
        "ALTER TABLE approvals ADD COLUMN pending_journal TEXT",
        "UPDATE runs SET record = 1 WHERE json_extract(state, '$.rec') IS NOT NULL",
        """
        CREATE TABLE journal (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            step INTEGER NOT NULL,
            attempt_id TEXT,
            ts REAL NOT NULL,
            execution_key TEXT,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (run_id, seq),
            UNIQUE (run_id, id)
        )
        """,
        """
        CREATE TABLE artifacts (
            sha256 TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            name TEXT,
            data BLOB NOT NULL
        )
        """,
        # The journal entries of a write travel in `pending_journal`; each gets the run's next
        # seq, and an id the run already journaled (a retried write) is skipped.
        *(
            f"""
            CREATE TRIGGER {name} AFTER {event} ON {table}
            WHEN NEW.pending_journal IS NOT NULL
            BEGIN
                INSERT INTO journal (run_id, seq, id, session_id, step, attempt_id, ts,
                                     execution_key, kind, payload)
                    SELECT NEW.run_id, base.n + row_number() OVER (ORDER BY j.key), j.id,
                           {session}, json_extract(j.value, '$.step'),
                           json_extract(j.value, '$.attempt_id'), json_extract(j.value, '$.ts'),
                           json_extract(j.value, '$.execution_key'),
                           json_extract(j.value, '$.kind'), json_extract(j.value, '$.payload')
                    FROM (SELECT key, value, json_extract(value, '$.id') AS id
                          FROM json_each(NEW.pending_journal)) AS j,
                         (SELECT coalesce(max(seq), 0) AS n FROM journal
                          WHERE run_id = NEW.run_id) AS base
                    WHERE NOT EXISTS (SELECT 1 FROM journal
                                      WHERE run_id = NEW.run_id AND id = j.id)
                    ORDER BY j.key;
                UPDATE {table} SET pending_journal = NULL WHERE seq = NEW.seq;
            END
            """
            for name, event, table, session in (
                ("runs_created_journal", "INSERT", "runs", "NEW.session_id"),
                ("runs_journaled", "UPDATE OF pending_journal", "runs", "NEW.session_id"),
                (
                    "approvals_journaled",
                    "UPDATE OF pending_journal",
                    "approvals",
                    "(SELECT session_id FROM runs WHERE run_id = NEW.run_id)",
                ),
            )
        ),
    ),
    # version 5: `events` without AUTOINCREMENT. Its ids stay as they were and new ones are
    # still the largest so far plus one (no event is ever deleted, and writers are serialized),
    # but an insert no longer reads and rewrites the `sqlite_sequence` row: one page less in
    # each commit's WAL frames. The table is copied (SQLite's way to change a table's
    # definition); the triggers that insert into it are made again around the copy.
    (
        "DROP TRIGGER runs_created",
        "DROP TRIGGER runs_committed",
        "DROP TRIGGER approvals_decided",
        """
        CREATE TABLE events_v5 (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            at REAL NOT NULL
        )
        """,
        "INSERT INTO events_v5 (id, run_id, kind, data, at) "
        "SELECT id, run_id, kind, data, at FROM events ORDER BY id",
        "DROP TABLE events",
        "ALTER TABLE events_v5 RENAME TO events",
        "CREATE INDEX events_run ON events (run_id, id)",
        *_EVENT_TRIGGERS,
    ),
)

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this code writes; a file with a newer one is refused."""
