"""Durable runs in one process: pause, cancel, recover, resolve, attempt resets, event streams.

A worker that stops mid-run is simulated here by cancelling the task that drives the run: its
commits stop where they are and its lease is released, so `recover()` may take the run at once.
`test_crash.py` does the same with real processes and SIGKILL.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.store.base import Event

pytestmark = pytest.mark.asyncio

TOOLS = '''
import asyncio
import pytest_harness as ph
from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

LOG = []
"""(tool, execution key, attempt) of every invocation."""
GATES = {}
"""name -> asyncio.Event a checkpoint waits on; ENTERED[name] is set when it is reached."""
ENTERED = {}
STREAM = []
"""Pieces the model streams through on_text before its final answer."""


async def checkpoint(name):
    gate = GATES.get(name)
    if gate is not None:
        ENTERED.setdefault(name, asyncio.Event()).set()
        await gate.wait()


async def _tool(name, amount):
    ctx = ph.current_tool_context()
    LOG.append((name, ctx.execution_key, ctx.attempt))
    await checkpoint(name)
    return {"tool": name, "amount": amount}


async def charge(amount: int) -> dict:
    """Charges a card (manual replay)."""
    return await _tool("charge", amount)


async def lookup(amount: int) -> dict:
    """Looks up (safe replay)."""
    return await _tool("lookup", amount)


async def refund(amount: int) -> dict:
    """Refunds (idempotent replay)."""
    return await _tool("refund", amount)


async def model(request):
    await checkpoint(f"model{request.turn}")
    last = request.messages[-1]
    if last["role"] == "tool":
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        text = "done: " + " | ".join(results)
        for piece in STREAM:
            request.on_text(piece)
        await checkpoint("streamed")
        return ModelResponse(text=text, usage=TokenUsage(10, 2))
    calls = []
    for index, part in enumerate(request.input.split(",")):
        name, amount = part.split()
        calls.append(ProposedCall(f"c{index}", name, {"amount": int(amount)}))
    return ModelResponse(calls=tuple(calls), usage=TokenUsage(10, 2))
'''

SPEC = """
version: 1
name: durable
models:
  default: {{use: function, call: "{mod}:model", retries: 0}}
tools:
  charge: {{call: "{mod}:charge"}}
  lookup: {{call: "{mod}:lookup", replay: safe}}
  refund: {{call: "{mod}:refund", replay: idempotent}}
rules:
  - {{id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}}
tasks:
  t: {{prompt: p, tools: [charge, lookup, refund], {task_extra}}}
state: {{use: {store}, path: state.db, lease: {lease}, record: true{postgres}}}
"""

FINANCE = ph.Principal("fiona", ("finance",))


class Durable:
    """A temp app whose tools and model stop at named checkpoints when a test asks them to."""

    def __init__(self, root: Path, module: ModuleType, spec: Path) -> None:
        self.root = root
        self.tools = module
        self.spec = spec

    def gate(self, name: str) -> asyncio.Event:
        """Make checkpoint `name` wait until the returned event is set."""
        gate = asyncio.Event()
        self.tools.GATES[name] = gate
        self.tools.ENTERED[name] = asyncio.Event()
        return gate

    async def reached(self, name: str) -> None:
        await asyncio.wait_for(self.tools.ENTERED[name].wait(), 5)

    def open(self) -> ph.Harness:
        return ph.load(self.spec)

    def calls(self, name: str) -> list[tuple[str, str, int]]:
        return [entry for entry in self.tools.LOG if entry[0] == name]


def make_app(
    root: Path, store: str, task_extra: str = "", pg_schema: str = "", lease: str = "5s"
) -> Durable:
    name = f"durable_{uuid.uuid4().hex[:12]}"
    (root / f"{name}.py").write_text(TOOLS, encoding="utf-8")
    spec = root / "harness.yaml"
    spec.write_text(
        SPEC.format(
            mod=name,
            store=store,
            task_extra=task_extra or "labels: {}",
            postgres=f", dsn_env: HARNESS_TEST_DSN, schema: {pg_schema}" if pg_schema else "",
            lease=lease,
        ),
        encoding="utf-8",
    )
    sys.path.insert(0, str(root))
    try:
        module = __import__(name)
    finally:
        sys.path.remove(str(root))
    return Durable(root, module, spec)


def make_store_app(request: pytest.FixtureRequest, root: Path, store: str) -> Durable:
    """`make_app` on `store`; on postgres, with a schema of this test and its DSN in the env."""
    if store != "postgres":
        return make_app(root, store)
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("HARNESS_TEST_DSN", request.getfixturevalue("pg_dsn"))
    return make_app(root, store, pg_schema=request.getfixturevalue("pg_schema"))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Durable]:
    made = make_store_app(request, tmp_path, request.param)
    yield made
    sys.modules.pop(made.tools.__name__, None)


@pytest.fixture
def on_sqlite(tmp_path: Path) -> Iterator[Durable]:
    made = make_app(tmp_path, "sqlite")
    yield made
    sys.modules.pop(made.tools.__name__, None)


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Durable]:
    """An app on a store several processes share (sqlite, postgres)."""
    made = make_store_app(request, tmp_path, request.param)
    yield made
    sys.modules.pop(made.tools.__name__, None)


async def interrupt(harness: ph.Harness, app: Durable, checkpoint: str, *args: Any) -> str:
    """Start a run, wait until it reaches `checkpoint`, then stop its worker there."""
    app.gate(checkpoint)
    handle = await harness.submit("t", *args, principal="ann")
    await app.reached(checkpoint)
    handle._task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handle._task
    app.tools.GATES.pop(checkpoint)
    return handle.run_id


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


def kinds(events: list[Event]) -> list[str]:
    return [event.kind for event in events]


# -- recovery ---------------------------------------------------------------------------------


async def test_an_interrupted_manual_call_waits_for_a_resolution(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        interrupted = await harness.result(run_id)
        assert interrupted.status is ph.RunStatus.RUNNING
        [waiting] = await harness.recover()
        assert waiting.run_id == run_id
        assert waiting.status is ph.RunStatus.AWAITING_RESOLUTION and waiting.needs_input
        [pending] = waiting.pending
        assert (pending.status, pending.call) == ("uncertain", ph.Call("charge", {"amount": 5}))
        assert len(durable.calls("charge")) == 1  # not invoked again on a guess
        assert await harness.recover() == []  # it waits for a person now
        assert (await harness.resume(run_id)).status is ph.RunStatus.AWAITING_RESOLUTION
        done = await harness.resolve(
            run_id, pending.execution_key, result={"charged": 5}, resolver="ops-olga"
        )
        events = await collect(harness.stream(run_id))
    assert done.ok and done.output == 'done: {"charged":5}'
    assert len(durable.calls("charge")) == 1
    [call] = done.trace.tool_calls("charge")
    assert (call.outcome, call.result) == ("resolved", {"charged": 5})
    assert kinds(events)[-7:] == [
        "recovery_required",
        "status_changed",
        "tool_resolved",
        "status_changed",
        "text_complete",
        "status_changed",
        "run_result",
    ]
    resolved = events[-5]
    assert resolved.data == {
        "execution_key": pending.execution_key,
        "tool": "charge",
        "resolution": "result",
        "by": "ops-olga",
    }


async def test_a_resolution_with_an_integer_too_long_for_decimal_text_is_kept_as_hex(
    durable: Durable,
) -> None:
    """Before: `resolve` raised a bare `ValueError` (integer string conversion) and the run
    stayed `awaiting_resolution`; the value is now kept as its `hex()`, as a tool's result."""
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        [waiting] = await harness.recover()
        [pending] = waiting.pending
        done = await harness.resolve(run_id, pending.execution_key, result=10**5000)
        again = await harness.result(run_id)
    assert done.ok and done.output == f'done: "{hex(10**5000)}"', done.error
    assert again.output == done.output


async def test_a_resolution_with_text_no_store_can_hold_is_refused_and_writes_nothing(
    durable: Durable,
) -> None:
    """Before: the commit failed four times over and `resolve` raised `RecordingError` (the
    flight recorder could not write the journal); now `StoreError` naming the place, before
    the run is read. The call stays uncertain and takes a good result."""
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        [waiting] = await harness.recover()
        [pending] = waiting.pending
        before = [event.kind for event in await harness.store.events(run_id)]
        with pytest.raises(ph.StoreError) as caught:
            await harness.resolve(run_id, pending.execution_key, result="note: x\udcff")
        after = await harness.result(run_id)
        assert [event.kind for event in await harness.store.events(run_id)] == before
        done = await harness.resolve(run_id, pending.execution_key, result="note: x")
    assert str(caught.value).startswith(
        f"cannot resolve {pending.execution_key!r} of run {run_id} with this result: "
        "result: text with a lone surrogate, no UTF-8 ('note: x\\udcff'); nothing was written"
    ), str(caught.value)
    assert after.status is ph.RunStatus.AWAITING_RESOLUTION
    assert done.ok, done.error


async def test_retry_invokes_again_with_the_same_key(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        [waiting] = await harness.recover()
        key = waiting.pending[0].execution_key
        done = await harness.resolve(run_id, key, retry=True)
    assert done.ok and done.output == 'done: {"tool":"charge","amount":5}'
    assert durable.calls("charge") == [("charge", key, 1), ("charge", key, 2)]
    assert [c.outcome for c in done.trace.tool_calls("charge")] == ["ok"]


async def test_abort_tells_the_model_and_continues(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        [waiting] = await harness.recover()
        key = waiting.pending[0].execution_key
        done = await harness.resolve(run_id, key, abort=True, resolver="ops-olga")
    assert done.ok
    assert done.output is not None
    assert (
        "aborted by ops-olga" in done.output and "may or may not have taken effect" in done.output
    )
    [call] = done.trace.tool_calls("charge")
    assert call.outcome == "aborted"
    assert len(durable.calls("charge")) == 1


@pytest.mark.parametrize("tool", ["lookup", "refund"])
async def test_safe_and_idempotent_calls_are_invoked_again(durable: Durable, tool: str) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, tool, f"{tool} 5")
        [done] = await harness.recover()
        events = await collect(harness.stream(run_id))
    assert done.ok and done.pending == ()
    first, second = durable.calls(tool)
    assert first[1] == second[1]  # the same execution key
    assert (first[2], second[2]) == (1, 2)  # a new attempt
    starts = [e.data for e in events if e.kind == "tool_call_start"]
    assert [s["attempt"] for s in starts] == [1, 2]
    assert "recovery_required" not in kinds(events)


async def test_a_committed_result_is_reused_and_the_model_asked_again(durable: Durable) -> None:
    async with durable.open() as harness:
        # Interrupted during the second model call: the tool's result is committed.
        run_id = await interrupt(harness, durable, "model1", "charge 5")
        [done] = await harness.recover()
        events = await collect(harness.stream(run_id))
    assert done.ok and done.output == 'done: {"tool":"charge","amount":5}'
    assert len(durable.calls("charge")) == 1
    [reset] = [e for e in events if e.kind == "attempt_reset"]
    assert reset.data["reason"] == "interrupted" and reset.data["turn"] == 1
    assert reset.data["attempt"].startswith("att_")
    assert kinds(events).index("attempt_reset") > kinds(events).index("tool_result")


async def test_an_interrupted_first_model_call_is_reissued(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "model0", "charge 5")
        [done] = await harness.recover()
        events = await collect(harness.stream(run_id))
    assert done.ok and len(durable.calls("charge")) == 1
    assert kinds(events)[:3] == ["run_started", "attempt_reset", "tool_call_start"]


async def test_resolved_runs_replay_the_same(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5, lookup 1")
        [waiting] = await harness.recover()
        await harness.resolve(run_id, waiting.pending[0].execution_key, abort=True)
        report = await harness.replay(run_id)
    assert report.same, report.render()


async def test_recover_skips_busy_runs_and_resumes_the_others(shared: Durable) -> None:
    app = shared
    async with app.open() as harness, app.open() as other:
        first = await interrupt(harness, app, "lookup", "lookup 1")
        second = await interrupt(harness, app, "refund", "refund 2")
        token = await other.store.acquire_lease(first, "another-worker", 30)
        results = await harness.recover()
        assert [r.run_id for r in results] == [second] and results[0].ok
        await other.store.release_lease(first, token)
        [again] = await harness.recover()
        assert again.run_id == first and again.ok


async def test_concurrent_recovers_split_the_runs_and_return_only_their_own(
    shared: Durable,
) -> None:
    app = shared
    async with app.open() as first, app.open() as second, app.open() as third:
        left = [await interrupt(first, app, "lookup", f"lookup {i}") for i in range(8)]
        results = await asyncio.gather(first.recover(), second.recover(), third.recover())
    ids = [r.run_id for result in results for r in result]
    assert sorted(ids) == sorted(left)  # each run in exactly one worker's result
    assert all(r.ok for result in results for r in result)
    assert len(app.calls("lookup")) == 8 + 8  # once interrupted, once to the end: never twice


async def test_resume_of_a_run_this_harness_drives_is_busy(durable: Durable) -> None:
    gate = durable.gate("lookup")
    async with durable.open() as harness:
        handle = await harness.submit("t", "lookup 1", principal="ann")
        await durable.reached("lookup")
        with pytest.raises(ph.RunBusy):
            await harness.resume(handle.run_id)
        assert await harness.recover() == []
        gate.set()
        assert (await handle.result()).ok
    assert len(durable.calls("lookup")) == 1


async def test_a_run_whose_stored_state_is_damaged_is_a_store_error_and_keeps_no_lease(
    on_sqlite: Durable,
) -> None:
    import sqlite3
    from contextlib import closing

    app = on_sqlite
    async with app.open() as harness, app.open() as other:
        run_id = await interrupt(harness, app, "lookup", "lookup 1")
        with closing(sqlite3.connect(app.root / "state.db")) as db, db:
            db.execute(
                "UPDATE runs SET state = json_set(state, '$.usage.steps', 'many') WHERE run_id = ?",
                (run_id,),
            )
        with pytest.raises(ph.StoreError, match=rf"run {run_id}: its stored state cannot be read"):
            await harness.resume(run_id)
        record = await other.store.get_run(run_id)
        assert record.lease_owner is None  # released: another worker is not kept out
        with pytest.raises(ph.StoreError, match="'many'"):
            await other.resume(run_id)  # not RunBusy


# -- resolve: what it refuses -----------------------------------------------------------------


async def test_resolve_takes_exactly_one_resolution(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        [waiting] = await harness.recover()
        key = waiting.pending[0].execution_key
        with pytest.raises(ph.ResolutionError, match=r"exactly one.*got none of them"):
            await harness.resolve(run_id, key)
        with pytest.raises(ph.ResolutionError, match="got result= and abort="):
            await harness.resolve(run_id, key, result=None, abort=True)
        with pytest.raises(ph.ResolutionError, match="got retry= and abort="):
            await harness.resolve(run_id, key, retry=True, abort=True)
        with pytest.raises(ph.UnknownExecutionKey, match="exk_nope") as info:
            await harness.resolve(run_id, "exk_nope", retry=True)
        assert (info.value.run_id, info.value.execution_key) == (run_id, "exk_nope")
        done = await harness.resolve(run_id, key, result=None)  # None is a result too
        assert done.ok
        with pytest.raises(ph.ResolutionError, match="already has its outcome"):
            await harness.resolve(run_id, key, retry=True)


async def test_a_call_that_is_not_uncertain_cannot_be_resolved(durable: Durable) -> None:
    async with durable.open() as harness:
        waiting = await harness.run("t", "refund 500", principal="ann")
        assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
        key = waiting.pending[0].execution_key
        with pytest.raises(ph.ResolutionError, match="is planned, not uncertain"):
            await harness.resolve(waiting.run_id, key, retry=True)
        with pytest.raises(ph.UnknownRun):
            await harness.resolve("run_nope", key, retry=True)


async def test_an_uncertain_call_of_a_cancelled_run_cannot_be_resolved(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "charge", "charge 5")
        [waiting] = await harness.recover()
        cancelled = await harness.cancel(run_id)
        assert cancelled.status is ph.RunStatus.CANCELLED
        with pytest.raises(ph.ResolutionError, match="is cancelled, not awaiting resolution"):
            await harness.resolve(run_id, waiting.pending[0].execution_key, retry=True)


async def test_racing_resolvers_one_wins(shared: Durable) -> None:
    app = shared
    async with app.open() as one, app.open() as two:
        run_id = await interrupt(one, app, "charge", "charge 5")
        [waiting] = await one.recover()
        key = waiting.pending[0].execution_key
        outcomes = await asyncio.gather(
            one.resolve(run_id, key, retry=True, resolver="a"),
            two.resolve(run_id, key, abort=True, resolver="b"),
            return_exceptions=True,
        )
    results = [o for o in outcomes if isinstance(o, ph.RunResult)]
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(results) == 1 and results[0].ok
    assert len(errors) == 1 and isinstance(errors[0], ph.ResolutionError | ph.RunBusy)


# -- pause and cancel -------------------------------------------------------------------------


async def test_pause_lets_the_running_tool_settle_then_stops(durable: Durable) -> None:
    gate = durable.gate("lookup")
    async with durable.open() as harness:
        handle = await harness.submit("t", "lookup 1, charge 2", principal="ann")
        await durable.reached("lookup")
        still = await harness.pause(handle.run_id)
        assert still.status is ph.RunStatus.RUNNING  # its worker pauses it at the next boundary
        gate.set()
        paused = await handle.result()
        assert paused.status is ph.RunStatus.PAUSED and not paused.needs_input
        assert [c.name for c in paused.trace.tool_calls()] == ["lookup"]
        assert durable.calls("charge") == []  # nothing new started
        assert await harness.recover() == []  # a paused run is not interrupted
        assert (await harness.pause(handle.run_id)).status is ph.RunStatus.PAUSED
        done = await harness.resume(handle.run_id)
        events = await collect(harness.stream(handle.run_id))
    assert (
        done.ok
        and done.output == 'done: {"tool":"lookup","amount":1} | {"tool":"charge","amount":2}'
    )
    assert len(durable.calls("lookup")) == 1 and len(durable.calls("charge")) == 1
    statuses = [e.data["status"] for e in events if e.kind == "status_changed"]
    assert statuses == ["paused", "running", "completed"]


async def test_pause_during_a_model_call_starts_no_tool(durable: Durable) -> None:
    gate = durable.gate("model0")
    async with durable.open() as harness:
        handle = await harness.submit("t", "charge 5", principal="ann")
        await durable.reached("model0")
        await harness.pause(handle.run_id)
        gate.set()
        paused = await handle.result()
        assert paused.status is ph.RunStatus.PAUSED and paused.pending == ()
        assert durable.calls("charge") == []
        done = await harness.resume(handle.run_id)  # dispatched afresh, not "uncertain"
    assert done.ok and len(durable.calls("charge")) == 1
    assert durable.calls("charge")[0][2] == 1


async def test_cancel_ends_the_run_and_nothing_resumes_it(durable: Durable) -> None:
    gate = durable.gate("lookup")
    async with durable.open() as harness:
        handle = await harness.submit("t", "lookup 1, charge 2", principal="ann")
        await durable.reached("lookup")
        await harness.cancel(handle.run_id)
        gate.set()
        cancelled = await handle.result()
        assert cancelled.status is ph.RunStatus.CANCELLED and cancelled.pending == ()
        with pytest.raises(ph.RunCancelled):
            cancelled.raise_for_status()
        assert await harness.recover() == []
        assert await harness.resume(handle.run_id) == cancelled
        assert await harness.pause(handle.run_id) == cancelled
        assert await harness.cancel(handle.run_id) == cancelled
        events = await collect(handle.events())
    assert durable.calls("charge") == []
    assert kinds(events)[-2:] == ["status_changed", "run_result"]
    assert events[-1].data == {"status": "cancelled"}


async def test_pause_and_cancel_of_a_waiting_run_act_at_once(durable: Durable) -> None:
    async with durable.open() as harness:
        waiting = await harness.run("t", "refund 500", principal="ann")
        approval_id = waiting.pending[0].approval_id
        assert approval_id is not None
        paused = await harness.pause(waiting.run_id)
        assert paused.status is ph.RunStatus.PAUSED
        assert [p.status for p in paused.pending] == ["approval"]
        # A paused run takes the answer and stays paused until resumed.
        answered = await harness.approve(waiting.run_id, approval_id, "approve", approver=FINANCE)
        assert answered.status is ph.RunStatus.PAUSED and answered.pending == ()
        assert durable.calls("refund") == []
        done = await harness.resume(waiting.run_id)
        assert done.ok and len(durable.calls("refund")) == 1

        other = await harness.run("t", "refund 600", principal="ann")
        cancelled = await harness.cancel(other.run_id)
        assert cancelled.status is ph.RunStatus.CANCELLED
        other_approval = other.pending[0].approval_id
        assert other_approval is not None
        with pytest.raises(ph.ResolutionError, match="cancelled, not awaiting approval"):
            await harness.approve(other.run_id, other_approval, "approve", approver=FINANCE)


async def test_a_paused_run_resumed_still_waits_for_its_approval(durable: Durable) -> None:
    async with durable.open() as harness:
        waiting = await harness.run("t", "refund 500", principal="ann")
        await harness.pause(waiting.run_id)
        again = await harness.resume(waiting.run_id)
        assert again.status is ph.RunStatus.AWAITING_APPROVAL
        assert again.approval is not None


async def test_an_interrupted_run_is_paused_or_cancelled_directly(durable: Durable) -> None:
    async with durable.open() as harness:
        run_id = await interrupt(harness, durable, "lookup", "lookup 1")
        assert (await harness.pause(run_id)).status is ph.RunStatus.PAUSED
        assert await harness.recover() == []
        done = await harness.resume(run_id)  # safe: invoked again
        assert done.ok and len(durable.calls("lookup")) == 2
        other = await interrupt(harness, durable, "charge", "charge 1")
        assert (await harness.cancel(other)).status is ph.RunStatus.CANCELLED
        assert await harness.recover() == []


async def test_the_deadline_does_not_run_while_paused(tmp_path: Path) -> None:
    app = make_app(tmp_path, "sqlite", task_extra="deadline: 0.4s")
    try:
        async with app.open() as harness:
            waiting = await harness.run("t", "refund 500", principal="ann")
            await harness.pause(waiting.run_id)
            await asyncio.sleep(0.5)
            approval_id = waiting.pending[0].approval_id
            assert approval_id is not None
            await harness.approve(waiting.run_id, approval_id, "approve", approver=FINANCE)
            await asyncio.sleep(0.1)
            done = await harness.resume(waiting.run_id)
        assert done.ok, done.limit
    finally:
        sys.modules.pop(app.tools.__name__, None)


async def test_the_deadline_does_not_run_while_awaiting_resolution(tmp_path: Path) -> None:
    app = make_app(tmp_path, "memory", task_extra="deadline: 0.4s")
    try:
        async with app.open() as harness:
            run_id = await interrupt(harness, app, "charge", "charge 5")
            [waiting] = await harness.recover()
            await asyncio.sleep(0.5)
            done = await harness.resolve(run_id, waiting.pending[0].execution_key, retry=True)
        assert done.ok, done.limit
    finally:
        sys.modules.pop(app.tools.__name__, None)


# -- events -----------------------------------------------------------------------------------


async def test_stream_follows_a_run_live_and_ends_with_it(durable: Durable) -> None:
    gate = durable.gate("lookup")
    streamed = durable.gate("streamed")  # the answer is streamed, not yet committed
    durable.tools.STREAM[:] = ["do", "ne"]
    async with durable.open() as harness:
        handle = await harness.submit("t", "lookup 1", principal="ann")
        seen: list[Event] = []
        async for event in handle.events():
            seen.append(event)
            if event.kind == "tool_call_start":
                gate.set()
            if event.kind == "text_delta" and event.data["text"] == "ne":
                streamed.set()
        result = await handle.result()
        stored = await collect(harness.stream(handle.run_id))
    assert result.ok
    assert kinds(seen)[-1] == "run_result"
    # Text deltas came live first (no cursor), and were not repeated when they committed.
    live = [e for e in seen if e.cursor == ""]
    assert [(e.kind, e.data["text"]) for e in live] == [("text_delta", "do"), ("text_delta", "ne")]
    assert [e.cursor for e in seen if e.cursor] == [
        e.cursor for e in stored if e.kind != "text_delta"
    ]
    assert kinds(stored) == [
        "run_started",
        "tool_call_start",
        "tool_result",
        "text_delta",
        "text_delta",
        "text_complete",
        "status_changed",
        "run_result",
    ]
    deltas = [e.data for e in stored if e.kind == "text_delta"]
    assert [(d["seq"], d["text"]) for d in deltas] == [(1, "do"), (2, "ne")]
    assert deltas[0]["attempt"] == live[0].data["attempt"]


async def test_a_stream_ends_when_a_failed_write_stops_the_driver(on_sqlite: Durable) -> None:
    """A driver that dies on a failed commit leaves no subscriber waiting forever."""
    import sqlite3
    from contextlib import closing

    app = on_sqlite
    app.spec.write_text(
        app.spec.read_text().replace("lease: 5s", "lease: 1s, busy_timeout: 0.1s"),
        encoding="utf-8",
    )
    gate = app.gate("lookup")
    async with app.open() as harness:
        handle = await harness.submit("t", "lookup 1", principal="ann")
        await app.reached("lookup")
        with closing(sqlite3.connect(app.root / "state.db", isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")  # the tool result's commit cannot get the lock
            gate.set()
            with pytest.raises(ph.StoreError, match="locked"):
                await handle.result()
            other.execute("ROLLBACK")
        seen = await asyncio.wait_for(collect(handle.events()), 10)
        assert kinds(seen) == ["run_started", "tool_call_start"]
        assert (await harness.result(handle.run_id)).status is ph.RunStatus.RUNNING
        [recovered] = await harness.recover()  # interrupted, not lost: the lease lapses
    assert recovered.run_id == handle.run_id and recovered.ok
    assert len(app.calls("lookup")) == 2  # a safe tool whose result was never committed


async def test_reconnecting_after_a_cursor_has_no_gaps_or_repeats(durable: Durable) -> None:
    async with durable.open() as harness:
        done = await harness.run("t", "lookup 1, refund 2", principal="ann")
        everything = await collect(harness.stream(done.run_id))
        for index, event in enumerate(everything):
            rest = await collect(harness.stream(done.run_id, after=event.cursor))
            assert rest == everything[index + 1 :]
        with pytest.raises(ValueError, match="malformed event cursor"):
            harness.stream(done.run_id, after="abc")
        with pytest.raises(ph.UnknownRun):
            await collect(harness.stream("run_nope"))
    cursors = [int(e.cursor) for e in everything]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)


async def test_a_subscriber_that_leaves_does_not_stop_the_run(durable: Durable) -> None:
    gate = durable.gate("lookup")
    async with durable.open() as harness:
        handle = await harness.submit("t", "lookup 1", principal="ann")
        async for event in handle.events():
            if event.kind == "tool_call_start":
                break
        gate.set()
        result = await handle.result()
        # Reconnect: the rest of the run, from the saved cursor.
        rest = await collect(handle.events(after=event.cursor))
    assert result.ok
    assert kinds(rest)[0] == "tool_result" and kinds(rest)[-1] == "run_result"


async def test_a_stream_of_a_waiting_run_ends_and_a_new_one_follows_it_on(durable: Durable) -> None:
    async with durable.open() as harness:
        waiting = await harness.run("t", "refund 500", principal="ann")
        first = await collect(harness.stream(waiting.run_id))
        assert kinds(first)[-2:] == ["approval_required", "status_changed"]
        approval_id = waiting.pending[0].approval_id
        assert approval_id is not None
        await harness.approve(waiting.run_id, approval_id, "approve", approver=FINANCE)
        rest = await collect(harness.stream(waiting.run_id, after=first[-1].cursor))
    assert kinds(rest) == [
        "approval_answered",
        "status_changed",
        "tool_call_start",
        "tool_result",
        "text_complete",
        "status_changed",
        "run_result",
    ]
    assert rest[0].data["approver"] == "fiona"
    assert rest[1].data == {"status": "running"}


async def test_a_stream_follows_a_run_another_worker_drives(shared: Durable) -> None:
    """The watcher shares no memory with the driver: it polls the store."""
    app = shared
    gate = app.gate("lookup")
    async with app.open() as driver, app.open() as watcher:
        handle = await driver.submit("t", "lookup 1", principal="ann")
        seen: list[str] = []
        async for event in watcher.stream(handle.run_id):
            seen.append(event.kind)
            if event.kind == "tool_call_start":
                gate.set()
        assert (await handle.result()).ok
    assert seen[-1] == "run_result" and "text_delta" not in seen


async def test_a_retried_model_attempt_that_streamed_is_reset(tmp_path: Path) -> None:
    module = f"flaky_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(
        """
from pytest_harness.errors import ModelError

TRIES = []


def answer(request):
    TRIES.append(request.attempt_id)
    request.on_text("Hel")
    if len(TRIES) == 1:
        raise ModelError("server", "stream broke off")
    request.on_text("lo")
    return "Hello"
""",
        encoding="utf-8",
    )
    spec = tmp_path / "harness.yaml"
    spec.write_text(
        f"""
version: 1
name: flaky
models:
  default: {{use: function, call: "{module}:answer", retries: 1}}
tasks:
  t: {{prompt: p}}
""",
        encoding="utf-8",
    )
    try:
        async with ph.load(spec) as harness:
            done = await harness.run("t", "hi", principal="ann")
            events = await collect(harness.stream(done.run_id))
    finally:
        sys.modules.pop(module, None)
    assert done.ok and done.output == "Hello"
    assert kinds(events) == [
        "run_started",
        "text_delta",
        "attempt_reset",
        "text_delta",
        "text_delta",
        "text_complete",
        "status_changed",
        "run_result",
    ]
    first, reset, *_ = (e.data for e in events[1:])
    assert reset["reason"] == "retry" and reset["attempt"] != first["attempt"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_an_answered_run_that_nobody_resumed_is_recovered(tmp_path: Path, store: str) -> None:
    app = make_app(tmp_path, store, lease="300ms")
    try:
        async with app.open() as harness:
            waiting = await harness.run("t", "refund 250", principal="ann")
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL and waiting.approval
            # The approver's process saves its decision and stops before it resumes the run.
            await harness.store.decide_approval(
                waiting.run_id,
                waiting.approval.approval_id,
                decision="approve",
                approver="fiona",
                approver_roles=("finance",),
                reason=None,
            )
            assert await harness.recover() == []  # within a lease: the approver may still resume
            await asyncio.sleep(0.35)
            [done] = await harness.recover()
            assert done.run_id == waiting.run_id and done.ok
            assert [c.name for c in done.trace.tool_calls()] == ["refund"]
            assert await harness.recover() == []
            with pytest.raises(ph.ResolutionError, match="already answered"):
                await harness.approve(
                    waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
                )
    finally:
        sys.modules.pop(app.tools.__name__, None)


# -- tenant-bound approvals --------------------------------------------------------------------


async def test_only_a_principal_of_the_runs_tenant_may_approve(durable: Durable) -> None:
    async with durable.open() as harness:
        waiting = await harness.run("t", "refund 250", principal="ann", tenant="acme")
        assert waiting.approval is not None
        approval_id = waiting.approval.approval_id
        for tenant, says in ((None, "no tenant"), ("globex", "tenant 'globex'")):
            outsider = ph.Principal("fiona", ("finance",), tenant=tenant)
            with pytest.raises(ph.ApprovalDenied, match=f"belongs to {says}; .* tenant 'acme'"):
                await harness.approve(waiting.run_id, approval_id, "approve", approver=outsider)
        still = await harness.result(waiting.run_id)
        assert still.status is ph.RunStatus.AWAITING_APPROVAL
        insider = ph.Principal("fiona", ("finance",), tenant="acme")
        done = await harness.approve(waiting.run_id, approval_id, "approve", approver=insider)
        assert done.ok


async def test_a_run_without_a_tenant_takes_any_approver_with_the_role(durable: Durable) -> None:
    async with durable.open() as harness:
        waiting = await harness.run("t", "refund 250", principal="ann")
        assert waiting.approval is not None
        approver = ph.Principal("fiona", ("finance",), tenant="acme")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=approver
        )
        assert done.ok
