"""How rules combine (DESIGN §3): deny wins, every match is a decision, one approval per rule."""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_harness as ph
from pytest_harness.errors import ResolutionError
from pytest_harness.testing import assert_trace

pytestmark = pytest.mark.asyncio

FINANCE = ph.Principal(id="fiona", roles=("finance",))
LEGAL = ph.Principal(id="lena", roles=("legal",))

SPEC = """
rules:
{rules}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, explode]
"""


def write(app, rules: str, script: str) -> None:
    app.write(SPEC.format(rules=rules))
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


REFUND_5000 = "[{call: refund, args: {order_id: A-1, amount: 5000}}, {say: done}]"


async def test_a_deny_after_an_approve_wins_and_both_matches_are_decisions(app) -> None:
    write(
        app,
        """
  - id: big-credit
    when: tool == "refund" && args.amount > 50
    then: approve
    approvers: [finance]
  - id: no-huge-credit
    when: tool == "refund" && args.amount > 1000
    then: deny
    message: Credits over 1000 go through the back office.
""",
        REFUND_5000,
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Credit 5000", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED  # never waited for a supervisor
    assert app.tools.CALLS == []
    rules = [(d.key, d.detail["effect"]) for d in result.trace.of_kind("rule")]
    assert rules == [("big-credit", "approve"), ("no-huge-credit", "deny")]
    [call] = result.trace.tool_calls("refund")
    assert call.outcome == "denied"
    assert not result.trace.of_kind("approval")


async def test_the_model_is_told_the_first_deny_message(app) -> None:
    write(
        app,
        """
  - id: first-deny
    when: tool == "refund"
    then: deny
    message: First says no.
  - id: second-deny
    when: tool == "refund" && args.amount > 10
    then: deny
    message: Second says no.
""",
        REFUND_5000,
    )
    async with ph.load(app.spec, record=True) as harness:
        result = await harness.run("orders", "Credit", principal="ann")
        record = await harness.store.get_run(result.run_id)
    assert [d.key for d in result.trace.of_kind("rule")] == ["first-deny", "second-deny"]
    tool_messages = [m for m in record.state["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "First says no."


async def test_allow_never_overrides_approve(app) -> None:
    write(
        app,
        """
  - id: trusted
    when: principal.id == "ann"
    then: allow
  - id: big
    when: tool == "refund" && args.amount > 100
    then: approve
    approvers: [finance]
""",
        REFUND_5000,
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Credit", principal="ann")
    assert result.status is ph.RunStatus.AWAITING_APPROVAL
    assert [d.key for d in result.trace.of_kind("rule")] == ["trusted", "big"]
    assert result.approval is not None and result.approval.rule_id == "big"


FOUR_EYES = """
  - id: finance-check
    when: tool == "refund" && args.amount > 100
    then: approve
    approvers: [finance]
  - id: legal-check
    when: tool == "refund" && args.amount > 1000
    then: approve
    approvers: [legal]
"""


async def test_each_matching_approve_rule_needs_its_own_approval(app) -> None:
    write(app, FOUR_EYES, REFUND_5000)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Credit", principal="ann")
        assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
        requests = {p.approval_id for p in waiting.pending}
        assert len(requests) == 2 and all(p.status == "approval" for p in waiting.pending)
        rows = {r.rule_id: r for r in await harness.store.approvals(waiting.run_id)}
        assert rows["finance-check"].approvers == ("finance",)
        assert rows["legal-check"].approvers == ("legal",)
        assert rows["finance-check"].approval_id != rows["legal-check"].approval_id
        # finance alone cannot answer legal's request
        with pytest.raises(ph.ApprovalDenied, match="legal"):
            await harness.approve(
                waiting.run_id, rows["legal-check"].approval_id, "approve", approver=FINANCE
            )
        half = await harness.approve(
            waiting.run_id, rows["finance-check"].approval_id, "approve", approver=FINANCE
        )
        assert half.status is ph.RunStatus.AWAITING_APPROVAL
        assert app.tools.CALLS == []
        assert [p.approval_id for p in half.pending] == [rows["legal-check"].approval_id]
        assert half.approval is not None and half.approval.rule_id == "legal-check"
        done = await harness.approve(
            waiting.run_id, rows["legal-check"].approval_id, "approve", approver=LEGAL
        )
    assert done.status is ph.RunStatus.COMPLETED
    assert [c[0] for c in app.tools.CALLS] == ["refund"]
    approvals = [(d.detail["rule"], d.detail["decision"]) for d in done.trace.of_kind("approval")]
    assert approvals == [("finance-check", "approve"), ("legal-check", "approve")]


async def test_one_decline_declines_the_call_and_the_other_requests_are_moot(app) -> None:
    write(app, FOUR_EYES, REFUND_5000)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Credit", principal="ann")
        rows = {r.rule_id: r for r in await harness.store.approvals(waiting.run_id)}
        done = await harness.approve(
            waiting.run_id, rows["legal-check"].approval_id, "decline", approver=LEGAL
        )
        assert done.status is ph.RunStatus.COMPLETED  # resumed at once
        assert app.tools.CALLS == []
        [call] = done.trace.tool_calls("refund")
        assert call.outcome == "declined"
        approvals = [
            (d.detail["rule"], d.detail["decision"]) for d in done.trace.of_kind("approval")
        ]
        assert approvals == [("legal-check", "decline"), ("finance-check", "moot")]
        assert "approval refund → moot (rule finance-check)" in done.trace.render()
        with pytest.raises(ResolutionError, match="is moot: its call of refund was declined"):
            await harness.approve(
                waiting.run_id, rows["finance-check"].approval_id, "approve", approver=FINANCE
            )


async def test_a_condition_that_fails_at_run_time_fails_closed_and_says_why(app) -> None:
    # `reason` is a parameter of explode (so the load check passes) but the call omits it
    write(
        app,
        """
  - id: no-boom
    when: tool == "explode" && args.reason == "boom"
    then: deny
    message: No explosions.
""",
        "[{call: explode, args: {}}, {say: done}]",
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Boom", principal="ann")
    [decision] = result.trace.of_kind("rule")
    error = "no such key: 'reason'"
    assert decision.detail == {"effect": "deny", "tool": "explode", "error": error}
    assert result.trace.tool_calls("explode")[0].outcome == "denied"
    assert app.tools.CALLS == []
    rendered = result.trace.render()
    assert "step 1 rule no-boom → deny (tool explode) error: no such key: 'reason'" in rendered
    with pytest.raises(AssertionError) as failed:
        assert_trace(result, not_fired=["no-boom"])
    assert "error: no such key: 'reason'" in str(failed.value)
    assert "\\'" not in str(failed.value)


async def test_a_long_cel_error_is_shown_whole(app) -> None:
    write(
        app,
        """
  - id: typed
    when: tool == "refund" && args.amount > "a lot"
    then: approve
    approvers: [finance]
""",
        REFUND_5000,
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Credit", principal="ann")
    [decision] = result.trace.of_kind("rule")
    error = decision.detail["error"]
    assert len(error) > 120  # the binding's message is long; nothing cuts it
    assert error in result.trace.render()
    assert result.status is ph.RunStatus.AWAITING_APPROVAL  # fail closed: approve applies


# -- the load-time check of args.<name> ---------------------------------------------------------


def load_error(app, rules: str, tools: str = "[lookup_order, refund, explode]") -> ph.SpecError:
    app.write(SPEC.format(rules=rules).replace("[lookup_order, refund, explode]", tools))
    with pytest.raises(ph.SpecError) as raised:
        ph.load(app.spec)
    return raised.value


async def test_a_misspelt_argument_is_a_spec_error_with_a_suggestion(app) -> None:
    error = load_error(
        app,
        """
  - id: big
    when: tool == "refund" && args.amout > 100
    then: approve
    approvers: [finance]
""",
    )
    assert error.key == "rules[0].when"
    assert error.line == 18 and error.file == str(app.spec)
    assert error.reason == "args.amout: no tool 'refund' parameter 'amout' (did you mean 'amount'?)"
    assert str(error).startswith(f"{app.spec}:18 rules[0].when: args.amout")


async def test_without_a_tool_named_every_tool_of_the_tasks_using_the_rule_counts(app) -> None:
    error = load_error(
        app,
        """
  - id: any-order
    when: args.order == "A-1"
    then: deny
""",
        tools="[lookup_order, refund]",
    )
    assert "no parameter 'order' in tools 'lookup_order', 'refund'" in error.reason
    assert "did you mean 'order_id'?" in error.reason


@pytest.mark.parametrize(
    "when",
    [
        'tool == "explode" && has(args.reason) && args.reason == "boom"',
        'tool == "explode" && "missing" in args && args.missing == 1',
        'args.order_id == "A-1"',  # lookup_order and refund both take it
        'tool == "refund" && args["amount"] > 1',
        '"refund" == tool && args.amount > 1',
        'tool in ["refund", "explode"] && (args.amount > 1 || args.reason == "x")',
        'principal.id == "args.zzz"',  # inside a string, not a read
    ],
)
async def test_conditions_that_read_real_or_optional_parameters_load(app, when) -> None:
    app.write(SPEC.format(rules=f"  - id: r\n    when: '{when}'\n    then: deny\n"))
    async with ph.load(app.spec):
        pass


async def test_a_baseline_rule_is_checked_against_every_task_it_joins(app, write_file) -> None:
    write_file(
        "baseline.yaml",
        """
        rules:
          - id: org-cap
            when: args.amont > 10000
            then: deny
        """,
    )
    app.write(SPEC.format(rules="  []") + "baseline: baseline.yaml\n")
    with pytest.raises(ph.SpecError) as raised:
        ph.load(app.spec)
    assert raised.value.key == "baseline.rules[0].when"
    assert "args.amont" in raised.value.reason and "did you mean 'amount'?" in raised.value.reason


@pytest.mark.parametrize(
    "spec_path", ["fixtures/shop/harness.yaml", "examples/quickstart/harness.yaml"]
)
async def test_the_example_specs_still_load(spec_path) -> None:
    path = Path(__file__).resolve().parents[2] / spec_path
    async with ph.load(path, env="offline", store="memory") as harness:
        assert harness.plans.tasks


# -- assert_trace ------------------------------------------------------------------------------


async def test_assert_trace_counts_ok_calls_and_names_the_others(app) -> None:
    write(
        app,
        """
  - id: no-explode
    when: tool == "explode"
    then: deny
""",
        "[{call: lookup_order, args: {order_id: A-1}}, {call: refund, args: {order: A-1}}, "
        "{call: explode, args: {}}, {say: done}]",
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Go", principal="ann")
    assert_trace(result, tools=["lookup_order"])
    assert_trace(
        result,
        tools=["lookup_order", "refund", "explode"],
        outcomes=["ok", "invalid_arguments", "denied"],
    )
    with pytest.raises(AssertionError) as failed:
        assert_trace(result, tools=["lookup_order", "refund"])
    message = str(failed.value)
    assert (
        "tools: expected [lookup_order, refund], got [lookup_order] (not counted, outcome not ok: "
        "refund → invalid_arguments, explode → denied)"
    ) in message


async def test_assert_trace_shows_the_runs_error_first(app) -> None:
    write(app, "  []", "[{call: lookup_order, args: {order_id: A-1}}]")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Go", principal="ann")
    assert result.status is ph.RunStatus.FAILED
    with pytest.raises(AssertionError) as failed:
        assert_trace(result, status="completed")
    lines = str(failed.value).splitlines()
    assert lines[1].startswith("  error: ScriptExhausted: ")
    assert lines[2] == "  status: expected completed, got failed"


async def test_a_four_eyes_run_replays_the_same_and_a_changed_approver_role_is_drift(
    app, tmp_path
) -> None:
    write(app, FOUR_EYES, REFUND_5000)
    async with ph.load(app.spec, record=True) as harness:
        waiting = await harness.run("orders", "Credit", principal="ann")
        rows = {r.rule_id: r for r in await harness.store.approvals(waiting.run_id)}
        # legal answers first: the recording keeps each decision with its rule
        await harness.approve(
            waiting.run_id, rows["legal-check"].approval_id, "approve", approver=LEGAL
        )
        done = await harness.approve(
            waiting.run_id, rows["finance-check"].approval_id, "approve", approver=FINANCE
        )
        golden = await harness.export(done.run_id, tmp_path / "four-eyes.yaml")
        assert (await harness.replay(golden)).same
    app.spec.write_text(app.spec.read_text().replace("approvers: [legal]", "approvers: [counsel]"))
    async with ph.load(app.spec) as harness:
        report = await harness.replay(golden)
    assert report.status == ("completed", "awaiting_approval")  # lena is no counsel
    assert not report.same


@pytest.mark.parametrize("decliner", ["legal-check", "finance-check"])
async def test_a_declined_four_eyes_run_replays_the_same(app, tmp_path, decliner) -> None:
    """A stand-in decision never takes the one recorded for another open request of the call."""
    write(app, FOUR_EYES, REFUND_5000)
    async with ph.load(app.spec, record=True) as harness:
        waiting = await harness.run("orders", "Credit", principal="ann")
        rows = {r.rule_id: r for r in await harness.store.approvals(waiting.run_id)}
        approver = LEGAL if decliner == "legal-check" else FINANCE
        done = await harness.approve(
            waiting.run_id, rows[decliner].approval_id, "decline", approver=approver
        )
        assert done.status is ph.RunStatus.COMPLETED
        golden = await harness.export(done.run_id, tmp_path / "declined.yaml")
        report = await harness.replay(golden)
    assert report.same, report.render()
