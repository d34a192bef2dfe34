"""The `pytest-harness` console script: run, replay, inspect and export runs; score coverage.

`mutate` scores how much of the policy the golden runs protect.

The archive commands (`export-incident`, `verify`, `playback`) live in `cli_archive.py`.

Wiring and display only: every command loads the spec with `pytest_harness.load` and calls one
`Harness` method. Exit codes: 0 same or success, 1 drift or failure, 2 usage or input error (one
line on stderr, no traceback).

The parser is in `cli_parser.py`, the command handlers in `cli_commands.py` and what they
print in `cli_display.py`; this module holds `main`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn, TypeVar

from pytest_harness.cli_commands import _COMMANDS
from pytest_harness.cli_display import _consoles, _error, _message
from pytest_harness.cli_parser import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
    _choose_spec,
    _UsageError,
    build_parser,
)
from pytest_harness.cli_parser import PROG as PROG
from pytest_harness.errors import HarnessError

__all__ = [
    "EXIT_DRIFT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

T = TypeVar("T")


def console() -> NoReturn:
    """The `pytest-harness` console script: `main()`, then exit with its code.

    A process that used Temporal (its SDK's core runs native threads) leaves without the
    interpreter's final clean-up, once its output is flushed: that clean-up can abort while a
    native thread still calls back into Python (`PyGILState_Release`), turning an exit code of
    0, 1 or 2 into a crash. Nothing of ours is left to clean up by then.
    """
    code = main()
    if "temporalio" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console script with `argv` (default: `sys.argv[1:]`) and return its exit code."""
    out, err = _consoles()
    try:
        _check_unicode(sys.argv[1:] if argv is None else argv)
        args = build_parser().parse_args(argv)
        _choose_spec(args)
    except _UsageError as exc:
        _error(err, str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler = _COMMANDS[args.command]
    try:
        with asyncio.Runner() as runner:
            runner.get_loop().set_default_executor(_DaemonThreads())
            return runner.run(_terminable(handler(args, out, err)))
    except (HarnessError, OSError) as exc:
        _error(err, _message(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error(err, f"interrupted; {_KEPT}")
        return EXIT_INTERRUPTED
    except _Terminated:
        _error(err, f"terminated (SIGTERM); {_KEPT}")
        return EXIT_TERMINATED


EXIT_INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report it)."""

EXIT_TERMINATED = 143
"""The exit code of a command stopped by SIGTERM (128 + SIGTERM, as shells report it)."""

_KEPT = (
    "what was committed is kept: a run this command was driving stays `running` "
    "from its last commit, with its lease released (`runs --status running` lists it; "
    "`worker` or `harness.resume(run_id)` continues it)"
)


class _Terminated(Exception):
    """The command's coroutine was cancelled because the process got SIGTERM."""


async def _terminable(work: Coroutine[Any, Any, int]) -> int:
    """Await `work`; on SIGTERM, cancel it as Ctrl-C does, then raise `_Terminated`.

    Without this, SIGTERM (`kill`, a container stop, a CI job's timeout) ended the process
    where it stood: no message, and the lease of a run it was driving held until it expired
    (`resume` refused with `RunBusy` meanwhile; 30 s by default). Now the drive unwinds like
    one stopped by Ctrl-C: its lease is released and the store closed. A second SIGTERM
    while it unwinds ends the process at once (the default action). `worker` installs its
    own handler while it serves (a first signal stops it at a clean boundary).
    """
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        loop.remove_signal_handler(signal.SIGTERM)  # the next one ends the process at once
        if main is not None:
            main.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
        return await work  # no signal handlers here (Windows, or not the main thread)
    try:
        return await work
    except asyncio.CancelledError:
        if terminated and main is not None and main.uncancel() == 0:
            raise _Terminated from None
        raise
    finally:
        if not terminated:
            loop.remove_signal_handler(signal.SIGTERM)


class _DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """The default executor of a command's event loop: each job in a daemon thread of its own.

    Synchronous tools and `function` models run in it (`asyncio.to_thread`). Such a thread
    cannot be stopped: it runs on after its call's `timeout` or the run's deadline cut it off,
    and after Ctrl-C. A `ThreadPoolExecutor`'s threads are joined when the loop closes and
    again when the interpreter exits, so a tool blocked for good kept the command from ever
    exiting, its output printed or its Ctrl-C handled. A daemon thread is left behind instead:
    the run let go of the call already (its outcome is `timeout`, or the run was interrupted
    and a resume decides by the tool's replay policy).
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="pytest-harness-call")

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller's to judge, as in a pool's worker
                future.set_exception(exc)
            else:
                future.set_result(result)

        threading.Thread(target=call, name="pytest-harness-call", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: a call still running is abandoned (see the class)."""


def _check_unicode(argv: Sequence[str]) -> None:
    """Refuse an argument that is not valid UTF-8, before anything runs (`_UsageError`).

    Python keeps such bytes as lone surrogates, which no store can write.
    """
    for position, arg in enumerate(argv, 1):
        if arg.isascii():
            continue  # the common case, without importing the stores' helpers at start-up
        from pytest_harness.store.helpers import utf8_error

        if utf8_error(arg) is not None:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise _UsageError(
                f"argument {position} ({shown!r}) is not valid UTF-8; give text in UTF-8"
            )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
