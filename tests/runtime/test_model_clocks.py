"""`retry_budget` and `first_event_timeout` through the public API, in one process.

The crash cases (a worker SIGKILLed part-way, the run resumed in another process) are in
`test_model_clocks_processes.py`; here the budget also survives an approval answered by another
`Harness` on the same SQLite file.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import pytest_harness as ph

pytestmark = pytest.mark.asyncio

FINANCE = ph.Principal(id="fiona", roles=("finance",))


def limited(wait: float, n: int) -> str:
    return ", ".join([f"{{error: rate_limit, retry_after: {wait}s}}"] * n)


async def test_the_budget_stops_retries_before_the_count_does(app) -> None:
    app.write(
        f"""
models:
  default:
    use: scripted
    retries: 20
    retry_budget: 0.25s
    script: [{limited(0.1, 10)}]
tasks:
  t: {{prompt: p}}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        started = time.monotonic()
        result = await harness.run("t", "hi", principal="ann")
        took = time.monotonic() - started
    assert result.failed
    message = result.error["message"]
    assert "rate_limit" in message
    assert (
        "retry budget of model 'default' spent: 0.2s of its 0.25s waited in this run, and the "
        "next retry would wait 0.1s more (models.default.retry_budget)"
    ) in message
    errors = [d.detail.get("error") for d in result.trace.of_kind("model")]
    assert errors == ["rate_limit"] * 3  # two waits of 0.1 s between three attempts
    assert 0.2 <= took < 1.0


async def test_a_spent_budget_sends_the_step_to_the_fallback(app) -> None:
    app.write(
        f"""
models:
  default:
    use: scripted
    retries: 20
    retry_budget: 0.1s
    fallback: [backup]
    script: [{limited(0.1, 5)}]
  backup: {{use: scripted, script: [{{say: from backup}}]}}
tasks:
  t: {{prompt: p}}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
    assert result.ok and result.output == "from backup"
    assert [d.key for d in result.trace.of_kind("model")] == ["default", "default", "backup"]


async def test_the_budget_is_the_runs_across_an_approval_answered_elsewhere(app) -> None:
    """Before the approval the run waits 0.2 s of its 0.3 s; after it, only 0.1 s is left.

    With a fresh budget the three 429s after the approval would be waited out and the run
    would complete; with what is left it fails at the second one.
    """
    app.write(
        f"""
models:
  default:
    use: scripted
    retries: 5
    retry_budget: 0.3s
    script:
      - {{error: rate_limit, retry_after: 0.1s}}
      - {{error: rate_limit, retry_after: 0.1s}}
      - {{call: refund, args: {{order_id: A-1, amount: 250}}}}
      - {{error: rate_limit, retry_after: 0.1s}}
      - {{error: rate_limit, retry_after: 0.1s}}
      - {{error: rate_limit, retry_after: 0.1s}}
      - {{say: refunded}}
tools:
  refund: {{call: "{app.module}:refund", replay: idempotent}}
rules:
  - {{id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}}
tasks:
  t: {{prompt: p, tools: [refund]}}
state: {{use: sqlite, path: state.db}}
""",
        base=False,
    )
    async with ph.load(app.spec) as first:
        waiting = await first.run("t", "refund A-1", principal="ann")
    assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
    assert waiting.approval is not None
    async with ph.load(app.spec) as second:  # another worker, the same store
        result = await second.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        stored = await second.store.get_run(waiting.run_id)
    assert result.failed
    assert "spent: 0.3s of its 0.3s waited in this run" in result.error["message"]
    assert stored.state["clocks"]["default"]["retry_waited"] == pytest.approx(0.3)
    errors = [d.detail.get("error") for d in result.trace.of_kind("model")]
    assert errors == ["rate_limit", "rate_limit", None, "rate_limit", "rate_limit"]


async def test_a_slow_scripted_turn_misses_its_first_event_deadline_and_is_retried(app) -> None:
    app.write(
        """
models:
  default:
    use: scripted
    retries: 1
    first_event_timeout: 0.1s
    script: [{say: too late, delay: 5s}, {say: on time, delay: 0.02s}]
tasks:
  t: {prompt: p}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        started = time.monotonic()
        result = await harness.run("t", "hi", principal="ann")
        took = time.monotonic() - started
        stored = await harness.store.get_run(result.run_id)
    assert result.ok and result.output == "on time"
    assert took < 1.0  # the 5 s turn was cut off at 0.1 s
    assert [d.detail.get("error") for d in result.trace.of_kind("model")] == ["timeout", None]
    clock = stored.state["clocks"]["default"]
    assert 0.02 <= clock["first_event_last"] < 0.1
    assert stored.state["waiting"] is None


async def test_a_streamed_piece_is_the_first_event_of_a_function_model(app, write_file) -> None:
    write_file(
        "streamer.py",
        """
        import asyncio

        async def answer(request):
            request.on_text("Thinking")  # the reply starts at once...
            await asyncio.sleep(0.3)  # ...and takes longer than first_event_timeout in all
            return "Thinking done"

        async def mute(request):
            await asyncio.sleep(0.3)
            return "too late"
        """,
    )
    app.write(
        """
models:
  default: {use: function, call: "streamer:answer", first_event_timeout: 0.1s, retries: 0}
  mute: {use: function, call: "streamer:mute", first_event_timeout: 0.1s, retries: 0}
tasks:
  t: {prompt: p}
  m: {prompt: p, model: mute}
""",
        base=False,
    )
    import sys

    sys.path.insert(0, str(app.root))
    try:
        async with ph.load(app.spec) as harness:
            streamed = await harness.run("t", "hi", principal="ann")
            muted = await harness.run("m", "hi", principal="ann")
    finally:
        sys.path.remove(str(app.root))
        sys.modules.pop("streamer", None)
    assert streamed.ok and streamed.output == "Thinking done"
    assert muted.failed
    assert (
        "model 'mute' sent no first byte or event within its first_event_timeout of 0.1s"
        in (muted.error["message"])
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("retry_budget: 0", "models.default.retry_budget: must be more than zero seconds, got 0"),
        (
            "retry_budget: 0s",
            "models.default.retry_budget: must be more than zero seconds, got '0s'",
        ),
        ("retry_budget: -5", "models.default.retry_budget: a duration cannot be negative"),
        (
            "first_event_timeout: 0",
            "models.default.first_event_timeout: must be more than zero seconds, got 0",
        ),
        ("first_event_timeout: -1s", "models.default.first_event_timeout: a duration must be"),
    ],
)
async def test_zero_or_negative_settings_are_spec_errors_naming_the_key(
    app, setting: str, message: str
) -> None:
    app.write(
        f"""
models:
  default:
    use: scripted
    script: [{{say: hi}}]
    {setting}
tasks:
  t: {{prompt: p}}
""",
        base=False,
    )
    with pytest.raises(ph.SpecError) as caught:
        ph.load(app.spec)
    assert message in str(caught.value)
    assert caught.value.key is not None and caught.value.key.startswith("models.default.")


async def test_a_call_stopped_mid_retries_keeps_its_retries_count_when_resumed(app) -> None:
    """The drive is stopped (its task cancelled, as a dying worker's is) during the second
    wait; the resumed call has the one attempt left of `retries: 3`, not four fresh ones."""
    app.write(
        f"""
models:
  default:
    use: scripted
    retries: 3
    script: [{limited(0.3, 6)}, {{say: too many tries}}]
tasks:
  t: {{prompt: p}}
state: {{use: sqlite, path: state.db}}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(harness.run("t", "hi", principal="ann"), 0.45)
        (summary,) = await harness.runs()
        stopped = await harness.store.get_run(summary.run_id)
        assert stopped.state["clocks"]["default"]["call_failures"] == 2
        result = await harness.resume(summary.run_id)
        stored = await harness.store.get_run(summary.run_id)
    assert result.failed and "rate_limit" in result.error["message"]
    errors = [d.detail.get("error") for d in result.trace.of_kind("model")]
    assert errors == ["rate_limit"] * 4  # retries: 3 is four attempts in all, across the drives
    assert "call_failures" not in stored.state["clocks"]["default"]
    assert stored.state["clocks"]["default"]["retry_waited"] == pytest.approx(0.9)
