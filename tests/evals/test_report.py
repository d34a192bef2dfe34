"""`pytest-harness eval report`: the table, the previous window, JSON and the exit codes."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_harness.cli import main
from pytest_harness.evals.report import build_report
from pytest_harness.store import SQLiteStore
from pytest_harness.store.base import Sample
from tests.evals.conftest import EvalsApp

DAY = 86400.0


@dataclass
class Out:
    code: int
    out: str
    err: str


@pytest.fixture
def app(evals_app: EvalsApp, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HARNESS_ENV", raising=False)
    return evals_app.write(
        "- {id: polite, check: regex, pattern: '(?i)thank'}",
        state="{use: sqlite, path: state.db}",
    )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Out:
    code = main(list(argv))
    captured = capsys.readouterr()
    return Out(code, captured.out, captured.err)


def store_samples(spec: Path, samples: list[Sample]) -> None:
    async def write() -> None:
        store = SQLiteStore(spec.parent / "state.db")
        try:
            await store.add_samples(samples)
        finally:
            await store.close()

    asyncio.run(write())


def samples(grader: str, task: str, at: float, passed: list[bool]) -> list[Sample]:
    return [
        Sample(
            run_id=f"run_{grader}_{task}_{at}_{n}",
            task=task,
            grader=grader,
            score=1.0 if ok else 0.0,
            passed=ok,
            created_at=at,
        )
        for n, ok in enumerate(passed)
    ]


def test_no_samples_exits_0_with_a_note(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    got = run_cli(capsys, "eval", "report", str(app))
    assert got.code == 0
    assert "no eval samples in the last 7d" in got.out
    got = run_cli(capsys, "eval", "report", str(app), "--min-pass", "0.9")
    assert got.code == 0


def test_the_table_and_the_change_against_the_previous_window(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    store_samples(
        app,
        samples("polite", "orders", now - 1 * DAY, [True, True, True, False])  # 75%
        + samples("polite", "orders", now - 8 * DAY, [True, False])  # 50% the week before
        + samples("judged", "orders", now - 2 * DAY, [True])
        + samples("polite", "orders", now - 20 * DAY, [False] * 5),  # older: not counted
    )
    got = run_cli(capsys, "eval", "report", str(app))
    assert got.code == 0, got.err
    lines = [line.split() for line in got.out.splitlines()]
    assert lines[0] == [
        "grader",
        "task",
        "samples",
        "pass",
        "rate",
        "mean",
        "score",
        "change",
        "errors",
    ]
    assert lines[1] == ["judged", "orders", "1", "100%", "1.00", "new", "0"]
    assert lines[2] == ["polite", "orders", "4", "75%", "0.75", "+25.0", "pp", "0"]


def test_min_pass_exits_1_below_it(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    store_samples(app, samples("polite", "orders", now - 60, [True, False, False]))
    above = run_cli(capsys, "eval", "report", str(app), "--min-pass", "0.3")
    assert above.code == 0
    below = run_cli(capsys, "eval", "report", str(app), "--min-pass", "0.5")
    assert below.code == 1
    assert "below --min-pass 0.5: polite on orders (33%)" in below.out


def test_since_chooses_the_window(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    store_samples(
        app,
        samples("polite", "orders", now - 3 * 3600, [False])
        + samples("polite", "orders", now - 600, [True]),
    )
    got = run_cli(capsys, "eval", "report", str(app), "--since", "1h", "--json")
    assert got.code == 0
    data = json.loads(got.out)
    assert data["window_seconds"] == 3600
    (row,) = data["rows"]
    assert (row["count"], row["pass_rate"], row["previous"]["count"], row["change"]) == (
        1,
        1.0,
        0,
        None,
    )
    wider = json.loads(run_cli(capsys, "eval", "report", str(app), "--since", "4h", "--json").out)
    assert wider["rows"][0]["count"] == 2


def test_json_and_failing(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_samples(app, samples("polite", "orders", time.time() - 5, [False]))
    got = run_cli(capsys, "eval", "report", str(app), "--json", "--min-pass", "0.5")
    assert got.code == 1
    data = json.loads(got.out)
    assert data["failing"] == [{"grader": "polite", "task": "orders"}]
    assert data["rows"][0]["pass_rate"] == 0.0 and data["min_pass"] == 0.5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min-pass", "1.5"], "must be a number from 0 to 1"),
        (["--min-pass", "lots"], "must be a number from 0 to 1"),
        (["--since", "soon"], "a duration must be like"),
        (["--since", "0s"], "longer than 0"),
    ],
)
def test_bad_arguments_exit_2(
    app: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    got = run_cli(capsys, "eval", "report", str(app), *argv)
    assert got.code == 2
    assert message in got.err and "pytest-harness eval report --help" in got.err


def test_runs_graded_then_reported(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "run", "orders", "Where is A-1?", str(app)).code == 0
    got = run_cli(capsys, "eval", "report", str(app), "--json", "--min-pass", "1")
    assert got.code == 0, got.out
    assert [(r["grader"], r["count"]) for r in json.loads(got.out)["rows"]] == [("polite", 1)]


def test_report_errors_and_means() -> None:
    rows = build_report(
        [
            Sample(run_id="a", task="t", grader="j", score=0.4, passed=False, created_at=1),
            Sample(run_id="b", task="t", grader="j", score=None, passed=False, error="x"),
            Sample(run_id="c", task="t", grader="j", score=0.8, passed=True, created_at=1),
        ],
        [],
        since=0,
        until=10,
    ).rows
    (row,) = rows
    assert (row.count, row.passed, row.errors) == (3, 1, 1)
    assert row.mean_score == pytest.approx(0.6)


def test_an_unknown_environment_exits_2(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    got = run_cli(capsys, "eval", "report", str(app), "-e", "nope")
    assert got.code == 2
    assert "unknown environment 'nope'" in got.err
