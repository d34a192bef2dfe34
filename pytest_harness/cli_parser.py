"""The `pytest-harness` command line: its parser, argument types, and the spec it names.

`build_parser` declares every command and option (the archive commands come from
`cli_archive.py`); `_choose_spec` picks the spec a command loads (DESIGN §8). The program name
and the exit codes live here too, since the parser's help states them.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import NoReturn

from pytest_harness.cli_archive import add_archive_commands, include_flags
from pytest_harness.replay.report import DEFAULT_FAIL_ON, FAIL_ON
from pytest_harness.runtime.results import RunStatus

__all__ = ["EXIT_DRIFT", "EXIT_OK", "EXIT_USAGE", "PROG", "build_parser"]

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
