"""`pytest-harness mutate`: mutants of a spec, replayed against its recordings (DESIGN §16)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

import pytest_harness as ph
from pytest_harness.cli import main
from pytest_harness.mutate import Mutant, MutationError, make_mutants, mutate

ROOT = Path(__file__).parent.parent.parent
SHOP = ROOT / "fixtures" / "shop" / "harness.yaml"
SHOP_RECORDINGS = ROOT / "recordings"

SPEC = """
models:
  default:
    use: scripted
    script:
      match:
        - input: "Refund $30*"
          turns:
            - {call: refund, args: {order_id: A-1, amount: 30}}
            - say: Refunded.
        - input: "Refund $250*"
          turns:
            - {call: refund, args: {order_id: A-1, amount: 250}}
            - say: Refunded.
        - input: "Card*"
          turns:
            - say: Your card is 4111111111111111.
tools:
  refund: {call: "MOD:refund", replay: idempotent}
  delete_account: {call: "MOD:delete_account"}
rules:
  - id: big
    when: tool == "refund" && 100 < args.amount
    then: approve
    approvers: [finance, legal]
  - id: no-delete
    when: tool == "delete_account"
    then: deny
guards:
  - {id: cards, on: output, check: regex, pattern: '\\b\\d{16}\\b', action: redact}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [refund, delete_account]
    rules: [big, no-delete]
    budget: {steps: 5}
"""


def write(app, text: str = SPEC) -> None:
    app.write(text.replace("MOD", app.module), base=False)


async def record(app, inputs: list[str], folder: Path) -> None:
    """Run each input (approving what waits) and save its golden file in `folder`."""
    async with ph.load(app.spec, record=True) as harness:
        for n, text in enumerate(inputs):
            result = await harness.run("orders", text, principal="ann")
            while result.approval is not None:
                fiona = ph.Principal("fiona", roles=("finance",))
                result = await harness.approve(
                    result.run_id, result.approval.approval_id, "approve", approver=fiona
                )
            await harness.export(result.run_id, folder / f"run{n}.yaml")


@pytest.mark.asyncio
async def test_every_operator_and_the_survivors_named(app, tmp_path: Path) -> None:
    write(app)
    folder = tmp_path / "golden"
    await record(app, ["Refund $30 on A-1", "Refund $250 on A-1", "Card please"], folder)

    report = await mutate(app.spec, [folder])

    statuses = {r.mutant.id: r.status for r in report.results}
    assert statuses == {
        "rule:big:remove": "killed",
        "rule:big:effect:allow": "killed",
        "rule:big:approver:finance:remove": "killed",  # fiona's finance role no longer counts
        "rule:big:approver:legal:remove": "killed",  # the request no longer asks legal
        "rule:big:threshold:up": "killed",
        "rule:big:threshold:down": "killed",
        "rule:no-delete:remove": "survived",
        "rule:no-delete:effect:allow": "survived",
        "guard:cards:remove": "killed",
        "guard:cards:action:warn": "killed",
        "task:orders:tool:refund:remove": "killed",
        "task:orders:tool:delete_account:remove": "survived",
        "task:orders:budget:steps:lower": "killed",
    }
    by_id = {r.mutant.id: r for r in report.results}
    # `100 < args.amount` with 30 and 250 recorded: up to 250 (250 stops matching), down to 29
    up, down = by_id["rule:big:threshold:up"], by_id["rule:big:threshold:down"]
    assert "from 100 to 250" in up.mutant.description
    assert "from 100 to 29" in down.mutant.description
    assert down.drifted == (str(folder / "run0.yaml"),)
    assert by_id["rule:big:remove"].drifted == (str(folder / "run1.yaml"),)
    assert report.killed == 10 and report.total == 13
    assert [r.mutant.unprotected for r in report.survivors] == [
        "rule no-delete: removing it changes no recording",
        "rule no-delete: turning its effect from deny into allow changes no recording",
        "task orders: removing tool delete_account from it changes no recording",
    ]
    text = report.render()
    assert "score: 10 of 13 mutants killed (0.77)" in text
    assert "  rule no-delete: removing it changes no recording" in text

    # the golden run that exercises the rule kills its mutants
    write(app, SPEC.replace('        - input: "Card*"', DELETE + '        - input: "Card*"'))
    await record(app, ["Delete my account"], tmp_path / "more")
    again = await mutate(app.spec, [folder, tmp_path / "more"])
    killed = {r.mutant.id for r in again.results if r.status == "killed"}
    assert {"rule:no-delete:remove", "rule:no-delete:effect:allow"} <= killed
    assert "task:orders:tool:delete_account:remove" in killed


DELETE = """        - input: "Delete*"
          turns:
            - {call: delete_account, args: {user: ann}}
            - say: I cannot.
"""


@pytest.mark.asyncio
async def test_a_mutant_that_does_not_load_is_invalid_and_not_counted(app, tmp_path: Path) -> None:
    write(app)
    await record(app, ["Refund $30 on A-1"], tmp_path / "golden")
    broken = Mutant(
        id="rule:big:typo",
        target="rule big",
        description="a condition that does not compile",
        change="breaking it",
        changes=((("rules", 0, "when"), "args.amount >"),),
    )

    report = await mutate(app.spec, [tmp_path / "golden"], select=lambda made: [*made[:1], broken])

    assert [r.status for r in report.results] == ["survived", "invalid"]
    invalid = report.results[1]
    assert invalid.error is not None and "CEL syntax error" in invalid.error
    assert "harness.yaml" in invalid.error
    assert report.total == 1 and report.ratio == 0.0
    assert "1 invalid (did not load), not counted" in report.render()
    assert report.to_dict()["mutants"][1] == {
        "id": "rule:big:typo",
        "description": "a condition that does not compile",
        "target": "rule big",
        "status": "invalid",
        "drifted": [],
    }

    nowhere = Mutant(
        id="x", target="t", description="d", change="c", changes=((("nope", "deeper"), 1),)
    )
    report = await mutate(app.spec, [tmp_path / "golden"], select=lambda made: [nowhere])
    assert report.results[0].status == "invalid"
    assert report.results[0].error == "the spec has no nope.deeper to change (KeyError: 'nope')"
    assert report.ratio is None


@pytest.mark.asyncio
async def test_nothing_to_score_and_a_drifting_baseline_are_errors(app, tmp_path: Path) -> None:
    write(app)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MutationError, match="nothing to score: no recordings"):
        await mutate(app.spec, [empty])
    with pytest.raises(MutationError, match="no such recording file or folder"):
        await mutate(app.spec, [tmp_path / "missing"])
    await record(app, ["Refund $250 on A-1"], tmp_path / "golden")
    write(app, SPEC.replace("100 < args.amount", "1000 < args.amount"))
    with pytest.raises(MutationError, match="1 recording already drift"):
        await mutate(app.spec, [tmp_path / "golden"])


def test_make_mutants_lowers_budgets_below_the_most_a_recording_used(app) -> None:
    write(app, SPEC.replace("budget: {steps: 5}", "budget: {steps: 5, tool_calls: 3, usd: 1}"))
    spec = ph.load(app.spec).spec
    recording = ph.Recording(
        task="orders", input="x", principal={"id": "a"}, usage={"steps": 2, "tool_calls": 1}
    )
    budgets = {m.id: m for m in make_mutants(spec.document, [recording]) if ":budget:" in m.id}
    assert set(budgets) == {"task:orders:budget:steps:lower", "task:orders:budget:tool_calls:lower"}
    assert budgets["task:orders:budget:steps:lower"].changes == (
        (("tasks", "orders", "budget", "steps"), 1),
    )
    assert budgets["task:orders:budget:tool_calls:lower"].changes == (
        (("tasks", "orders", "budget", "tool_calls"), 0),
    )


@pytest.mark.asyncio
async def test_a_retry_budget_lowered_below_what_a_golden_waited_is_killed(
    app, tmp_path: Path
) -> None:
    """Two retries of 0.05 s each were waited before the answer: half of that is drift."""
    limited = "- {error: rate_limit, retry_after: 0.05s}\n            "
    write(
        app,
        SPEC.replace("    use: scripted\n", "    use: scripted\n    retries: 3\n", 1).replace(
            "          turns:\n            - {call: refund, args: {order_id: A-1, amount: 30}}",
            "          turns:\n            "
            + limited * 2
            + "- {call: refund, args: {order_id: A-1, amount: 30}}",
            1,
        ),
    )
    folder = tmp_path / "golden"
    await record(app, ["Refund $30 on A-1"], folder)
    report = await mutate(app.spec, [folder])
    by_id = {r.mutant.id: r for r in report.results}
    lowered = by_id["model:default:retry_budget:lower"]
    assert lowered.status == "killed", report.render()
    assert lowered.mutant.description == (
        "lower the retry budget of model default from 300s to 0.05s (a recording waited 0.1s)"
    )
    assert lowered.drifted == (str(folder / "run0.yaml"),)


# -- the shop, through the command ---------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_shop_kills_every_mutant_and_a_lone_golden_names_its_survivors(capsys) -> None:
    code, out, err = run_cli(
        capsys, "mutate", str(SHOP), str(SHOP_RECORDINGS), "-e", "offline", "--min-score", "1"
    )
    assert code == 0, err
    assert "score: 18 of 18 mutants killed (1.00)" in out
    assert "survived" not in out
    # an approve rule's decision names the roles it asks: removing one is drift
    assert re.search(r"killed +rule:big-refund:approver:finance:remove .*4 recordings drifted", out)

    lone = SHOP_RECORDINGS / "test_shop" / "test_account_deletion_is_denied.yaml"
    code, out, err = run_cli(
        capsys, "mutate", "--spec", str(SHOP), str(lone), "-e", "offline", "--json",
        "--min-score", "0.95",
    )  # fmt: skip
    assert code == 1, err
    document = json.loads(out)
    assert set(document) == {"score", "mutants"}
    statuses = {m["id"]: m["status"] for m in document["mutants"]}
    assert statuses["rule:no-account-deletion:remove"] == "killed"
    assert statuses["rule:big-refund:approver:finance:remove"] == "survived"
    killed = sum(status == "killed" for status in statuses.values())
    assert document["score"]["killed"] == killed < document["score"]["total"] == len(statuses)
    first = document["mutants"][0]
    assert set(first) == {"id", "description", "target", "status", "drifted"}
    assert first["id"] == "rule:big-refund:remove" and first["status"] == "survived"
    by_id = {m["id"]: m for m in document["mutants"]}
    assert by_id["rule:no-account-deletion:remove"]["drifted"] == [str(lone)]


def test_mutate_of_an_empty_folder_exits_2(capsys, tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, "mutate", str(SHOP), str(tmp_path), "-e", "offline")
    assert code == 2 and out == ""
    assert err.startswith("pytest-harness: error: nothing to score: no recordings")
    assert len(err.splitlines()) == 1


def test_mutate_defaults_to_the_configured_recordings_folder(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = tmp_path / "shop"
    shutil.copytree(SHOP.parent, shop, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SHOP_RECORDINGS / "test_shop", tmp_path / "golden" / "test_shop")
    (tmp_path / "pytest.ini").write_text("[pytest]\nharness_recordings = golden\n", "utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_SPEC", "shop/harness.yaml")
    code, out, err = run_cli(capsys, "mutate", "-e", "offline")
    assert code == 0, err
    assert "replayed against 17 recordings" in out


@pytest.mark.asyncio
async def test_a_spec_with_no_policy_has_nothing_to_score(app, tmp_path: Path, capsys) -> None:
    app.write(
        """
models:
  default: {use: scripted, script: [{say: hello}]}
tasks:
  orders: {prompt: p}
""",
        base=False,
    )
    await record(app, ["hi"], tmp_path / "golden")
    code = await asyncio.to_thread(main, ["mutate", str(app.spec), str(tmp_path / "golden")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"pytest-harness: error: nothing to score in {app.spec}: it has no rules, guards, task "
        "tools or budgets to mutate"
    ]
