"""The CEL extension is loaded once per process, whichever threads compile first.

A Temporal worker's workflow tasks run on threads of their own, several at once, and a worker
that takes runs over replays them together: each may compile the first rule of its process.
Initialising the extension twice panics (a `BaseException` that a workflow task does not
catch: the task ends with no command, a nondeterminism error for the run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_threads_compiling_a_process_first_expressions_load_the_extension_once() -> None:
    # a fresh process (the extension is not loaded yet), its loading slowed down, so that both
    # threads ask for it before either has it: without the lock both would initialise it
    code = textwrap.dedent(
        """\
        import sys, threading, time
        import pytest_harness.cel as cel

        assert "cel.cel" not in sys.modules
        load = cel._load_extension_alone
        loads = []

        def slow_load():
            loads.append(1)
            time.sleep(0.3)
            return load()

        cel._load_extension_alone = slow_load
        failed = []

        def compile_one():
            try:
                cel.compile_expression('tool == "refund" && args.amount > 100')
            except BaseException as exc:  # a Rust panic is one
                failed.append(type(exc).__name__)

        threads = [threading.Thread(target=compile_one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(len(loads), failed)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "1 []", (done.stdout, done.stderr)
