"""The run loop through the public API: tools, rules, guards, approvals, limits, sessions."""

from __future__ import annotations

import asyncio

import pytest

import pytest_harness as ph
from pytest_harness.errors import (
    ApprovalDenied,
    LiveModelBlocked,
    ResolutionError,
    RunAwaitingInput,
    RunFailed,
    RunLimitReached,
    RunRefused,
    UnknownRun,
    UnknownTask,
)

pytestmark = pytest.mark.asyncio

ORDERS = """
rules:
  - id: R1
    when: tool == "refund" && args.amount > 100
    then: approve
    approvers: [finance]
  - id: R2
    when: tool == "delete_account"
    then: deny
    message: "Accounts cannot be deleted here."
  - id: R0
    when: tool == "lookup_order"
    then: allow
guards:
  - id: G1
    on: output
    check: regex
    pattern: '\\b\\d{{16}}\\b'
    action: redact
{guards}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, delete_account, explode]
    {extra}
"""

FINANCE = ph.Principal(id="fiona", roles=("finance",))


def orders(app, script: str, extra: str = "", guards: str = "") -> None:
    """Write the orders app with `script` as the default model's turns."""
    app.write(ORDERS.format(extra=extra, guards=guards))
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


async def test_completed_run_calls_tools_and_records_the_trace(app) -> None:
    orders(
        app,
        "[{call: lookup_order, args: {order_id: A-1}}, "
        "{say: 'Card 4111111111111111 is refunded.', usage: {input_tokens: 10, output_tokens: 5}}]",
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Where is A-1?", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED
    assert result.ok and not result.failed and not result.needs_input
    assert result.output == "Card [REDACTED] is refunded."
    assert result.run_id.startswith("run_") and len(result.run_id) == 36
    assert result.session_id.startswith("ses_")
    assert result.usage.steps == 2 and result.usage.tool_calls == 1
    assert result.usage.tokens_out >= 5
    assert app.tools.CALLS == [("lookup_order", "A-1")]
    trace = result.trace
    assert [d.kind for d in trace] == ["model", "rule", "tool", "model", "guard", "output"]
    assert trace.fired("R0") and trace.fired("G1") and not trace.fired("R1")
    [call] = trace.tool_calls("lookup_order")
    assert call.args == {"order_id": "A-1"} and call.outcome == "ok"
    assert call.result["card"] == "4111111111111111"
    assert "step 1 tool lookup_order → ok" in trace.render()
    assert "step 2 guard G1 → redact (output)" in trace.render()
    assert result.raise_for_status() is result


async def test_approval_suspends_and_approve_resumes(app) -> None:
    orders(
        app,
        "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: 'Refunded.'}]",
    )
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        assert waiting.status is ph.RunStatus.AWAITING_APPROVAL and waiting.needs_input
        request = waiting.approval
        assert request is not None
        assert (request.tool, request.rule_id, request.approvers) == ("refund", "R1", ("finance",))
        assert request.args == {"order_id": "A-1", "amount": 250}
        assert request.requested_by == "ann"
        [pending] = waiting.pending
        assert pending.status == "approval" and pending.call.name == "refund"
        assert pending.execution_key == request.execution_key
        with pytest.raises(RunAwaitingInput):
            waiting.raise_for_status()
        assert app.tools.CALLS == []  # nothing ran before the decision

        again = await harness.result(waiting.run_id)
        assert again == waiting

        done = await harness.approve(
            waiting.run_id, request.approval_id, "approve", approver=FINANCE
        )
        assert done.status is ph.RunStatus.COMPLETED
        assert done.output == "Refunded."
        [refund] = [c for c in app.tools.CALLS if c[0] == "refund"]
        assert refund[3] == request.execution_key and refund[4] == 1
        kinds = [(d.kind, d.key) for d in done.trace]
        assert ("approval", "refund") in kinds
        assert done.trace.of_kind("approval")[0].detail["approver"] == "fiona"

        with pytest.raises(ResolutionError, match="already answered: approve by fiona"):
            await harness.approve(waiting.run_id, request.approval_id, "decline", approver=FINANCE)


async def test_wrong_approvers_are_refused(app) -> None:
    orders(app, "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: 'ok'}]")
    async with ph.load(app.spec) as harness:
        waiting = await harness.run(
            "orders", "Refund A-1", principal=ph.Principal("ann", ("finance",))
        )
        approval_id = waiting.approval.approval_id
        with pytest.raises(ApprovalDenied, match="needs one of the roles finance"):
            await harness.approve(waiting.run_id, approval_id, "approve", approver="bob")
        with pytest.raises(ApprovalDenied, match="may not approve its own request"):
            await harness.approve(
                waiting.run_id, approval_id, "approve", approver=ph.Principal("ann", ("finance",))
            )
        with pytest.raises(ResolutionError, match="has no approval 'apr_nope'"):
            await harness.approve(waiting.run_id, "apr_nope", "approve", approver=FINANCE)
        with pytest.raises(ResolutionError, match="must be 'approve' or 'decline'"):
            await harness.approve(waiting.run_id, approval_id, "yes", approver=FINANCE)  # type: ignore[arg-type]
        with pytest.raises(UnknownRun, match="run_missing"):
            await harness.approve("run_missing", approval_id, "approve", approver=FINANCE)
        still = await harness.result(waiting.run_id)
        assert still.status is ph.RunStatus.AWAITING_APPROVAL


async def test_self_approve_rule_lets_the_requester_answer(app) -> None:
    orders(app, "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: 'ok'}]")
    app.spec.write_text(
        app.spec.read_text().replace(
            "approvers: [finance]", "approvers: [finance]\n    self_approve: true"
        )
    )
    async with ph.load(app.spec) as harness:
        ann = ph.Principal("ann", ("finance",))
        waiting = await harness.run("orders", "Refund A-1", principal=ann)
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=ann
        )
        assert done.ok


async def test_decline_tells_the_model_permission_denied(app) -> None:
    orders(
        app, "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: 'Sorry, I could not.'}]"
    )
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "decline", approver=FINANCE, reason="no"
        )
    assert done.ok and done.output == "Sorry, I could not."
    [call] = done.trace.tool_calls("refund")
    assert call.outcome == "declined"
    assert app.tools.CALLS == []


async def test_several_pending_calls_need_every_decision(app) -> None:
    orders(
        app,
        "[{calls: [{name: refund, args: {order_id: A-1, amount: 150}}, "
        "{name: lookup_order, args: {order_id: A-2}}, "
        "{name: refund, args: {order_id: A-2, amount: 300}}]}, {say: 'both handled'}]",
    )
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund both", principal="ann")
        assert [p.call.args["order_id"] for p in waiting.pending] == ["A-1", "A-2"]
        first, second = waiting.pending
        middle = await harness.approve(
            waiting.run_id, first.approval_id, "approve", approver=FINANCE
        )
        assert middle.status is ph.RunStatus.AWAITING_APPROVAL
        assert [p.approval_id for p in middle.pending] == [second.approval_id]
        assert app.tools.CALLS == []
        done = await harness.approve(
            waiting.run_id, second.approval_id, "decline", approver=FINANCE
        )
    assert done.ok
    assert [c[0] for c in app.tools.CALLS] == ["refund", "lookup_order"]
    assert [c.outcome for c in done.trace.tool_calls()] == ["ok", "ok", "declined"]


async def test_deny_rule_tells_the_model(app) -> None:
    orders(app, "[{call: delete_account, args: {user: ann}}, {say: 'I cannot do that.'}]")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Delete me", principal="ann")
    assert result.ok
    assert result.trace.fired("R2")
    [call] = result.trace.tool_calls()
    assert call.outcome == "denied"
    assert app.tools.CALLS == []


async def test_model_is_told_about_bad_arguments_unknown_tools_and_errors(app) -> None:
    captured = []

    orders(
        app,
        "[{call: lookup_order, args: {order_id: 5, extra: 1}}, {call: teleport}, "
        "{call: explode, args: {reason: kaboom}}, {say: done}]",
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "go", principal="ann")
        record = await harness.store.get_run(result.run_id)
        captured = [m for m in record.state["messages"] if m["role"] == "tool"]
    assert result.ok
    assert [c.outcome for c in result.trace.tool_calls()] == [
        "invalid_arguments",
        "unknown",
        "error",
    ]
    assert "extra" in captured[0]["content"]
    assert "no tool named 'teleport'" in captured[1]["content"]
    assert "kaboom" in captured[2]["content"]


async def test_input_guard_blocks(app) -> None:
    guards = """
  - id: G2
    on: input
    check: contains
    text: [password, secret]
    ignore_case: true
    action: block
"""
    orders(app, "[{say: never}]", guards=guards)
    async with ph.load(app.spec) as harness:
        refused = await harness.run("orders", "my PASSWORD is hunter2", principal="ann")
        fine = await harness.run("orders", "hello", principal="ann")
    assert refused.status is ph.RunStatus.REFUSED
    assert refused.error["type"] == "GuardBlocked"
    assert refused.trace.fired("G2") and refused.output is None
    with pytest.raises(RunRefused):
        refused.raise_for_status()
    assert fine.ok and not fine.trace.fired("G2")


async def test_budgets_end_runs_limited(app) -> None:
    loop = "[" + ", ".join(["{call: lookup_order, args: {order_id: A-1}}"] * 5) + "]"
    orders(app, loop, extra="budget: {steps: 3}")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "loop", principal="ann")
    assert result.status is ph.RunStatus.LIMITED and result.limit == "steps"
    assert result.usage.steps == 3
    assert result.trace.of_kind("limit")[0].detail == {"limit": 3, "spent": 3}
    with pytest.raises(RunLimitReached, match="limit 'steps'"):
        result.raise_for_status()


@pytest.mark.parametrize(
    ("budget", "limit"),
    [
        ("{tool_calls: 2}", "tool_calls"),
        ("{tokens: 30}", "tokens"),
        ("{usd: 0.00001}", "usd"),
    ],
)
async def test_each_budget_kind(app, budget: str, limit: str) -> None:
    loop = (
        "["
        + ", ".join(
            [
                "{call: lookup_order, args: {order_id: A-1}, "
                "usage: {input_tokens: 10, output_tokens: 10}}"
            ]
            * 5
        )
        + "]"
    )
    orders(app, loop, extra=f"budget: {budget}")
    text = app.spec.read_text().replace(
        "use: scripted", "use: scripted\n    price: {input_per_mtok: 1.0, output_per_mtok: 1.0}", 1
    )
    app.spec.write_text(text)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "loop", principal="ann")
    assert result.status is ph.RunStatus.LIMITED
    assert result.limit == limit


async def test_deadline_cuts_a_slow_model_short(app) -> None:
    orders(app, "[{say: slow, delay: 5s}]", extra="deadline: 0.05s")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hurry", principal="ann")
    assert result.status is ph.RunStatus.LIMITED and result.limit == "deadline"


async def test_deadline_is_paused_while_awaiting_approval(app) -> None:
    import asyncio

    orders(
        app,
        "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: done}]",
        extra="deadline: 0.5s",
    )
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund", principal="ann")
        await asyncio.sleep(0.6)
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
    assert done.ok


async def test_retries_then_fallback_then_failure(app) -> None:
    app.write(
        """
models:
  default:
    use: scripted
    retries: 1
    fallback: [backup]
    script: [{error: rate_limit}, {error: server}]
  backup:
    use: scripted
    retries: 0
    script: [{say: from backup}]
  fragile:
    use: scripted
    retries: 3
    script: [{error: refusal}, {say: never}]
tasks:
  a: {prompt: p}
  b: {prompt: p, model: fragile}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        a = await harness.run("a", "hi", principal="ann")
        b = await harness.run("b", "hi", principal="ann")
    assert a.ok and a.output == "from backup"
    assert [d.detail.get("error") for d in a.trace.of_kind("model")] == [
        "rate_limit",
        "server",
        None,
    ]
    assert b.failed and b.error["type"] == "ModelError" and "refusal" in b.error["message"]
    with pytest.raises(RunFailed):
        b.raise_for_status()
    # the output closes the step the failed model call was (not `step 0 output` after step 1)
    assert [(d.step, d.kind) for d in b.trace] == [(1, "model"), (1, "output")]
    assert b.trace.render().splitlines()[-1].startswith("step 1 output")


async def test_script_exhausted_fails_the_run_naming_task_and_turn(app) -> None:
    orders(app, "[{call: lookup_order, args: {order_id: A-1}}]")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert result.failed
    assert result.error["type"] == "ScriptExhausted"
    assert "task 'orders' asked for turn 2 but the script has 1 turn" in result.error["message"]
    assert "lookup_order" in result.error["message"]


async def test_idempotency_key_returns_the_stored_run(app) -> None:
    orders(app, "[{call: lookup_order, args: {order_id: A-1}}, {say: ok}]")
    async with ph.load(app.spec) as harness:
        first = await harness.run("orders", "x", principal="ann", idempotency_key="req-1")
        again = await harness.run("orders", "x", principal="ann", idempotency_key="req-1")
        other = await harness.run(
            "orders", "x", principal="ann", tenant="t2", idempotency_key="req-1"
        )
    assert again == first
    assert other.run_id != first.run_id
    assert [c[0] for c in app.tools.CALLS] == ["lookup_order", "lookup_order"]


async def test_session_history_reaches_the_next_run(app, write_file) -> None:
    write_file(
        "echo_model.py",
        """
        SEEN = []

        def answer(request):
            SEEN.append([(m["role"], m.get("content")) for m in request.messages])
            return f"turn {len(SEEN)}"
        """,
    )
    app.write(
        """
models:
  default: {use: function, call: "echo_model:answer"}
tasks:
  chat: {prompt: p}
""",
        base=False,
    )
    import sys

    sys.modules.pop("echo_model", None)
    async with ph.load(app.spec) as harness:
        first = await harness.run("chat", "hello", principal="ann")
        second = await harness.run("chat", "again", principal="ann", session_id=first.session_id)
        lone = await harness.run("chat", "alone", principal="ann")
    seen = sys.modules["echo_model"].SEEN
    assert seen[1] == [("user", "hello"), ("assistant", "turn 1"), ("user", "again")]
    assert seen[2] == [("user", "alone")]
    assert second.session_id == first.session_id != lone.session_id
    sys.modules.pop("echo_model", None)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_run_never_joins_another_tenants_session(app, store) -> None:
    orders(app, "[{say: one}, {say: two}, {say: three}]")
    async with ph.load(app.spec, store=store) as harness:
        first = await harness.run("orders", "mine", principal="ann", tenant="a", session_id="s1")
        for tenant in ("b", None):
            with pytest.raises(ph.SessionDenied, match="session 's1' belongs to another tenant"):
                await harness.run(
                    "orders", "yours?", principal="eve", tenant=tenant, session_id="s1"
                )
        with pytest.raises(ph.SessionDenied, match="a run of tenant 'b' cannot join"):
            await harness.submit("orders", "yours?", principal="eve", tenant="b", session_id="s1")
        assert [r.run_id for r in await harness.runs()] == [first.run_id]  # nothing created
        second = await harness.run("orders", "again", principal="bob", tenant="a", session_id="s1")
        started = await harness.run("orders", "new", principal="eve", tenant="b")
        history = (await harness.store.get_run(second.run_id)).state["history_runs"]
    assert second.session_id == "s1" and second.status == ph.RunStatus.COMPLETED
    assert history == [first.run_id]  # a run of the session's tenant joins it
    assert started.session_id != "s1" and started.status == ph.RunStatus.COMPLETED


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_an_empty_tenant_is_no_tenant(app, store) -> None:
    """For sessions and idempotency keys alike, as the stores' keys always had it."""
    orders(app, "[{say: one}, {say: two}, {say: three}]")
    async with ph.load(app.spec, store=store) as harness:
        first = await harness.run("orders", "x", principal="ann", tenant="", session_id="s1")
        joined = await harness.run("orders", "y", principal="bob", session_id="s1")
        by_principal = ph.Principal("eve", tenant="")
        keyed = await harness.run("orders", "z", principal=by_principal, idempotency_key="k")
        again = await harness.run("orders", "z", principal="eve", idempotency_key="k")
        with pytest.raises(ph.SessionDenied):
            await harness.run("orders", "w", principal="x", tenant="a", session_id="s1")
        with pytest.raises(TypeError, match="tenant must be a string or None, got 7"):
            await harness.run("orders", "w", principal="x", tenant=7)  # type: ignore[arg-type]
        tenants = {r.run_id: r.tenant for r in await harness.runs()}
    assert first.status is joined.status is ph.RunStatus.COMPLETED
    assert again.run_id == keyed.run_id
    assert set(tenants.values()) == {None} and len(tenants) == 3


async def test_a_run_that_slipped_into_a_session_at_its_start_is_nobodys_history(app) -> None:
    """Two tenants starting a session's first run at once on sqlite both get in (neither saw the
    other); the session is then its first run's tenant's, and no history holds the other's."""
    store = "sqlite"  # the memory store reads and creates without a pause: no race there
    orders(app, "[{say: one}, {say: two}, {say: three}, {say: four}]")
    async with ph.load(app.spec, store=store) as harness:
        handles = await asyncio.gather(
            harness.submit("orders", "mine", principal="ann", tenant="a", session_id="s1"),
            harness.submit("orders", "theirs", principal="eve", tenant="b", session_id="s1"),
            return_exceptions=True,
        )
        if any(isinstance(h, ph.SessionDenied) for h in handles):  # no race this time
            assert not isinstance(handles[0], BaseException)
            pytest.skip("the two starts did not overlap")
        for handle in handles:
            assert isinstance(handle, ph.RunHandle)
            await handle.result()
        runs = await harness.store.session_runs("s1")
        owner, other = runs[0].tenant, runs[-1].tenant
        assert {owner, other} == {"a", "b"}  # the race this test is about
        later = await harness.run("orders", "again", principal="x", tenant=owner, session_id="s1")
        with pytest.raises(ph.SessionDenied):
            await harness.run("orders", "again", principal="y", tenant=other, session_id="s1")
        kept = (await harness.store.get_run(later.run_id)).state["history_runs"]
    assert kept == [runs[0].run_id]


async def test_live_models_are_blocked_when_not_allowed(app) -> None:
    app.write(
        """
models:
  default: {use: openai, model: gpt-4.1-mini, api_key_env: OPENAI_API_KEY}
tasks:
  chat: {prompt: p}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        with ph.allow_live_models(False), pytest.raises(LiveModelBlocked, match="'openai'"):
            await harness.run("chat", "hi", principal="ann")
        assert await harness.runs() == []


async def test_unknown_task_and_run(app) -> None:
    orders(app, "[{say: hi}]")
    async with ph.load(app.spec) as harness:
        with pytest.raises(UnknownTask, match="did you mean 'orders'"):
            await harness.run("ordres", "x", principal="ann")
        with pytest.raises(UnknownRun, match="run_nope"):
            await harness.result("run_nope")


async def test_match_scripts_pick_turns_by_task_and_input(app) -> None:
    app.write(
        """
models:
  default:
    use: scripted
    script:
      match:
        - {task: a, input: "Refund*", turns: [{say: refunding}]}
        - {task: a, turns: [{say: other}]}
tasks:
  a: {prompt: p}
  b: {prompt: p}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        assert (await harness.run("a", "Refund it", principal="x")).output == "refunding"
        assert (await harness.run("a", "Hello", principal="x")).output == "other"
        b = await harness.run("b", "Refund it", principal="x")
    assert b.failed and b.error["type"] == "ScriptExhausted"


async def test_runs_lists_newest_first_with_filters(app) -> None:
    orders(app, "[{say: hi}]")
    async with ph.load(app.spec) as harness:
        first = await harness.run("orders", "1", principal="ann")
        second = await harness.run("orders", "2", principal="bob", tenant="t")
        listed = await harness.runs()
        assert [r.run_id for r in listed] == [second.run_id, first.run_id]
        assert [r.run_id for r in await harness.runs(tenant="t")] == [second.run_id]
        assert await harness.runs(status="failed") == []
        assert listed[0].principal == "bob"


@pytest.mark.parametrize(("error", "incomplete"), [("server", True), ("rate_limit", False)])
async def test_usage_is_incomplete_after_an_attempt_that_may_have_been_charged(
    app, error: str, incomplete: bool
) -> None:
    app.write("tasks:\n  t: {prompt: p}\n")
    script = f"[{{error: {error}}}, {{say: fine}}]"
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
        again = await harness.result(result.run_id)
    assert result.ok and result.output == "fine"
    assert result.usage.incomplete is incomplete
    assert again.usage.incomplete is incomplete
    assert ("incomplete" in result.usage.to_dict()) is incomplete


async def test_an_error_that_is_not_retried_goes_to_the_fallback_at_once(app, write_file) -> None:
    write_file(
        "locked_model.py",
        """
        from pytest_harness.errors import ModelError

        CALLS = []

        def answer(request):
            CALLS.append(request.turn)
            raise ModelError("auth", "401 from the provider: check $OPENAI_API_KEY")
        """,
    )
    app.write(
        """
models:
  default: {use: function, call: "locked_model:answer", retries: 3, fallback: [backup]}
  backup: {use: scripted, script: [{say: from backup}]}
tasks:
  t: {prompt: p}
""",
        base=False,
    )
    import sys

    sys.modules.pop("locked_model", None)
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
    assert result.ok and result.output == "from backup"
    assert sys.modules["locked_model"].CALLS == [0]  # not retried
    assert [d.detail.get("error") for d in result.trace.of_kind("model")] == ["auth", None]
    sys.modules.pop("locked_model", None)


async def test_an_approval_is_bound_to_the_pending_call_and_its_arguments(app) -> None:
    orders(app, "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: ok}]")
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        record = await harness.store.get_run(waiting.run_id)
        state = dict(record.state)
        calls = [dict(c) for c in state["calls"]]
        calls[0]["args"] = {"order_id": "A-1", "amount": 9999}  # the call changed under it
        state["calls"] = calls
        token = await harness.store.acquire_lease(waiting.run_id, "tamper", 30.0)
        await harness.store.commit(
            waiting.run_id, token, status="awaiting_approval", state=state, release=True
        )
        with pytest.raises(ResolutionError, match="does not match the run's pending call"):
            await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
            )
        assert app.tools.CALLS == []


async def test_runs_with_an_unknown_status_names_the_valid_ones(app) -> None:
    orders(app, "[{say: hi}]")
    async with ph.load(app.spec) as harness:
        with pytest.raises(ValueError, match=r"unknown run status 'bogus' \(valid: running,"):
            await harness.runs(status="bogus")
    assert str(ph.RunStatus.COMPLETED) == "completed"
