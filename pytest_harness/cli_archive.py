"""The archive commands of `pytest-harness`: `export-incident`, `verify`, `playback`.

Kept apart from `cli.py` (which wires them in with one call) so each command stays wiring and
display only: the work is `pytest_harness.archive`'s. `export-incident` loads no spec: it
reads the store alone. `verify` exits 0 for a valid archive and 1 for an invalid one;
`playback` prints the timeline (seq, kind, step, attempt, execution key, a one-line summary).
A FILE that does not exist or is a folder is an input error (exit 2) for both, as a missing
STORE is for `export-incident`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from pytest_harness.archive.export import ExportPolicy

__all__ = [
    "ARCHIVE_COMMANDS",
    "add_archive_commands",
    "include_flags",
    "policy_from_args",
    "summary",
]

Command = Callable[[str, str, str], argparse.ArgumentParser]

_INCLUDE_HELP = {
    "--include-payloads": "include each record's payload (redacted; default: metadata only)",
    "--include-artifacts": "include the bytes of the artifacts the payloads refer to",
}


def include_flags(sub: argparse.ArgumentParser) -> None:
    """`--include-payloads` and `--include-artifacts`."""
    for flag, text in _INCLUDE_HELP.items():
        sub.add_argument(flag, action="store_true", help=text)


def policy_from_args(args: argparse.Namespace) -> ExportPolicy:
    """The export policy the flags ask for."""
    from pytest_harness.archive.export import ExportPolicy

    return ExportPolicy(
        include_payloads=args.include_payloads, include_artifacts=args.include_artifacts
    )


def add_archive_commands(command: Command) -> None:
    """Add the archive subcommands through the CLI's `command(name, help, description)`."""
    incident = command(
        "export-incident",
        "export a run from a store alone, as a .hx archive",
        "Export run RUN_ID of session SESSION_ID from STORE (a sqlite file, or a "
        "postgresql:// URL) as a .hx incident archive, without loading a spec or running "
        "anything: for a run whose worker crashed. Metadata only unless --include-payloads; "
        "an existing DEST is never overwritten.",
    )
    incident.add_argument("store", metavar="STORE", help="sqlite file or postgresql:// URL")
    incident.add_argument("session_id", metavar="SESSION_ID")
    incident.add_argument("run_id", metavar="RUN_ID")
    incident.add_argument("dest", metavar="DEST", help="the archive to write (.hx)")
    include_flags(incident)

    verify = command(
        "verify",
        "check a .hx archive",
        "Check a .hx archive: structure, checksums, sequence, identities, artifact catalogue "
        "and final state (valid), and whether it holds the whole run (complete). Lists every "
        "issue. Exits 0 when valid (complete or not), 1 when invalid.",
    )
    verify.add_argument("file", metavar="FILE", help="the .hx archive")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")

    play = command(
        "playback",
        "show a .hx archive's timeline",
        "Read a valid .hx archive and print its timeline: one row per record with its seq, "
        "kind, step, attempt, execution key and a summary of its payload. Nothing runs.",
    )
    play.add_argument("file", metavar="FILE", help="the .hx archive")
    play.add_argument("--json", action="store_true", help="print manifest, records and report")


async def _export_incident(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.archive.export import export_incident, open_store

    _refuse_password(args.store)

    async with open_store(args.store) as store:
        path = await export_incident(
            store, args.session_id, args.run_id, args.dest, policy=policy_from_args(args)
        )
    out.print(f"wrote {path} (run {args.run_id})", soft_wrap=True)
    return 0


def _archive_file(given: str) -> None:
    """Refuse a FILE that is no file (`ArchiveError`: an input error, exit 2)."""
    from pytest_harness.errors import ArchiveError

    path = Path(given)
    if path.is_dir():
        raise ArchiveError(f"cannot read {given}: a folder, not a file (give a .hx archive)")
    if not path.exists():
        raise ArchiveError(f"cannot read {given}: no such file")


def _refuse_password(store: str) -> None:
    """A `postgresql://` STORE must not carry its password (DESIGN §8): `StoreError`, exit 2.

    A command line stays in the shell's history and in the process list; libpq reads the
    password from `$PGPASSWORD` or a `.pgpass` file instead.
    """
    if not store.startswith(("postgresql://", "postgres://")):
        return
    from urllib.parse import urlsplit

    from pytest_harness.archive.export import _safe_url
    from pytest_harness.errors import StoreError

    try:
        password = urlsplit(store).password
    except ValueError:
        return  # a malformed URL: opening it says what is wrong
    if password is not None:
        raise StoreError(
            f"STORE {_safe_url(store)} has a password in it: a command line keeps it in the "
            "shell's history and the process list; give the URL without it and the password "
            "in $PGPASSWORD or a .pgpass file"
        )


async def _verify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.text import Text

    from pytest_harness.archive.reader import verify_archive

    _archive_file(args.file)
    report = verify_archive(args.file)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        verdict = "valid" if report.valid else "invalid"
        line = Text(f"{args.file}: ", style="bold")
        line.append(verdict, style="bold green" if report.valid else "bold red")
        if report.valid:
            line.append(", complete" if report.complete else ", incomplete")
        manifest = report.manifest or {}
        if manifest.get("run_id"):
            status = (manifest.get("final_state") or {}).get("status")
            line.append(f" (run {manifest['run_id']}, {manifest.get('task')}, {status})")
        out.print(line, soft_wrap=True)
        for issue in report.issues:
            where = f" (record {issue.seq})" if issue.seq is not None else ""
            out.print(f"  {issue.code}{where}: {issue.message}", soft_wrap=True)
    return 0 if report.valid else 1


async def _playback(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pytest_harness.archive.reader import playback

    _archive_file(args.file)
    played = playback(args.file)
    if args.json:
        data = {
            "manifest": dict(played.manifest),
            "records": [dict(r) for r in played.records],
            "report": played.report.to_dict(),
            "artifacts": sorted(played.artifacts),
        }
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return 0
    from rich.table import Table

    manifest = played.manifest
    status = (manifest.get("final_state") or {}).get("status")
    out.print(
        f"run {manifest['run_id']} ({manifest['task']}), session {manifest['session_id']}: "
        f"{status}; {len(played.records)} records"
        + ("" if played.report.complete else " (incomplete)"),
        soft_wrap=True,
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("seq", "kind", "step", "attempt", "execution key", "summary"):
        table.add_column(name, no_wrap=name != "summary")
    for record in played.records:
        table.add_row(
            str(record["seq"]),
            record["kind"],
            str(record["step"]),
            _short_id(record.get("attempt_id")),
            _short_id(record.get("execution_key")),
            summary(record),
        )
    out.print(table)
    return 0


def _short_id(value: Any) -> str:
    if not value:
        return ""
    text = str(value)
    return text if len(text) <= 16 else text[:14] + "…"


def _field(value: Any, key: str) -> Any:
    """`value[key]` when `value` is a mapping, else None: a payload is shown as it is."""
    return value.get(key) if isinstance(value, Mapping) else None


def _names(calls: Any) -> str:
    """The names of a list of proposed calls (anything else in the list is skipped)."""
    if not isinstance(calls, list):
        return ""
    return ", ".join(str(_field(c, "name")) for c in calls if isinstance(c, Mapping))


def summary(record: Mapping[str, Any]) -> str:
    """One line about a record's payload, for the timeline.

    Only `verify` vouches for a payload's shape per kind; a payload of the wrong shape is shown
    with what it has (a missing value as `None`), never a crash.
    """
    payload = record.get("payload")
    if not isinstance(payload, Mapping):
        payload = {}
    kind = str(record.get("kind", ""))
    if record.get("omitted"):
        names = [
            str(payload[k])
            for k in ("model", "name", "tool", "event", "status", "how")
            if k in payload
        ]
        return " ".join([*names, "(payload omitted)"])
    text: str
    if kind == "run.started":
        text = f"task {payload.get('task')}: {payload.get('input')!r}"
    elif kind == "model.started":
        text = f"{payload.get('model')} turn {payload.get('turn')}"
    elif kind == "model.response":
        answer = payload.get("answer")
        calls = _names(_field(answer, "calls"))
        text = f"{payload.get('model')}: " + (
            f"calls {calls}" if calls else repr(_field(answer, "text"))
        )
    elif kind == "model.completed":
        usage = payload.get("usage")
        text = (
            f"{payload.get('model')}: {_field(usage, 'input_tokens')} tokens in, "
            f"{_field(usage, 'output_tokens')} out"
        )
    elif kind == "model.processed":
        calls = _names(payload.get("calls"))
        shown = f"calls {calls}" if calls else repr(payload.get("text"))
        text = f"{payload.get('model')}: {shown}"
    elif kind.startswith("approval."):
        text = f"{payload.get('tool')} {payload.get('decision') or payload.get('rule') or ''}"
    elif kind == "model.failed":
        text = f"{payload.get('model')}: {payload.get('error') or payload.get('exception')}"
    elif kind.startswith("tool."):
        outcome = payload.get("outcome")
        text = str(payload.get("name") or payload.get("tool") or "")
        if "args" in payload:
            text += " " + json.dumps(payload["args"], ensure_ascii=False)
        if outcome:
            text += f" → {_field(outcome, 'kind')}"
        if payload.get("how"):
            text += f" ({payload['how']})"
    elif kind == "checkpoint":
        text = f"{payload.get('status')}"
    elif kind == "event":
        text = str(payload.get("event"))
    else:
        text = json.dumps(payload, ensure_ascii=False)
    return text if len(text) <= 100 else text[:99] + "…"


ARCHIVE_COMMANDS: dict[
    str, Callable[[argparse.Namespace, Console, Console], Coroutine[Any, Any, int]]
] = {
    "export-incident": _export_incident,
    "verify": _verify,
    "playback": _playback,
}
