"""Rule conditions that cannot say yes or no (DESIGN §3), and the load-time check of the tools
and `args` a condition names.

- A condition whose value is not a bool fails closed, like any run-time error: the rule counts
  as matched and its decision carries `error: condition returned <type>, not a bool`.
- A condition naming a tool the spec does not declare (`tool == "refnd"`) is a `SpecError`.
- A method called on `args` (`args.size()`) is not a read of a parameter.
"""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.cel import argument_reads, compile_expression
from pytest_harness.runtime.rules import evaluate_rules
from pytest_harness.spec.schema import Effect, RuleSpec
from pytest_harness.testing import assert_trace

pytestmark = pytest.mark.asyncio

SPEC = """
rules:
{rules}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, explode]
"""

REFUND = "[{call: refund, args: {order_id: A-1, amount: 5}}, {say: done}]"


def write(app, rules: str, script: str = REFUND) -> None:
    app.write(SPEC.format(rules=rules))
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


def load_error(app, rules: str) -> ph.SpecError:
    app.write(SPEC.format(rules=rules))
    with pytest.raises(ph.SpecError) as raised:
        ph.load(app.spec)
    return raised.value


# -- a condition that is not a bool fails closed ------------------------------------------------


async def test_a_string_label_as_a_condition_denies_and_says_why(app) -> None:
    write(app, "  - id: flagged\n    when: labels.flagged\n    then: deny\n")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund", principal="ann", labels={"flagged": "true"})
    error = "condition returned string, not a bool"
    [decision] = result.trace.of_kind("rule")
    assert decision.key == "flagged"
    assert decision.detail == {"effect": "deny", "tool": "refund", "error": error}
    assert result.trace.tool_calls("refund")[0].outcome == "denied"
    assert app.tools.CALLS == []
    assert f"rule flagged → deny (tool refund) error: {error}" in result.trace.render()
    with pytest.raises(AssertionError) as failed:
        assert_trace(result, not_fired=["flagged"])
    assert f"error: {error}" in str(failed.value)


async def test_size_of_args_as_a_condition_denies(app) -> None:
    write(app, "  - id: sized\n    when: size(args)\n    then: deny\n")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund", principal="ann")
    [decision] = result.trace.of_kind("rule")
    assert decision.detail["error"] == "condition returned int, not a bool"
    assert result.trace.tool_calls("refund")[0].outcome == "denied"
    assert app.tools.CALLS == []


async def test_a_non_bool_approve_condition_asks_for_the_approval(app) -> None:
    write(
        app,
        "  - id: big\n    when: 'tool == \"refund\" ? args.amount : false'\n"
        "    then: approve\n    approvers: [finance]\n",
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund", principal="ann")
    assert result.status is ph.RunStatus.AWAITING_APPROVAL
    [decision] = result.trace.of_kind("rule")
    assert decision.detail["error"] == "condition returned int, not a bool"


async def test_a_false_condition_still_does_not_match(app) -> None:
    write(app, "  - id: never\n    when: size(args) > 100\n    then: deny\n")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED
    assert not result.trace.of_kind("rule")
    assert [c[0] for c in app.tools.CALLS] == ["refund"]


@pytest.mark.parametrize(
    ("when", "type_name"),
    [
        ("labels.flagged", "string"),
        ("size(args)", "int"),
        ("args.amount", "double"),
        ("args", "map"),
        ("[true]", "list"),
        ("null", "null"),
        ('b"x"', "bytes"),
        ('duration("1s")', "duration"),
    ],
)
async def test_every_non_bool_value_is_an_error_naming_its_type(when, type_name) -> None:
    rule = RuleSpec(id="r", when=when, then=Effect.DENY)
    variables = {
        "tool": "refund",
        "args": {"amount": 5.0},
        "labels": {"flagged": "true"},
    }
    verdict = evaluate_rules([rule], {"r": compile_expression(when)}, variables, step=1)
    assert verdict.effect is Effect.DENY
    [decision] = verdict.decisions
    assert decision.detail["error"] == f"condition returned {type_name}, not a bool"


# -- a tool a condition names must exist -------------------------------------------------------


@pytest.mark.parametrize(
    "when",
    [
        'tool == "refnd" && args.zzz > 1',
        'tool == "refnd"',
        '"refnd" == tool',
        'tool in ["lookup_order", "refnd"]',
    ],
)
async def test_a_misspelt_tool_is_a_spec_error_with_a_suggestion(app, when) -> None:
    error = load_error(app, f"  - id: big\n    when: '{when}'\n    then: deny\n")
    assert error.key == "rules[0].when"
    line = app.spec.read_text().splitlines().index(f"    when: '{when}'") + 1
    assert error.file == str(app.spec) and error.line == line
    assert error.reason == "rule 'big': unknown tool 'refnd' (did you mean 'refund'?)"
    assert str(error).startswith(f"{app.spec}:{line} rules[0].when: rule 'big': unknown tool")


async def test_an_unknown_tool_far_from_any_lists_the_known_ones(app) -> None:
    error = load_error(
        app,
        "  - id: ok\n    when: 'true'\n    then: allow\n"
        "  - id: wire\n    when: 'tool == \"wire_transfer\"'\n    then: deny\n",
    )
    assert error.key == "rules[1].when"
    assert error.reason == (
        "rule 'wire': unknown tool 'wire_transfer' "
        "(known: delete_account, explode, lookup_order, refund, slow)"
    )


async def test_a_tool_of_another_task_or_of_no_task_counts(app) -> None:
    # a global rule naming a tool only the second task has, a rule a task picks by id naming
    # a tool of that task, and a tool the spec declares that no task offers (mutate takes a
    # tool off a task and the spec must still load)
    app.write(
        """
rules:
  - {id: no-delete, when: 'tool == "delete_account"', then: deny}
  - {id: slow-cap, when: 'tool == "slow" && args.seconds > 5', then: deny}
  - {id: refunds, when: 'tool == "refund" && args.amount > 5', then: deny}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order]
    rules: [refunds]
  admin:
    prompt: You are the admin desk.
    tools: [delete_account]
    rules: [no-delete, slow-cap]
"""
    )
    async with ph.load(app.spec) as harness:
        assert set(harness.plans.tasks) == {"orders", "admin"}


async def test_a_baseline_rule_may_name_a_tool_this_app_does_not_have(app, write_file) -> None:
    # an org baseline is shared by apps that have different tools
    write_file(
        "baseline.yaml",
        """
        rules:
          - id: org-no-wires
            when: tool == "wire_transfer" && args.amount > 10000
            then: deny
        """,
    )
    app.write(SPEC.format(rules="  []") + "baseline: baseline.yaml\n")
    async with ph.load(app.spec) as harness:
        assert harness.plans.tasks


# -- a method called on args is not a parameter read -------------------------------------------


@pytest.mark.parametrize(
    "when",
    [
        "args.size() > 1",
        'args.exists(k, k == "amount")',
        'args.all(k, k != "")',
        'tool == "refund" && args.size() > 1',
    ],
)
async def test_a_method_called_on_args_loads(app, when) -> None:
    app.write(SPEC.format(rules=f"  - id: r\n    when: '{when}'\n    then: deny\n"))
    async with ph.load(app.spec):
        pass


async def test_args_size_decides_a_call(app) -> None:
    write(app, "  - id: two-args\n    when: args.size() > 1\n    then: deny\n")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund", principal="ann")
    [decision] = result.trace.of_kind("rule")
    assert "error" not in decision.detail
    assert result.trace.tool_calls("refund")[0].outcome == "denied"


async def test_argument_reads_skip_methods_but_not_reads_before_them() -> None:
    assert argument_reads("args.size() > 0").names == ()
    assert argument_reads('args.exists(k, k == "x")').names == ()
    assert argument_reads("args.amount.size() > 1").names == ("amount",)
    assert argument_reads("has(args.size) && args.size > 1").names == ()
    assert argument_reads("args.size > 1").names == ("size",)  # a parameter called size
