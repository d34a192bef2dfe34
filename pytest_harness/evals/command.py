"""`pytest-harness eval report`: its arguments and what it does, for `cli_parser.py` to wire in.

Exit codes: 0 when every pass rate is at least `--min-pass` (or none is asked for), and with a
note when the window holds no samples; 1 when a pass rate is below `--min-pass`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_harness.evals.report import build_report
from pytest_harness.spec.schema import parse_duration

if TYPE_CHECKING:
    from rich.console import Console

    from pytest_harness.runtime.harness import Harness

__all__ = ["add_eval_command", "eval_report"]

EXIT_OK = 0
EXIT_BELOW = 1


def add_eval_command(
    parser: argparse.ArgumentParser, spec_and_env: Callable[[argparse.ArgumentParser], None]
) -> None:
    """Add `report` (and its options) under the `eval` command's parser."""
    commands = parser.add_subparsers(dest="eval_command", metavar="COMMAND", required=True)
    report = commands.add_parser(
        "report",
        help="pass rates of the online eval samples",
        description="Print, per grader and task, the count of online eval samples, their pass "
        "rate and mean score, and the change of the pass rate against the previous window of "
        "the same length. Exits 1 when a pass rate is below --min-pass.",
    )
    spec_and_env(report)
    report.add_argument(
        "--since",
        metavar="DURATION",
        type=_duration,
        default=parse_duration("7d"),
        help="the window: samples of the last DURATION (30m, 12h, 7d; default 7d)",
    )
    report.add_argument(
        "--min-pass",
        metavar="P",
        type=_share,
        help="exit 1 when a grader's pass rate on a task is below P (0..1)",
    )
    report.add_argument("--json", action="store_true", help="print the report as JSON")


def _duration(value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"the window must be longer than 0, got {value!r}")
    return seconds


def _share(value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {value!r}")
    return share


async def eval_report(harness: Harness, args: argparse.Namespace, out: Console) -> int:
    """Run `eval report` against `harness`'s store and print it; return the exit code."""
    window: float = args.since
    until = time.time()
    since = until - window
    current = await harness.samples(since=since, limit=None)
    previous = await harness.store.samples(since=since - window, until=since, limit=None)
    report = build_report(current, previous, since=since, until=until, min_pass=args.min_pass)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    elif report.rows:
        out.print(report.table())
    failing = report.failing
    if not report.rows:
        if not args.json:
            out.print(
                f"no eval samples in the last {_human(window)}: nothing graded (is "
                "evals.online set, with a sample share above 0?)",
                soft_wrap=True,
            )
        return EXIT_OK
    if failing and not args.json:
        names = ", ".join(f"{r.grader} on {r.task} ({r.pass_rate:.0%})" for r in failing)
        out.print(f"below --min-pass {args.min_pass:g}: {names}", soft_wrap=True)
    return EXIT_BELOW if failing else EXIT_OK


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
