"""The SQLite store's reads and writes of what runs leave: events, journal, artifacts, samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_harness.store.base import (
    Event,
    JournalEntry,
    Sample,
    StoredArtifact,
    artifact_sha256,
    check_limit,
    check_samples,
    parse_cursor,
)
from pytest_harness.store.rows import (
    JOURNAL_COLUMNS,
    journal_from_row,
    sample_from_row,
    samples_query,
)
from pytest_harness.store.sqlite_connection import SQLiteConnection
from pytest_harness.store.sqlite_statements import _MAX_ID, _loads

__all__ = ["SQLiteJournal"]


class SQLiteJournal(SQLiteConnection):
    """Events, journal entries, artifacts and eval samples in a SQLite file."""

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """Return the run's events with a cursor after `after`, in order."""
        position = min(parse_cursor(after), _MAX_ID)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        rows = await self._q(
            f"read the events of run {run_id}",
            "SELECT id, kind, data, at FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
            (run_id, position, -1 if limit is None else limit),
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
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        rows = await self._q(
            f"read the journal of run {run_id}",
            f"SELECT {JOURNAL_COLUMNS} FROM journal WHERE run_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (run_id, min(max(after, 0), _MAX_ID), -1 if limit is None else limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [journal_from_row(row) for row in rows]

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Keep the artifact's bytes by hash (write-once: a second put is a no-op)."""
        artifact_sha256(artifact)
        await self._w(
            f"store artifact {artifact.sha256}",
            "INSERT INTO artifacts (sha256, media_type, name, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (sha256) DO NOTHING",
            (artifact.sha256, artifact.media_type, artifact.name, artifact.data),
        )

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact kept under `sha256`, or None."""
        rows = await self._q(
            f"read artifact {sha256}",
            "SELECT sha256, media_type, name, data FROM artifacts WHERE sha256 = ?",
            (sha256,),
        )
        if not rows:
            return None
        digest, media_type, name, data = rows[0]
        return StoredArtifact(sha256=digest, media_type=media_type, name=name, data=bytes(data))

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Insert the samples in one statement; a `(run_id, grader)` already stored is skipped."""
        if not samples:
            return
        check_samples(samples)
        rows = ", ".join("(?, ?, ?, ?, ?, ?, ?, ?)" for _ in samples)
        params: list[Any] = []
        for s in samples:
            score = None if s.score is None else float(s.score)
            params += [s.run_id, s.task, s.grader, score, int(bool(s.passed))]
            params += [s.detail, s.error, s.created_at]
        await self._w(
            f"store {len(samples)} eval sample(s)",
            "INSERT INTO samples (run_id, task, grader, score, passed, detail, error, created_at) "
            f"VALUES {rows} ON CONFLICT (run_id, grader) DO NOTHING",
            params,
        )

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
        sql, params = samples_query(
            "?", -1, task=task, grader=grader, since=since, until=until, limit=limit
        )
        return [sample_from_row(row) for row in await self._q("read eval samples", sql, params)]
