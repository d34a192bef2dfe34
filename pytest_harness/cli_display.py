"""What the `pytest-harness` console script prints: consoles, errors, run results, summaries.

Display only (rich on a terminal, plain text otherwise); the commands in `cli_commands.py`
call these.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pytest_harness.cli_parser import _FAIL_ON_ORDER, PROG
from pytest_harness.redaction import redact
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.trace import Trace

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from pytest_harness.replay.report import ReplayReport

__all__: list[str] = []

_STATUS_STYLES = {
    RunStatus.COMPLETED: "bold green",
    RunStatus.AWAITING_APPROVAL: "bold yellow",
    RunStatus.AWAITING_RESOLUTION: "bold yellow",
    RunStatus.PAUSED: "bold yellow",
    RunStatus.RUNNING: "bold",
}


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
