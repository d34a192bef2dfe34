"""`Listener`: one `LISTEN` connection per store that wakes the streams following runs.

Writes that add events to a run call `pg_notify(channel, run_id)` in the same statement;
Postgres delivers the notification when the write commits. The listener holds a dedicated
connection (outside the pool) that listens on the schema's channel and calls the callbacks
registered for the notified run. When the connection drops it reconnects with a backoff and,
once listening again, wakes every follower: a notification sent while it was away is lost, so
each follower reads the store again from its own cursor, which is what makes a reconnect free
of gaps and repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

__all__ = ["Listener"]

log = logging.getLogger("pytest_harness.postgres")

_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0


class Listener:
    """Calls the callbacks of a run when a `NOTIFY` names it; reconnects by itself."""

    def __init__(
        self,
        dsn: str,
        channel: str,
        where: str,
        *,
        connect_timeout: float = 10.0,
        application_name: str = "pytest-harness listen",
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.channel = channel
        self.where = where
        self.connect_timeout = connect_timeout
        self.connected = False
        """Whether the `LISTEN` is in place now."""
        self.reconnects = 0
        """How many times the connection was lost and made again."""
        self._callbacks: dict[str, list[Callable[[], None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    def add(self, run_id: str, wake: Callable[[], None]) -> None:
        """Call `wake()` on each notification for `run_id` (and after each reconnect)."""
        self._callbacks.setdefault(run_id, []).append(wake)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, run_id: str, wake: Callable[[], None]) -> None:
        """Stop calling `wake()` (idempotent)."""
        callbacks = self._callbacks.get(run_id)
        if callbacks is not None:
            with contextlib.suppress(ValueError):
                callbacks.remove(wake)
            if not callbacks:
                del self._callbacks[run_id]

    async def ready(self, timeout: float | None = None) -> bool:
        """Wait until the `LISTEN` is in place, at most `timeout`; whether it is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout or self.connect_timeout)
        return self.connected

    async def close(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._callbacks.clear()

    def _wake_all(self) -> None:
        for callbacks in list(self._callbacks.values()):
            for wake in list(callbacks):
                wake()

    async def _run(self) -> None:
        backoff = _BACKOFF_MIN
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn,
                    autocommit=True,
                    connect_timeout=max(1, round(self.connect_timeout)),
                    application_name=self.application_name,
                )
            except psycopg.Error as exc:
                log.warning("postgres store %s: cannot listen: %s", self.where, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            self._conn = conn
            try:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                self.connected = True
                self._listening.set()
                backoff = _BACKOFF_MIN
                self._wake_all()  # anything written while nobody listened is read again
                async for note in conn.notifies():
                    for wake in list(self._callbacks.get(note.payload, ())):
                        wake()
            except psycopg.Error as exc:
                log.warning("postgres store %s: listening stopped: %s", self.where, exc)
            finally:
                self.connected = False
                self._listening.clear()
                self._conn = None
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
            self.reconnects += 1
            self._wake_all()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)
