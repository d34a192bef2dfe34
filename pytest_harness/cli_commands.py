"""The handlers of the `pytest-harness` commands: one coroutine per command, and the table of them.

Each loads the spec with `pytest_harness.load`, calls one `Harness` method and prints what it
got (`cli_display.py`); it returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_harness.cli_archive import ARCHIVE_COMMANDS, policy_from_args
from pytest_harness.cli_display import (
    _error,
    _message,
    _print_result,
    _progress,
    _status_text,
    _summary,
)
from pytest_harness.cli_parser import EXIT_DRIFT, EXIT_OK, EXIT_USAGE, PROG
from pytest_harness.errors import HarnessError
from pytest_harness.redaction import redact
from pytest_harness.runtime.results import RunResult, RunStatus

if TYPE_CHECKING:
    from rich.console import Console

    from pytest_harness.replay.report import ReplayReport
    from pytest_harness.runtime.harness import Harness

__all__: list[str] = []


async def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.principal import Principal

    principal = Principal(id=args.principal, roles=tuple(args.roles), tenant=args.tenant)
    async with _load(args, record=True if args.record else None) as harness:
        result = await harness.run(args.task, args.input, principal=principal, tenant=args.tenant)
    _print_result(out, result, args)
    return _exit_for(result)


async def _replay(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.cli_inputs import recordings_under
    from pytest_harness.recording.sniff import not_a_recording

    sources: list[str] = []
    in_folders: set[str] = set()
    outcomes: list[tuple[str, ReplayReport | Exception]] = []
    skipped: list[tuple[str, str]] = []
    for source in args.sources:
        if not Path(source).is_dir():
            sources.append(source)
            continue
        found = recordings_under(Path(source))
        if not found:
            outcomes.append(
                (source, HarnessError("no recordings (.yaml, .yml, .hx) under this folder"))
            )
        sources += [str(p) for p in found]
        in_folders.update(str(p) for p in found)
    async with _load(args) as harness:
        show_progress = len(sources) > 1 and not args.json and err.is_terminal
        with _progress(err, len(sources), enabled=show_progress) as advance:
            for source in sources:
                try:
                    outcomes.append((source, await harness.replay(source, tools=args.tools)))
                except (HarnessError, OSError) as exc:
                    # A spec or script kept beside the recordings is not one (DESIGN §8).
                    kind = not_a_recording(Path(source)) if source in in_folders else None
                    if kind is None:
                        outcomes.append((source, exc))
                    else:
                        skipped.append((source, kind))
                advance(source)
    fail_on: frozenset[str] = args.fail_on
    reports = [(s, o) for s, o in outcomes if not isinstance(o, Exception)]
    errors = [(s, o) for s, o in outcomes if isinstance(o, Exception)]
    if args.json:
        items: list[dict[str, Any]] = []
        for source, outcome in outcomes:
            if isinstance(outcome, Exception):
                error = {"type": type(outcome).__name__, "message": _message(outcome)}
                items.append({"input": source, "error": error})
            else:
                items.append({"input": source, **redact(outcome.to_dict())})
        for source, kind in skipped:
            items.append({"input": source, "skipped": f"{kind}, not a recording"})
        sys.stdout.write(json.dumps(items, indent=2, ensure_ascii=False) + "\n")
    else:
        from pytest_harness.report import render_report

        for _, report in reports:
            render_report(report, out, fail_on)
        out.print(_summary(reports, len(errors), fail_on), soft_wrap=True)
        for source, kind in skipped:
            out.print(f"skipped {source}: {kind}, not a recording", soft_wrap=True, markup=False)
    for source, problem in errors:
        _error(err, f"{source}: {_message(problem)}")
    if errors:
        return EXIT_USAGE
    return EXIT_DRIFT if any(r.failed(fail_on) for _, r in reports) else EXIT_OK


async def _runs(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    async with _load(args) as harness:
        summaries = await harness.runs(status=args.status, task=args.task)
    if not summaries:
        out.print("no runs", soft_wrap=True)
        return EXIT_OK
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("run id", "task", "status", "principal", "updated"):
        table.add_column(name, no_wrap=True)
    for s in summaries:
        updated = datetime.fromtimestamp(s.updated_at).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(s.run_id, s.task, _status_text(s.status), s.principal, updated)
    out.print(table)
    return EXIT_OK


async def _show(args: argparse.Namespace, out: Console, err: Console) -> int:
    async with _load(args) as harness:
        result = await harness.result(args.run_id)
    _print_result(out, result, args, detail=True)
    return EXIT_OK


async def _approve(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.principal import Principal

    approver = Principal(id=args.approver, roles=tuple(args.roles), tenant=args.tenant)
    async with _load(args) as harness:
        result = await harness.approve(
            args.run_id, args.approval_id, args.decision, approver=approver, reason=args.reason
        )
    _print_result(out, result, args)
    return _exit_for(result)


async def _export(args: argparse.Namespace, out: Console, err: Console) -> int:
    async with _load(args) as harness:
        try:
            path = await harness.export(args.run_id, args.dest, policy=policy_from_args(args))
        except FileExistsError:
            raise FileExistsError(
                f"{args.dest} exists; export never overwrites a file: remove it or choose "
                "another DEST"
            ) from None
    ignored = [
        flag
        for flag, given in (
            ("--include-payloads", args.include_payloads),
            ("--include-artifacts", args.include_artifacts),
        )
        if given
    ]
    out.print(f"wrote {path} (run {args.run_id})", soft_wrap=True)
    if ignored and not str(args.dest).endswith(".hx"):
        err.print(
            f"{PROG}: note: {' and '.join(ignored)} apply to .hx archives; a .yaml recording "
            "never holds request payloads or artifacts",
            soft_wrap=True,
        )
    return EXIT_OK


async def _eval(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.evals.command import eval_report

    async with _load(args) as harness:
        return await eval_report(harness, args, out)


async def _mutate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.cli_inputs import default_recordings
    from pytest_harness.mutate import mutate

    recordings: list[str] = args.recordings or [str(default_recordings())]
    report = await mutate(args.spec, recordings, env=args.env)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        out.print(report.render(), soft_wrap=True)
    ratio = report.ratio
    if ratio is None:
        why = (
            "every mutant is invalid (none loaded)"
            if report.results
            else "it has no rules, guards, task tools or budgets to mutate"
        )
        _error(err, f"nothing to score in {args.spec}: {why}")
        return EXIT_USAGE
    if args.min_score is not None and ratio < args.min_score:
        if not args.json:
            out.print(
                f"score {ratio:.2f} is below --min-score {args.min_score:g}: add golden runs "
                "that exercise the survivors",
                soft_wrap=True,
            )
        return EXIT_DRIFT
    return EXIT_OK


async def _worker(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.worker import run_worker

    async with _load(args) as harness:
        return await run_worker(harness, args)


_COMMANDS: dict[str, Callable[[argparse.Namespace, Console, Console], Coroutine[Any, Any, int]]] = {
    "run": _run,
    "replay": _replay,
    "runs": _runs,
    "show": _show,
    "approve": _approve,
    "export": _export,
    "eval": _eval,
    "mutate": _mutate,
    "worker": _worker,
    **ARCHIVE_COMMANDS,
}


def _exit_for(result: RunResult) -> int:
    """0 for a run that completed or waits; 1 for one that ended any other way."""
    ended_badly = result.status.ended and result.status is not RunStatus.COMPLETED
    return EXIT_DRIFT if ended_badly else EXIT_OK


def _load(args: argparse.Namespace, *, record: bool | None = None) -> Harness:
    from pytest_harness.loading import load

    return load(args.spec, env=args.env, record=record)
