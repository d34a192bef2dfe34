"""The `pytest-harness` console script, driven through `main(argv)` and as a real process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_harness.cli import main

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "quickstart"
INPUT = "Refund $250 on order A-1001."
DONE = "Done: the refund is on its way to your card."
R0 = """rules:
  - id: R0
    when: tool == "lookup_order"
    then: approve
    approvers: [support]
  - id: R1"""


@dataclass
class Out:
    code: int
    out: str
    err: str


@pytest.fixture
def quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private copy of examples/quickstart as the working directory, offline."""
    app = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns(".harness", "__pycache__"))
    monkeypatch.chdir(app)
    monkeypatch.setenv("HARNESS_ENV", "offline")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    yield app
    for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
        del sys.modules[name]
    while str(app) in sys.path:
        sys.path.remove(str(app))


@pytest.fixture
def cli(quickstart: Path, capsys: pytest.CaptureFixture[str]):
    def call(*argv: str) -> Out:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Out(code, captured.out, captured.err)

    return call


def run_id_of(text: str) -> str:
    found = re.search(r"^run: (run_[0-9a-f]{32}) \(orders\)$", text, re.MULTILINE)
    assert found, text
    return found.group(1)


def approval_id_of(text: str) -> str:
    found = re.search(r"^pending approval: (apr_[0-9a-f]{32}) ", text, re.MULTILINE)
    assert found, text
    return found.group(1)


def record_refund(cli) -> str:
    """Run the refund with --record and approve it as fiona (finance); return the run id."""
    started = cli("run", "orders", INPUT, "harness.yaml", "--principal", "ann", "--record")
    assert started.code == 0, started.err
    run_id = run_id_of(started.out)
    done = cli(
        "approve", run_id, approval_id_of(started.out), "approve", "harness.yaml",
        "--approver", "fiona", "--role", "finance",
    )  # fmt: skip
    assert done.code == 0, done.err
    return run_id


def edit_spec(old: str, new: str) -> None:
    spec = Path("harness.yaml")
    text = spec.read_text(encoding="utf-8")
    assert old in text
    spec.write_text(text.replace(old, new, 1), encoding="utf-8")


def one_error_line(result: Out, *fragments: str) -> None:
    """Exit 2, nothing on stdout, and exactly one `pytest-harness: error:` line on stderr."""
    assert result.code == 2
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("pytest-harness: error: ")
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0]


# -- run and approve ----------------------------------------------------------------------------


def test_run_that_waits_for_an_approval_exits_0_and_says_how_to_answer(cli) -> None:
    result = cli("run", "orders", INPUT, "harness.yaml", "--principal", "ann")
    assert result.code == 0 and result.err == ""
    run_id = run_id_of(result.out)
    approval_id = approval_id_of(result.out)
    assert result.out == (
        "status: awaiting_approval\n"
        f"run: {run_id} (orders)\n"
        "output: (none)\n"
        f'pending approval: {approval_id} refund {{"order_id": "A-1001", "amount": 250}} '
        "(rule R1, approvers: finance)\n"
        f"  answer it: pytest-harness approve {run_id} {approval_id} approve|decline "
        "harness.yaml --approver ID --role finance\n"
    )


def test_run_that_ends_limited_exits_1(cli) -> None:
    edit_spec("steps: 8", "steps: 1")
    result = cli("run", "orders", INPUT, "harness.yaml")
    assert result.code == 1 and result.err == ""
    assert "status: limited\n" in result.out
    assert "limit: steps\n" in result.out


def test_run_of_an_unknown_task_exits_2(cli) -> None:
    one_error_line(cli("run", "ordrs", INPUT, "harness.yaml"), "unknown task 'ordrs'", "'orders'")


def test_approve_with_a_wrong_role_exits_2_then_the_right_one_completes(cli) -> None:
    started = cli("run", "orders", INPUT, "harness.yaml", "--principal", "ann")
    run_id, approval_id = run_id_of(started.out), approval_id_of(started.out)

    refused = cli(
        "approve", run_id, approval_id, "approve", "harness.yaml", "--approver", "bob",
        "--role", "support",
    )  # fmt: skip
    one_error_line(refused, "'bob' may not answer", "finance", "support")
    assert refused.out == ""

    own = cli(
        "approve", run_id, approval_id, "approve", "harness.yaml", "--approver", "ann",
        "--role", "finance",
    )  # fmt: skip
    one_error_line(own, "may not approve its own request")

    done = cli(
        "approve", run_id, approval_id, "approve", "harness.yaml", "--approver", "fiona",
        "--role", "finance", "--reason", "customer is right",
    )  # fmt: skip
    assert done.code == 0 and done.err == ""
    assert done.out == f"status: completed\nrun: {run_id} (orders)\noutput: {DONE}\n"

    again = cli(
        "approve", run_id, approval_id, "decline", "harness.yaml", "--approver", "fiona",
        "--role", "finance",
    )  # fmt: skip
    one_error_line(again, approval_id)


def test_approve_an_unknown_run_or_approval_exits_2(cli) -> None:
    started = cli("run", "orders", INPUT, "harness.yaml", "--principal", "ann")
    run_id = run_id_of(started.out)
    unknown_run = cli(
        "approve", "run_" + "0" * 32, "apr_x", "approve", "harness.yaml", "--approver", "f",
    )  # fmt: skip
    one_error_line(unknown_run, "unknown run")
    unknown_approval = cli(
        "approve", run_id, "apr_nope", "approve", "harness.yaml", "--approver", "f",
    )  # fmt: skip
    one_error_line(unknown_approval, "no approval 'apr_nope'")


# -- show and runs ------------------------------------------------------------------------------


def test_show_prints_status_pending_usage_and_trace(cli) -> None:
    started = cli("run", "orders", INPUT, "harness.yaml", "--principal", "ann")
    run_id, approval_id = run_id_of(started.out), approval_id_of(started.out)
    waiting = cli("show", run_id, "harness.yaml")
    assert waiting.code == 0 and waiting.err == ""
    assert waiting.out == (
        "status: awaiting_approval\n"
        f"run: {run_id} (orders)\n"
        "output: (none)\n"
        "usage: 69 tokens in, 32 out, $0.000079, 2 steps, 1 tool call\n"
        f'pending approval: {approval_id} refund {{"order_id": "A-1001", "amount": 250}} '
        "(rule R1, approvers: finance)\n"
        "trace:\n"
        "  step 1 model default → call lookup_order\n"
        "  step 1 tool lookup_order → ok\n"
        "  step 2 model default → call refund\n"
        "  step 2 rule R1 → approve (tool refund)\n"
    )
    cli(
        "approve", run_id, approval_id, "approve", "harness.yaml", "--approver", "fiona",
        "--role", "finance",
    )  # fmt: skip
    done = cli("show", run_id, "harness.yaml", "-e", "offline")
    assert done.code == 0
    assert done.out.splitlines()[:4] == [
        "status: completed",
        f"run: {run_id} (orders)",
        f"output: {DONE}",
        "usage: 489 tokens in, 44 out, $0.000266, 3 steps, 2 tool calls",
    ]
    assert "pending" not in done.out
    assert done.out.endswith(
        "  step 2 approval refund → approve by fiona\n"
        "  step 2 tool refund → ok\n"
        f"  step 3 model default → say '{DONE}'\n"
        "  step 3 output → completed\n"
    )


def test_show_of_an_unknown_run_exits_2(cli) -> None:
    one_error_line(cli("show", "run_nope", "harness.yaml"), "unknown run 'run_nope'")


def test_runs_lists_runs_in_a_table_and_filters(cli) -> None:
    assert cli("runs", "harness.yaml").out == "no runs\n"
    waiting = run_id_of(cli("run", "orders", INPUT, "harness.yaml", "--principal", "ann").out)
    done = record_refund(cli)

    listed = cli("runs", "harness.yaml")
    assert listed.code == 0 and listed.err == ""
    header, *rows = [line.split() for line in listed.out.splitlines()]
    assert header == ["run", "id", "task", "status", "principal", "updated"]
    assert [row[:4] for row in rows] == [
        [done, "orders", "completed", "ann"],
        [waiting, "orders", "awaiting_approval", "ann"],
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", row[4]) for row in rows)

    only = cli("runs", "harness.yaml", "--status", "completed", "--task", "orders")
    assert [line.split()[0] for line in only.out.splitlines()[1:]] == [done]
    assert cli("runs", "harness.yaml", "--task", "nothing").out == "no runs\n"
    one_error_line(cli("runs", "harness.yaml", "--status", "done"), "invalid choice: 'done'")


# -- export -------------------------------------------------------------------------------------


def test_export_writes_a_yaml_recording_once(cli, quickstart: Path) -> None:
    run_id = record_refund(cli)
    written = cli("export", run_id, "recordings/refund.yaml", "harness.yaml")
    assert written.code == 0 and written.err == ""
    assert written.out == f"wrote recordings/refund.yaml (run {run_id})\n"
    text = (quickstart / "recordings" / "refund.yaml").read_text(encoding="utf-8")
    assert text.startswith("format: pytest-harness/recording@2\ntask: orders\n")
    assert "run_" not in text

    again = cli("export", run_id, "recordings/refund.yaml", "harness.yaml")
    one_error_line(again, "recordings/refund.yaml exists", "never overwrites")
    assert (quickstart / "recordings" / "refund.yaml").read_text(encoding="utf-8") == text

    # The same run exported again is byte-identical (a golden file holds no volatile values).
    cli("export", run_id, "recordings/again.yaml", "harness.yaml")
    assert (quickstart / "recordings" / "again.yaml").read_text(encoding="utf-8") == text


def test_export_verify_playback_and_replay_an_archive(cli) -> None:
    run_id = record_refund(cli)
    exported = cli("export", run_id, "refund.hx", "harness.yaml", "--include-payloads")
    assert (exported.code, exported.err) == (0, ""), exported.err
    assert exported.out == f"wrote refund.hx (run {run_id})\n"
    verified = cli("verify", "refund.hx")
    assert verified.code == 0, verified.out
    assert verified.out.startswith(f"refund.hx: valid, complete (run {run_id}, orders, completed)")
    shown = cli("verify", "refund.hx", "--json")
    report = json.loads(shown.out)
    assert (report["valid"], report["complete"], report["issues"]) == (True, True, [])
    played = cli("playback", "refund.hx")
    assert played.code == 0
    lines = played.out.splitlines()
    assert lines[0].startswith(f"run {run_id} (orders), session ses_")
    assert re.match(r"^seq\s+kind\s+step\s+attempt\s+execution key\s+summary", lines[1])
    assert re.match(r"^1\s+run\.started\s+0\s+task orders: 'Refund \$250", lines[2])
    assert any(
        re.search(r"tool\.dispatched\s+1\s+att_\S+\s+exk_\S+\s+lookup_order", ln) for ln in lines
    )
    data = json.loads(cli("playback", "refund.hx", "--json").out)
    assert [r["seq"] for r in data["records"]] == list(range(1, len(data["records"]) + 1))
    replayed = cli("replay", "refund.hx", "harness.yaml")
    assert replayed.code == 0, replayed.err
    assert replayed.out.startswith("same: recording refund.hx (orders) ended completed")


def test_a_metadata_only_archive_verifies_but_does_not_replay(cli) -> None:
    run_id = record_refund(cli)
    assert cli("export", run_id, "meta.hx", "harness.yaml").code == 0
    verified = cli("verify", "meta.hx")
    assert verified.code == 0
    assert "valid, incomplete" in verified.out and "payloads_omitted" in verified.out
    one_error_line(
        cli("replay", "meta.hx", "harness.yaml"), "no payloads to replay", "--include-payloads"
    )
    one_error_line(cli("export", run_id, "meta.hx", "harness.yaml"), "exists", "never overwrites")


def test_verify_exits_1_for_an_invalid_archive_and_playback_2(cli) -> None:
    Path("bad.hx").write_bytes(b"PK\x03\x04 not really")
    verified = cli("verify", "bad.hx")
    assert verified.code == 1
    assert "bad.hx: invalid" in verified.out and "bad_zip" in verified.out
    assert json.loads(cli("verify", "bad.hx", "--json").out)["valid"] is False
    one_error_line(cli("playback", "bad.hx"), "not a valid .hx archive")


def test_verify_and_playback_of_a_path_that_is_no_file_are_input_errors(cli) -> None:
    """A missing file or a folder is an input error (exit 2, one line naming the path), as
    for `export-incident`; a file that is not a valid archive stays `verify`'s exit 1."""
    Path("a-folder").mkdir()
    for command in ("verify", "playback"):
        for flags in ((), ("--json",)):
            one_error_line(cli(command, "nofile.hx", *flags), "nofile.hx: no such file")
            one_error_line(cli(command, "a-folder", *flags), "a-folder: a folder, not a file")
    Path("empty.hx").write_bytes(b"")
    verified = cli("verify", "empty.hx")
    assert verified.code == 1 and "empty.hx: invalid" in verified.out


def test_export_incident_reads_the_store_alone(cli) -> None:
    import sqlite3
    from contextlib import closing

    run_id = record_refund(cli)
    Path("harness.yaml").unlink()  # no spec needed
    with closing(sqlite3.connect(".harness/state.db")) as conn:
        (session,) = conn.execute(
            "SELECT session_id FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    result = cli(
        "export-incident", ".harness/state.db", session, run_id, "i.hx", "--include-payloads"
    )
    assert result.code == 0, result.err
    assert json.loads(cli("verify", "i.hx", "--json").out)["complete"] is True
    one_error_line(
        cli("export-incident", ".harness/state.db", "ses_x", run_id, "j.hx"), "does not belong"
    )
    one_error_line(cli("export-incident", "nope.db", session, run_id, "j.hx"), "no such file")
    one_error_line(cli("export-incident", ".harness", session, run_id, "j.hx"), "a folder, not")
    # DESIGN §8: a password is never typed on the command line (refused before connecting)
    with_password = "postgresql://app:hunter2@127.0.0.1:1/db?schema=s"
    refused = cli("export-incident", with_password, session, run_id, "j.hx")
    one_error_line(refused, "has a password in it", "$PGPASSWORD or a .pgpass")
    assert "hunter2" not in refused.err
    assert not Path("j.hx").exists()


def test_export_include_flags_do_nothing_for_yaml_and_say_so(cli) -> None:
    run_id = record_refund(cli)
    result = cli(
        "export", run_id, "r.yaml", "harness.yaml", "--include-payloads", "--include-artifacts"
    )
    assert result.code == 0
    assert result.err == (
        "pytest-harness: note: --include-payloads and --include-artifacts apply to .hx "
        "archives; a .yaml recording never holds request payloads or artifacts\n"
    )


def test_export_of_an_unrecorded_or_unknown_run_exits_2(cli) -> None:
    started = cli("run", "orders", INPUT, "harness.yaml")
    one_error_line(cli("export", run_id_of(started.out), "x.yaml", "harness.yaml"), "not recorded")
    one_error_line(cli("export", "run_nope", "x.yaml", "harness.yaml"), "unknown run 'run_nope'")
    assert not Path("x.yaml").exists()


# -- replay -------------------------------------------------------------------------------------


def test_replay_of_an_unchanged_run_is_same_and_exits_0(cli) -> None:
    run_id = record_refund(cli)
    result = cli("replay", run_id, "harness.yaml")
    assert result.code == 0 and result.err == ""
    assert result.out == (
        f"same: run {run_id} (orders) ended completed; the replay ended completed\n"
        "  output: same\n"
        "  model answers used: 3 of 3\n"
        "1 same, 0 drifted, 0 diverged\n"
    )


def test_golden_file_replay_after_export(cli) -> None:
    run_id = record_refund(cli)
    assert cli("export", run_id, "recordings/refund.yaml", "harness.yaml").code == 0
    result = cli("replay", "recordings/refund.yaml", "harness.yaml", "-e", "offline")
    assert result.code == 0 and result.err == ""
    assert result.out == (
        "same: recording recordings/refund.yaml (orders) ended completed; "
        "the replay ended completed\n"
        "  output: same\n"
        "  model answers used: 3 of 3\n"
        "1 same, 0 drifted, 0 diverged\n"
    )


def test_a_new_rule_that_requires_approval_is_status_drift_exit_1(cli) -> None:
    run_id = record_refund(cli)
    cli("export", run_id, "recordings/refund.yaml", "harness.yaml")
    edit_spec("rules:\n  - id: R1", R0)
    result = cli("replay", "recordings/refund.yaml", run_id, "harness.yaml")
    assert result.code == 1 and result.err == ""
    report = (
        "ended completed; the replay ended awaiting_approval\n"
        "  status: completed → awaiting_approval\n"
        "  decisions:\n"
        "    + step 1 rule R0 → approve (tool lookup_order)\n"
        "    - step 1 tool lookup_order → ok\n"
        "    - step 2 model default → call refund\n"
        "    - step 2 rule R1 → approve (tool refund)\n"
        "    - step 2 approval refund → approve by fiona\n"
        "    - step 2 tool refund → ok\n"
        f"    - step 3 model default → say '{DONE}'\n"
        "    - step 3 output → completed\n"
        "  output: changed\n"
        f"    - {DONE}\n"
        "    + (none)\n"
        "  model answers used: 1 of 3\n"
    )
    assert result.out == (
        f"changed: recording recordings/refund.yaml (orders) {report}"
        f"changed: run {run_id} (orders) {report}"
        "0 same, 2 drifted, 0 diverged; 2 failing (--fail-on status,output,decisions)\n"
    )


def test_a_prompt_only_change_fails_only_with_fail_on_requests(cli) -> None:
    run_id = record_refund(cli)
    edit_spec("Look orders up before acting on them.", "Always look orders up first.")
    default = cli("replay", run_id, "harness.yaml")
    assert default.code == 0
    assert default.out.startswith("same: ")
    assert "  model requests changed: 3 of 3 (system prompt: 1 line changed)\n" in default.out
    assert "    +You are the order desk of a shop. Always look orders up first.\n" in default.out
    assert default.out.endswith("1 same, 0 drifted, 0 diverged\n")

    strict = cli("replay", run_id, "harness.yaml", "--fail-on", "status,requests")
    assert strict.code == 1
    assert strict.out.endswith(
        "1 same, 0 drifted, 0 diverged; 1 failing (--fail-on status,requests)\n"
    )

    loose = cli("replay", run_id, "harness.yaml", "--fail-on", "requests", "--json")
    assert loose.code == 1


def test_fail_on_narrower_than_the_drift_exits_0(cli) -> None:
    run_id = record_refund(cli)
    edit_spec("rules:\n  - id: R1", R0)
    assert cli("replay", run_id, "harness.yaml", "--fail-on", "requests").code == 0
    assert cli("replay", run_id, "harness.yaml", "--fail-on", "decisions").code == 1


def test_replay_json_is_an_array_with_one_object_per_input(cli) -> None:
    run_id = record_refund(cli)
    cli("export", run_id, "recordings/refund.yaml", "harness.yaml")
    edit_spec("rules:\n  - id: R1", R0)
    result = cli("replay", run_id, "recordings/refund.yaml", "harness.yaml", "--json")
    assert result.code == 1 and result.err == ""
    items = json.loads(result.out)
    assert [item["input"] for item in items] == [run_id, "recordings/refund.yaml"]
    first = items[0]
    assert first["run_id"] == run_id and first["source"] is None
    assert first["same"] is False
    assert first["differences"] == ["decisions", "output", "status"]
    assert first["status"] == {"recorded": "completed", "replayed": "awaiting_approval"}
    assert first["decisions"][0]["change"] == "added"
    assert first["decisions"][0]["key"] == "R0"
    assert items[1]["source"] == "recordings/refund.yaml"
    assert items[1]["diverged"] is None


def test_a_corrupt_recording_exits_2_after_the_others_are_reported(cli, quickstart: Path) -> None:
    run_id = record_refund(cli)
    (quickstart / "bad.yaml").write_text("format: [\n", encoding="utf-8")
    alone = cli("replay", "bad.yaml", "harness.yaml")
    one_error_line(alone, "bad.yaml:", "invalid YAML")
    assert alone.out == "0 same, 0 drifted, 0 diverged, 1 not loaded\n"

    mixed = cli("replay", run_id, "bad.yaml", "harness.yaml")
    assert mixed.code == 2
    assert mixed.out.startswith(f"same: run {run_id} (orders)")
    assert mixed.out.endswith("1 same, 0 drifted, 0 diverged, 1 not loaded\n")
    assert mixed.err.splitlines() == [
        "pytest-harness: error: bad.yaml: bad recording file bad.yaml:2: invalid YAML: did not "
        "find expected node content (while parsing a flow node at line 2)"
    ]

    as_json = cli("replay", run_id, "bad.yaml", "harness.yaml", "--json")
    assert as_json.code == 2
    items = json.loads(as_json.out)
    assert items[1] == {
        "input": "bad.yaml",
        "error": {"type": "ArchiveError", "message": mixed.err.split("bad.yaml: ", 1)[1].strip()},
    }


def test_a_recording_of_a_newer_format_exits_2(cli, quickstart: Path) -> None:
    run_id = record_refund(cli)
    cli("export", run_id, "r.yaml", "harness.yaml")
    path = quickstart / "r.yaml"
    path.write_text(
        path.read_text(encoding="utf-8").replace("recording@2", "recording@9"), encoding="utf-8"
    )
    one_error_line(cli("replay", "r.yaml", "harness.yaml"), "recording@9", "recording@2")


def test_replay_of_an_unknown_run_or_a_missing_file_exits_2(cli) -> None:
    one_error_line(cli("replay", "run_nope", "harness.yaml"), "run_nope: unknown run 'run_nope'")
    one_error_line(cli("replay", "missing.yaml", "harness.yaml"), "file not found")
    one_error_line(cli("replay", "x.hx", "harness.yaml"), "x.hx: file not found")


def test_replay_of_many_inputs_shows_no_progress_bar_when_not_a_terminal(cli) -> None:
    run_id = record_refund(cli)
    result = cli("replay", run_id, run_id, run_id, "harness.yaml")
    assert result.code == 0 and result.err == ""
    assert result.out.endswith("3 same, 0 drifted, 0 diverged\n")


# -- bad specs and arguments --------------------------------------------------------------------


def test_a_malformed_spec_exits_2_naming_file_and_line(cli) -> None:
    edit_spec("tools: [lookup_order, refund]", "tools: [lookup_order, refnd]")
    # the line the edit is on, read from the file (the quickstart's listing changes)
    lines = Path("harness.yaml").read_text(encoding="utf-8").splitlines()
    line = 1 + next(i for i, text in enumerate(lines) if "refnd" in text)
    for argv in (
        ("run", "orders", INPUT, "harness.yaml"),
        ("runs", "harness.yaml"),
        ("replay", "run_x", "harness.yaml"),
    ):
        one_error_line(
            cli(*argv),
            f"harness.yaml:{line} tasks.orders.tools[1]: "
            "unknown tool 'refnd' (did you mean 'refund'?)",
        )


def test_a_missing_spec_or_env_exits_2(cli) -> None:
    one_error_line(cli("runs", "nope.yaml"), "nope.yaml", "not found")
    one_error_line(cli("runs", "harness.yaml", "-e", "offlin"), "offlin")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("frob",), "invalid choice: 'frob'"),
        (("run", "orders"), "run: the following arguments are required: INPUT"),
        (("run", "orders", "x", "a.yaml", "--spec", "b.yaml"), "two specs given"),
        (("replay",), "replay: the following arguments are required: RUN_ID|FILE|FOLDER"),
        (("mutate", "--min-score", "2"), "expected a number from 0 to 1, got '2'"),
        (("replay", "r", "harness.yaml", "--fail-on", "statuss"), "unknown kind 'statuss'"),
        (("approve", "r", "a", "yes", "harness.yaml", "--approver", "f"), "invalid choice: 'yes'"),
        (("approve", "r", "a", "approve", "harness.yaml"), "--approver"),
        (("approve", "r", "a", "approve", "harness.yaml", "--approver", ""), "must not be empty"),
        (("run", "orders", "x", "harness.yaml", "--principal", " "), "must not be empty"),
        (("runs", "harness.yaml", "--bogus"), "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_2_with_one_line(cli, argv: tuple[str, ...], fragment: str) -> None:
    one_error_line(cli(*argv), fragment)


def test_help_and_version_exit_0(cli) -> None:
    top = cli("--help")
    assert top.code == 0
    for name in ("run", "replay", "runs", "show", "approve", "export", "exit codes:"):
        assert name in top.out
    for name in ("export-incident", "verify", "playback"):
        assert name in top.out
    export = cli("export", "--help")
    assert export.code == 0
    assert "--include-payloads" in export.out and ".hx incident archive" in export.out
    assert cli("--version").out.startswith("pytest-harness ")


# -- the installed console script ---------------------------------------------------------------


def script(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("pytest-harness")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run(
        [str(exe), *argv],
        cwd=cwd,
        env={**env, "HARNESS_ENV": "offline"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_console_script_records_approves_exports_and_replays(quickstart: Path) -> None:
    started = script("run", "orders", INPUT, "harness.yaml", "--record", cwd=quickstart)
    assert started.returncode == 0, started.stderr
    run_id, approval_id = run_id_of(started.stdout), approval_id_of(started.stdout)
    assert "\x1b[" not in started.stdout  # no colour when not a terminal

    refused = script(
        "approve", run_id, approval_id, "approve", "harness.yaml", "--approver", "bob",
        cwd=quickstart,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr

    done = script(
        "approve", run_id, approval_id, "approve", "harness.yaml", "--approver", "fiona",
        "--role", "finance", cwd=quickstart,
    )  # fmt: skip
    assert done.returncode == 0 and "status: completed" in done.stdout

    exported = script("export", run_id, "recordings/refund.yaml", "harness.yaml", cwd=quickstart)
    assert exported.returncode == 0, exported.stderr
    edit_spec("rules:\n  - id: R1", R0)
    drift = script("replay", "recordings/refund.yaml", "harness.yaml", cwd=quickstart)
    assert drift.returncode == 1, drift.stderr
    assert "  status: completed → awaiting_approval\n" in drift.stdout

    module = subprocess.run(
        [sys.executable, "-m", "pytest_harness", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert module.returncode == 0 and module.stdout.startswith("pytest-harness ")


def test_replay_tools_safe_invokes_safe_tools(cli) -> None:
    run_id = record_refund(cli)
    tools = Path("shop/tools.py")
    tools.write_text(
        tools.read_text(encoding="utf-8").replace('"status": "delivered"', '"status": "lost"')
    )
    for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
        del sys.modules[name]
    assert cli("replay", run_id, "harness.yaml").code == 0  # no tool runs
    safe = cli("replay", run_id, "harness.yaml", "--tools", "safe")
    assert safe.code == 1
    assert "~ step 1 tool lookup_order → ok (result.status: 'delivered' → 'lost')" in safe.out
    bad = cli("replay", run_id, "harness.yaml", "--tools", "all")
    assert bad.code == 2 and "invalid choice: 'all'" in bad.err


def test_an_argument_that_is_not_utf8_is_a_usage_error_naming_it(cli) -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates, which no store can write:
    refused before anything runs, with one line and exit code 2."""
    bad = b"Refund \xff A-1".decode("utf-8", "surrogateescape")
    out = cli("run", "orders", bad, "harness.yaml", "--principal", "ann")
    assert out.code == 2 and out.out == ""
    assert out.err == (
        "pytest-harness: error: argument 3 ('Refund \\\\xff A-1') is not valid UTF-8; give "
        "text in UTF-8\n"
    )
