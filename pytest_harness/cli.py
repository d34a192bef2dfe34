"""The `pytest-harness` console script: run, replay, inspect and export runs; score coverage.

`mutate` scores how much of the policy the golden runs protect.

The archive commands (`export-incident`, `verify`, `playback`) live in `cli_archive.py`.

Wiring and display only: every command loads the spec with `pytest_harness.load` and calls one
`Harness` method. Exit codes: 0 same or success, 1 drift or failure, 2 usage or input error (one
line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import textwrap
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pytest_harness.cli_archive import (
    ARCHIVE_COMMANDS,
    add_archive_commands,
    include_flags,
    policy_from_args,
)
from pytest_harness.errors import HarnessError
from pytest_harness.redaction import redact
from pytest_harness.replay.report import DEFAULT_FAIL_ON, FAIL_ON
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.trace import Trace

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from pytest_harness.replay.report import ReplayReport
    from pytest_harness.runtime.harness import Harness

__all__ = ["EXIT_DRIFT", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

PROG = "pytest-harness"
EXIT_OK = 0
"""Same, success, or a run that completed or waits for a person."""
EXIT_DRIFT = 1
"""A replay that drifted or diverged, or a run that ended failed, refused, limited or cancelled."""
EXIT_USAGE = 2
"""Bad arguments, or input that cannot be used: a spec, a run id, a recording, an approver."""

_EXIT_CODES = """\
exit codes:
  0  same / success (a run that completed, or waits for an approval)
  1  drift or failure (a replay that changed per --fail-on or diverged; a run that ended
     failed, refused, limited or cancelled)
  2  usage or input error (bad arguments, a malformed spec or recording, an unknown run,
     task or approval, a refused approver, an existing export destination)"""

_STATUS_STYLES = {
    RunStatus.COMPLETED: "bold green",
    RunStatus.AWAITING_APPROVAL: "bold yellow",
    RunStatus.AWAITING_RESOLUTION: "bold yellow",
    RunStatus.PAUSED: "bold yellow",
    RunStatus.RUNNING: "bold",
}


_FAIL_ON_ORDER = ("status", "output", "decisions", "requests")


class _UsageError(Exception):
    """Bad command-line arguments (argparse's complaint, kept to one line)."""


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors become one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage block and exiting."""
        command = self.prog.removeprefix(PROG).strip()
        where = f"{command}: " if command else ""
        raise _UsageError(f"{where}{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `pytest-harness` and its subcommands (DESIGN §8)."""
    from pytest_harness import __version__

    parser = _Parser(
        prog=PROG,
        description="Run, record, replay and inspect the runs of a harness.yaml.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name,
            help=help,
            description=textwrap.fill(description, width=88),
            epilog=_EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return sub

    def spec_and_env(sub: argparse.ArgumentParser, *, positional: bool = True) -> None:
        if positional:
            sub.add_argument("spec", metavar="SPEC", nargs="?", help=_SPEC_HELP)
        sub.add_argument(
            "--spec",
            dest="spec_option",
            metavar="PATH",
            help="the harness.yaml to load, instead of the SPEC argument",
        )
        sub.add_argument(
            "-e",
            "--env",
            metavar="ENV",
            help="environment overlay to apply (default: $HARNESS_ENV, else none)",
        )

    run = command(
        "run",
        "run a task on an input",
        "Run TASK on INPUT until it ends or waits for a person, then print its status, run id "
        "and output (and the approval it waits for). A run that completes or waits exits 0; "
        "one that ends failed, refused, limited or cancelled exits 1.",
    )
    run.add_argument("task", metavar="TASK", help="the task's name in the spec")
    run.add_argument("input", metavar="INPUT", help="the input text")
    spec_and_env(run)
    run.add_argument(
        "--principal",
        metavar="ID",
        type=_name,
        default="cli",
        help="who starts the run (default: cli)",
    )
    run.add_argument(
        "--role",
        metavar="R",
        type=_name,
        dest="roles",
        action="append",
        default=[],
        help="a role of the principal (repeat for several)",
    )
    run.add_argument(
        "--tenant", metavar="T", type=_name, help="the tenant the run (and its principal) belong to"
    )
    run.add_argument(
        "--record",
        action="store_true",
        help="record the run for replay and export (load with record=True)",
    )

    replay = command(
        "replay",
        "replay recorded runs against the current spec",
        "Replay stored runs (by id), golden recording files, or every recording under a folder "
        "against SPEC and print how each differs from its recording. Nothing calls out and no "
        "tool runs. Exits 1 when any replay differs in a --fail-on kind or diverged. A last "
        "argument that is a spec file (not a recording) is SPEC.",
    )
    replay.add_argument(
        "sources",
        metavar="RUN_ID|FILE|FOLDER",
        nargs="+",
        help="stored run ids, recording files (.yaml, .hx exported with payloads), or folders "
        "of them",
    )
    spec_and_env(replay, positional=False)
    replay.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of the reports, one object per input",
    )
    replay.add_argument(
        "--tools",
        choices=["safe"],
        default=None,
        help="safe: really invoke the tools whose replay policy is safe and compare their "
        "results with the recorded ones (default: no tool runs)",
    )
    replay.add_argument(
        "--fail-on",
        metavar="KINDS",
        type=_fail_on,
        default=DEFAULT_FAIL_ON,
        help="comma-separated differences that fail (exit 1): "
        f"{','.join(_FAIL_ON_ORDER)} (default: "
        f"{','.join(k for k in _FAIL_ON_ORDER if k in DEFAULT_FAIL_ON)}); a divergence always "
        "fails",
    )

    runs = command("runs", "list stored runs", "List the runs in SPEC's store, newest first.")
    spec_and_env(runs)
    runs.add_argument(
        "--status", choices=[s.value for s in RunStatus], help="only runs with this status"
    )
    runs.add_argument("--task", metavar="T", help="only runs of this task")

    show = command(
        "show",
        "show one run",
        "Show a stored run: status, output, error or limit, usage, pending work and its trace.",
    )
    show.add_argument("run_id", metavar="RUN_ID")
    spec_and_env(show)

    approve = command(
        "approve",
        "answer a pending approval",
        "Answer an approval of a waiting run; the run resumes when no approval is left open. "
        "Prints the resulting status and output, and exits like `run`.",
    )
    approve.add_argument("run_id", metavar="RUN_ID")
    approve.add_argument("approval_id", metavar="APPROVAL_ID")
    approve.add_argument("decision", choices=["approve", "decline"])
    spec_and_env(approve)
    approve.add_argument("--approver", metavar="ID", type=_name, required=True, help="who answers")
    approve.add_argument(
        "--role",
        metavar="R",
        type=_name,
        dest="roles",
        action="append",
        default=[],
        help="a role of the approver (repeat for several)",
    )
    approve.add_argument(
        "--tenant", metavar="T", type=_name, help="the approver's tenant (must be the run's)"
    )
    approve.add_argument("--reason", metavar="TEXT", help="why, kept with the decision")

    export = command(
        "export",
        "write a recorded run to a file",
        "Write a recorded run as a .hx incident archive (metadata only unless "
        "--include-payloads) or a golden recording file (.yaml: redacted, fixed key order, no "
        "volatile values), by DEST's suffix. An existing DEST is never overwritten.",
    )
    export.add_argument("run_id", metavar="RUN_ID")
    export.add_argument("dest", metavar="DEST", help="the file to write (.hx or .yaml)")
    spec_and_env(export)
    include_flags(export)
    add_archive_commands(command)
    from pytest_harness.evals.command import add_eval_command

    add_eval_command(
        command("eval", "online eval samples", "Report on the online eval samples in the store."),
        spec_and_env,
    )

    mutate = command(
        "mutate",
        "score how much of the policy the golden runs protect",
        "Make every single-point mutant of SPEC's policy (remove a rule, flip its effect, move "
        "a threshold across recorded values, remove or weaken a guard, remove a tool from a "
        "task, lower a budget below a recorded use, remove an approver role), replay every "
        "recording against each, and report which mutants no recording catches (survivors). "
        "Score: killed / mutants that load. A first argument that is a spec file (not a "
        "recording) is SPEC; RECORDINGS default to the harness_recordings folder of the pytest "
        "configuration here, else ./recordings. No recordings: exit 2 (nothing to score).",
    )
    mutate.add_argument(
        "recordings",
        metavar="RECORDINGS",
        nargs="*",
        help="recording files or folders (default: harness_recordings, else ./recordings)",
    )
    spec_and_env(mutate, positional=False)
    mutate.add_argument(
        "--min-score",
        metavar="S",
        type=_ratio,
        help="exit 1 when the score (killed / total, 0..1) is below S",
    )
    mutate.add_argument(
        "--json",
        action="store_true",
        help='print {"score": {...}, "mutants": [...]} instead of the table',
    )
    from pytest_harness.worker import add_worker_command

    add_worker_command(
        command(
            "worker",
            "recover and drive runs until stopped",
            "Claim and drive the runs that need a driver: runs a stopped worker left running "
            "(once their lease expired) and runs whose approvals were answered but never "
            "resumed. Runs until SIGTERM or SIGINT, then lets each run reach its next "
            "boundary, releases its lease and exits 0. Logs one JSON line per event on stderr. "
            "Needs a store processes share (sqlite, postgres). With execution.use: temporal, "
            "it hosts the spec's runs on its Temporal task queue instead (workflows, model and "
            "tool activities), as <name>@<spec digest>: a run started for another digest ends "
            "failed naming both, unless that digest is given with --accept.",
        ),
        spec_and_env,
    )
    return parser


_SPEC_HELP = "the harness.yaml to load (default: --spec, $HARNESS_SPEC, else ./harness.yaml)"


def _ratio(value: str) -> float:
    """A score between 0 and 1."""
    try:
        ratio = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value!r}") from None
    if not 0 <= ratio <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value!r}")
    return ratio


def _name(value: str) -> str:
    """A principal id or role: not empty."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def _fail_on(value: str) -> frozenset[str]:
    """Parse `status,output` into a set of fail-on kinds; argparse reports a bad one."""
    kinds = frozenset(part.strip() for part in value.split(",") if part.strip())
    unknown = sorted(kinds - FAIL_ON)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown kind {', '.join(map(repr, unknown))} "
            f"(choose from {', '.join(_FAIL_ON_ORDER)})"
        )
    return kinds


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
        args = build_parser().parse_args(argv)
        _choose_spec(args)
    except _UsageError as exc:
        _error(err, str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler = _COMMANDS[args.command]
    try:
        return asyncio.run(handler(args, out, err))
    except (HarnessError, OSError) as exc:
        _error(err, _message(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error(err, "interrupted")
        return 130


def _choose_spec(args: argparse.Namespace) -> None:
    """Set `args.spec` (DESIGN §8); `replay` takes SPEC last and `mutate` first, when given."""
    from pytest_harness.cli_inputs import NoSpec, choose_spec, is_spec_file

    if not hasattr(args, "spec_option"):  # a command that loads no spec (cli_archive.py)
        return
    given: str | None = getattr(args, "spec", None)
    if args.command == "replay" and len(args.sources) > 1 and is_spec_file(args.sources[-1]):
        given = args.sources.pop()
    elif args.command == "mutate" and args.recordings and is_spec_file(args.recordings[0]):
        given = args.recordings.pop(0)
    try:
        args.spec = choose_spec(given, args.spec_option)
    except NoSpec as exc:
        raise _UsageError(f"{args.command}: {exc} (see '{PROG} {args.command} --help')") from None


# -- commands ---------------------------------------------------------------------------------


async def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.runtime.principal import Principal

    principal = Principal(id=args.principal, roles=tuple(args.roles), tenant=args.tenant)
    async with _load(args, record=True if args.record else None) as harness:
        result = await harness.run(args.task, args.input, principal=principal, tenant=args.tenant)
    _print_result(out, result, args)
    return _exit_for(result)


async def _replay(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.cli_inputs import recordings_under

    sources: list[str] = []
    outcomes: list[tuple[str, ReplayReport | Exception]] = []
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
    async with _load(args) as harness:
        show_progress = len(sources) > 1 and not args.json and err.is_terminal
        with _progress(err, len(sources), enabled=show_progress) as advance:
            for source in sources:
                try:
                    outcomes.append((source, await harness.replay(source, tools=args.tools)))
                except (HarnessError, OSError) as exc:
                    outcomes.append((source, exc))
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
        sys.stdout.write(json.dumps(items, indent=2, ensure_ascii=False) + "\n")
    else:
        from pytest_harness.report import render_report

        for _, report in reports:
            render_report(report, out)
        out.print(_summary(reports, len(errors), fail_on), soft_wrap=True)
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
    from pytest_harness.runtime.principal import Principal

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


# -- display ----------------------------------------------------------------------------------


def _consoles() -> tuple[Console, Console]:
    """A console on stdout and one on stderr: colour on a terminal, plain text otherwise."""
    from rich.console import Console

    options: dict[str, Any] = {"highlight": False, "markup": False, "emoji": False}
    out = Console(**options)
    err = Console(stderr=True, **options)
    if not out.is_terminal:
        out.width = max(out.width, 200)  # piped: keep table rows (run ids) whole
    return out, err


def _error(err: Console, message: str) -> None:
    from rich.text import Text

    line = Text(f"{PROG}: error: ", style="bold red")
    line.append(" ".join(message.splitlines()))
    err.print(line, soft_wrap=True)


def _message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _status_text(status: RunStatus) -> Text:
    from rich.text import Text

    return Text(status.value, style=_STATUS_STYLES.get(status, "bold red"))


def _print_result(
    out: Console, result: RunResult, args: argparse.Namespace, *, detail: bool = False
) -> None:
    """Status, run id, output, error or limit, pending work; with `detail`, usage and trace."""
    from rich.text import Text

    def line(label: str, value: str | Text) -> None:
        text = Text(f"{label}: ", style="bold")
        text.append(value)
        out.print(text, soft_wrap=True)

    line("status", _status_text(result.status))
    line("run", f"{result.run_id} ({result.task})")
    output = redact(result.output)
    line("output", "(none)" if output is None else output)
    if result.error:
        error = redact(dict(result.error))
        line("error", f"{error.get('type')}: {error.get('message')}")
    if result.limit:
        line("limit", result.limit)
    if detail:
        u = result.usage
        usd = f"{u.usd:.6f}".rstrip("0").rstrip(".")
        line(
            "usage",
            f"{u.tokens_in} tokens in, {u.tokens_out} out, ${usd}, "
            f"{_count(u.steps, 'step')}, {_count(u.tool_calls, 'tool call')}"
            + (f", {_count(u.truncated, 'answer')} cut at the token limit" if u.truncated else ""),
        )
    approval = result.approval
    for pending in result.pending:
        call = f"{pending.call.name} {_json(redact(dict(pending.call.args)))}"
        if pending.status == "approval":
            approvers = ""
            if approval is not None and approval.approval_id == pending.approval_id:
                roles = ", ".join(approval.approvers) or "any role"
                approvers = f" (rule {approval.rule_id}, approvers: {roles})"
            line("pending approval", f"{pending.approval_id} {call}{approvers}")
        else:
            line("pending uncertain", f"{pending.execution_key} {call} (resolve it)")
    if approval is not None and not detail and result.status is RunStatus.AWAITING_APPROVAL:
        role = f" --role {approval.approvers[0]}" if approval.approvers else ""
        env = f" -e {args.env}" if args.env else ""
        tenant = getattr(args, "tenant", None)
        also = f" --tenant {tenant}" if tenant else ""
        out.print(
            f"  answer it: {PROG} approve {result.run_id} {approval.approval_id} "
            f"approve|decline {args.spec}{env} --approver ID{role}{also}",
            soft_wrap=True,
        )
    if detail:
        out.print(Text("trace:", style="bold"), soft_wrap=True)
        trace = Trace.from_list(redact(result.trace.to_list()))
        for decision_line in trace.render().splitlines():
            out.print(f"  {decision_line}", soft_wrap=True)


def _summary(reports: list[tuple[str, ReplayReport]], errors: int, fail_on: frozenset[str]) -> str:
    """`3 same, 1 drifted, 0 diverged`, with errors and failures when there are any."""
    same = sum(1 for _, r in reports if r.same)
    diverged = sum(1 for _, r in reports if r.divergence is not None)
    drifted = len(reports) - same - diverged
    text = f"{same} same, {drifted} drifted, {diverged} diverged"
    if errors:
        text += f", {errors} not loaded"
    failing = sum(1 for _, r in reports if r.failed(fail_on))
    if failing:
        kinds = ",".join(k for k in _FAIL_ON_ORDER if k in fail_on) or '""'  # DESIGN's order
        text += f"; {failing} failing (--fail-on {kinds})"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _exit_for(result: RunResult) -> int:
    """0 for a run that completed or waits; 1 for one that ended any other way."""
    ended_badly = result.status.ended and result.status is not RunStatus.COMPLETED
    return EXIT_DRIFT if ended_badly else EXIT_OK


def _load(args: argparse.Namespace, *, record: bool | None = None) -> Harness:
    from pytest_harness.runtime.harness import load

    return load(args.spec, env=args.env, record=record)


@contextmanager
def _progress(err: Console, total: int, *, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A transient progress bar on stderr; yields `advance(source)`."""
    if not enabled:
        yield lambda source: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    ) as progress:
        task = progress.add_task("", total=total)

        def advance(source: str) -> None:
            progress.update(task, advance=1, description=source)

        yield advance


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
