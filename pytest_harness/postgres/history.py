"""The Postgres store's reads and its eval samples.

Sessions, run lists, events, the journal, artifacts and the runs there are to recover.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest_harness.postgres.sqltext as q
from pytest_harness.postgres.connection import _MAX_ID, PostgresConnection, _loads
from pytest_harness.store.base import (
    Event,
    JournalEntry,
    RunRecord,
    Sample,
    StoredArtifact,
    artifact_sha256,
    check_limit,
    check_samples,
    encode_json,
    parse_cursor,
)
from pytest_harness.store.rows import (
    JOURNAL_COLUMNS,
    journal_from_row,
    list_runs_query,
    sample_from_row,
    samples_query,
)
from pytest_harness.store.rows import record_from_row as _record

__all__ = ["PostgresHistory"]


class PostgresHistory(PostgresConnection):
    """Reads of sessions, runs, events, the journal and artifacts; eval samples."""

    # -- reading -----------------------------------------------------------------------------

    async def session_runs(self, session_id: str, *, before: str | None = None) -> list[RunRecord]:
        """Return the session's runs in creation order; with `before`, those created before it."""
        what = f"read the runs of session {session_id}"
        if before is None:
            rows = await self._q(
                what,
                f"SELECT {q.RUN} FROM runs WHERE session_id = %s ORDER BY seq",
                (session_id,),
            )
        else:
            rows = await self._q(
                what,
                f"SELECT {q.RUN} FROM runs WHERE session_id = %s "
                "AND seq < (SELECT seq FROM runs WHERE run_id = %s) ORDER BY seq",
                (session_id, before),
            )
            if not rows:
                await self._require_run(before)
        return [_record(row) for row in rows]

    async def list_runs(
        self,
        *,
        status: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Return runs, newest first, filtered by status, task and tenant."""
        query, params = list_runs_query(
            q.RUN, "%s", status=status, task=task, tenant=tenant, limit=limit
        )
        return [_record(row) for row in await self._q("list runs", query, params)]

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """Return the run's events with a cursor after `after`, in order."""
        position = min(parse_cursor(after), _MAX_ID)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        rows = await self._q(
            f"read the events of run {run_id}",
            "SELECT id, kind, data, at FROM events WHERE run_id = %s AND id > %s "
            "ORDER BY id LIMIT %s",
            (run_id, position, limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [
            Event(run_id=run_id, cursor=str(i), kind=kind, data=_loads(data), at=at)
            for i, kind, data, at in rows
        ]

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's journal entries after `seq` `after`, in order."""
        check_limit(limit)
        rows = await self._q(
            f"read the journal of run {run_id}",
            f"SELECT {JOURNAL_COLUMNS} FROM journal WHERE run_id = %s AND seq > %s "
            "ORDER BY seq LIMIT %s",
            (run_id, min(max(after, 0), _MAX_ID), limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [journal_from_row(row) for row in rows]

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Keep the artifact's bytes by hash (write-once: a second put is a no-op)."""
        artifact_sha256(artifact)
        await self._q(
            f"store artifact {artifact.sha256}",
            "INSERT INTO artifacts (sha256, media_type, name, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (sha256) DO NOTHING",
            (artifact.sha256, artifact.media_type, artifact.name, artifact.data),
        )

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact kept under `sha256`, or None."""
        rows = await self._q(
            f"read artifact {sha256}",
            "SELECT sha256, media_type, name, data FROM artifacts WHERE sha256 = %s",
            (sha256,),
        )
        if not rows:
            return None
        digest, media_type, name, data = rows[0]
        return StoredArtifact(sha256=digest, media_type=media_type, name=name, data=bytes(data))

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """Ids of `running` runs whose lease expired or that nobody holds, oldest first."""
        rows = await self._q(
            "list expired runs", q.EXPIRED, {"now": time.time() if now is None else now}
        )
        return [row[0] for row in rows]

    async def answered_runs(self, *, now: float | None = None, grace: float = 0.0) -> list[str]:
        """Ids of `awaiting_approval` runs with every approval answered and nobody driving them."""
        if not grace >= 0:
            raise ValueError(f"grace must be zero or more seconds, got {grace!r}")
        rows = await self._q(
            "list answered runs",
            q.ANSWERED,
            {"now": time.time() if now is None else now, "grace": grace},
        )
        return [row[0] for row in rows]

    # -- online eval samples -----------------------------------------------------------------

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Insert the samples in one statement; a `(run_id, grader)` already stored is skipped."""
        if not samples:
            return
        check_samples(samples)
        rows = encode_json(
            [
                {
                    "run_id": s.run_id,
                    "task": s.task,
                    "grader": s.grader,
                    "score": None if s.score is None else float(s.score),
                    "passed": bool(s.passed),
                    "detail": s.detail,
                    "error": s.error,
                    "created_at": s.created_at,
                }
                for s in samples
            ],
            f"{len(samples)} eval sample(s)",
        )
        await self._q(f"store {len(samples)} eval sample(s)", q.ADD_SAMPLES, (rows,))

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Stored samples, newest first, filtered."""
        check_limit(limit)
        query, params = samples_query(
            "%s", None, task=task, grader=grader, since=since, until=until, limit=limit
        )
        return [sample_from_row(row) for row in await self._q("read eval samples", query, params)]
