"""The CLI's inputs: an optional spec argument, recording folders, roles and tenants."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_harness.cli import main
from pytest_harness.cli_inputs import default_recordings, is_spec_file

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "quickstart"
INPUT = "Refund $250 on order A-1001."


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    import sys

    app = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns(".harness", "__pycache__"))
    monkeypatch.chdir(app)
    monkeypatch.setenv("HARNESS_ENV", "offline")
    for name in ("HARNESS_SPEC", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    yield app
    for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
        del sys.modules[name]
    while str(app) in sys.path:
        sys.path.remove(str(app))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ids(out: str) -> tuple[str, str]:
    run = re.search(r"^run: (run_[0-9a-f]{32}) ", out, re.MULTILINE)
    approval = re.search(r"^pending approval: (apr_[0-9a-f]{32}) ", out, re.MULTILINE)
    assert run and approval, out
    return run.group(1), approval.group(1)


def test_the_spec_defaults_to_dot_harness_yaml_then_env_then_option(app: Path, capsys) -> None:
    code, out, err = cli(capsys, "run", "orders", INPUT)
    assert code == 0, err
    assert "approve|decline harness.yaml " in out  # the hint names the spec it used

    moved = app / "conf" / "desk.yaml"
    moved.parent.mkdir()
    text = (app / "harness.yaml").read_text(encoding="utf-8")
    (app / "harness.yaml").unlink()
    moved.write_text(
        text.replace("orders.script.yaml", "../orders.script.yaml").replace(
            "path: .harness/state.db", "path: ../.harness/state.db"
        ),
        encoding="utf-8",
    )
    code, out, err = cli(capsys, "runs")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "pytest-harness: error: runs: no spec: give a harness.yaml argument or --spec PATH, or "
        "set HARNESS_SPEC (there is no ./harness.yaml here) (see 'pytest-harness runs --help')"
    ]
    code, out, err = cli(capsys, "runs", "--spec", "conf/desk.yaml")
    assert code == 0 and "awaiting_approval" in out, err
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_SPEC", "conf/desk.yaml")
        code, out, err = cli(capsys, "runs")
        assert code == 0 and "awaiting_approval" in out, err
    code, out, err = cli(capsys, "runs", "conf/desk.yaml", "--spec", "other.yaml")
    assert code == 2 and "two specs given" in err and "'pytest-harness runs --help'" in err


def test_replay_takes_folders_and_an_optional_spec_last(app: Path, capsys) -> None:
    code, out, _ = cli(capsys, "run", "orders", INPUT, "--principal", "ann", "--record")
    run_id, approval_id = ids(out)
    approve = ("approve", run_id, approval_id, "approve", "--approver", "fiona")
    assert cli(capsys, *approve, "--role", "finance")[0] == 0
    for name in ("a/one.yaml", "a/b/two.yaml"):
        assert cli(capsys, "export", run_id, f"recordings/{name}")[0] == 0
    (app / "recordings" / "notes.txt").write_text("not a recording", encoding="utf-8")

    code, out, err = cli(capsys, "replay", "recordings")
    assert code == 0, err
    assert out.count("same: recording ") == 2
    assert out.endswith("2 same, 0 drifted, 0 diverged\n")

    code, out, err = cli(capsys, "replay", "recordings/a/b", "harness.yaml", "--json")
    assert code == 0, err
    assert [item["input"] for item in json.loads(out)] == ["recordings/a/b/two.yaml"]

    (app / "empty").mkdir()
    code, out, err = cli(capsys, "replay", "empty", "recordings/a/one.yaml")
    assert code == 2
    assert out.endswith("1 same, 0 drifted, 0 diverged, 1 not loaded\n")
    assert err.splitlines() == [
        "pytest-harness: error: empty: no recordings (.yaml, .yml, .hx) under this folder"
    ]


def test_a_folder_passes_over_the_spec_script_and_baseline_kept_beside_its_recordings(
    app: Path, capsys
) -> None:
    code, out, _ = cli(capsys, "run", "orders", INPUT, "--principal", "ann", "--record")
    run_id, approval_id = ids(out)
    approve = ("approve", run_id, approval_id, "approve", "--approver", "fiona")
    assert cli(capsys, *approve, "--role", "finance")[0] == 0
    assert cli(capsys, "export", run_id, "recordings/refund.yaml")[0] == 0
    (app / "baseline.yaml").write_text("locks: {state.record: true}\n", encoding="utf-8")

    # The quickstart's folder holds harness.yaml, orders.script.yaml and a baseline beside it.
    code, out, err = cli(capsys, "replay", ".")
    assert code == 0, err
    assert "1 same, 0 drifted, 0 diverged\n" in out
    assert sorted(line for line in out.splitlines() if line.startswith("skipped ")) == [
        "skipped baseline.yaml: a baseline, not a recording",
        "skipped harness.yaml: a harness spec, not a recording",
        "skipped orders.script.yaml: a model script, not a recording",
    ]
    code, out, err = cli(capsys, "replay", ".", "--json")
    assert code == 0, err
    skipped = {i["input"]: i["skipped"] for i in json.loads(out) if "skipped" in i}
    assert skipped["harness.yaml"] == "a harness spec, not a recording"

    # A damaged recording in the folder is still an error, and so is a spec named on its own.
    text = (app / "recordings" / "refund.yaml").read_text(encoding="utf-8")
    (app / "recordings" / "broken.yaml").write_text(text.replace("outcome:", "outcom:"))
    (app / "recordings" / "unmarked.yaml").write_text(
        text.replace("format: pytest-harness/recording@2\n", ""), encoding="utf-8"
    )
    code, out, err = cli(capsys, "replay", ".")
    assert code == 2 and "1 same, 0 drifted, 0 diverged, 2 not loaded" in out
    assert "recordings/broken.yaml" in err and "recordings/unmarked.yaml" in err
    code, out, err = cli(capsys, "replay", "orders.script.yaml", "recordings/refund.yaml")
    assert code == 2 and "orders.script.yaml" in err and "skipped" not in out


def test_run_and_approve_take_roles_tenants_and_a_reason(app: Path, capsys) -> None:
    code, out, err = cli(
        capsys, "run", "orders", INPUT, "--principal", "ann", "--role", "clerk", "--tenant", "acme"
    )
    assert code == 0, err
    run_id, approval_id = ids(out)
    assert out.rstrip().endswith("--approver ID --role finance --tenant acme")

    code, out, err = cli(
        capsys, "approve", run_id, approval_id, "approve", "--approver", "fiona",
        "--role", "finance", "--tenant", "globex",
    )  # fmt: skip
    assert code == 2 and out == "" and "tenant" in err

    code, out, err = cli(
        capsys, "approve", run_id, approval_id, "approve", "--approver", "fiona",
        "--role", "finance", "--tenant", "acme", "--reason", "checked the receipt",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("status: completed\n")
    code, out, _ = cli(capsys, "show", run_id)
    assert "approval refund → approve by fiona" in out


def test_a_usage_error_points_to_the_subcommands_help(app: Path, capsys) -> None:
    code, out, err = cli(capsys, "approve", "r", "a", "maybe")
    assert code == 2 and out == ""
    assert err.rstrip().endswith("(see 'pytest-harness approve --help')")
    assert len(err.splitlines()) == 1


def test_is_spec_file_tells_a_spec_from_a_recording(tmp_path: Path) -> None:
    spec = tmp_path / "harness.yaml"
    spec.write_text("version: 1\nname: x\ntasks: {}\n", encoding="utf-8")
    recording = tmp_path / "r.yaml"
    recording.write_text("format: pytest-harness/recording@1\ntask: x\n", encoding="utf-8")
    assert is_spec_file(str(spec))
    assert not is_spec_file(str(recording))
    assert not is_spec_file(str(tmp_path))
    assert not is_spec_file(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("pyproject.toml", '[tool.pytest.ini_options]\nharness_recordings = "golden"\n', "golden"),
        ("pyproject.toml", "[tool.ruff]\nline-length = 100\n", "recordings"),
        ("pytest.ini", "[pytest]\nharness_recordings = runs/golden\n", "runs/golden"),
        ("tox.ini", "[pytest]\naddopts = -q\n", "recordings"),
        ("setup.cfg", "[tool:pytest]\nharness_recordings = g\n", "g"),
    ],
)
def test_default_recordings_reads_the_pytest_configuration(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    assert default_recordings(tmp_path) == tmp_path / expected
