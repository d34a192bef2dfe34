"""Text no store can hold (a lone surrogate) gets the same typed answer on every store.

A string with a lone surrogate (`"run_\\udcff"`, what bytes decoded with `surrogateescape`
leave) is no UTF-8. Before, sqlite and Postgres raised a bare `UnicodeEncodeError` while
binding it as a parameter, and the memory store answered `UnknownRun`, or even started a run
in a session of that id. Now a lookup by such an id is a lookup of an id that does not exist
(`UnknownRun`, an empty list), and a value to be written is refused with `StoreError` naming
the argument before anything is written (`runtime/arguments.py`), on memory, sqlite and
Postgres alike. A run id with a NUL is an unknown run too: Postgres holds no text with one
(it raised `StoreError`), and no run id the harness makes has one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pytest_harness as ph
from pytest_harness.errors import HarnessError, ResolutionError, StoreError, UnknownRun

TOOLS = '''
def refund(order_id: str, amount: float) -> dict:
    """Refund an order."""
    return {"order_id": order_id, "amount": amount}
'''

SPEC = """
version: 1
name: ids
models:
  default:
    use: scripted
    script:
      - call: refund
        args: {{order_id: A-1, amount: 250}}
      - say: done
tools:
  refund: {{call: "{module}:refund"}}
rules:
  - {{id: R1, when: 'tool == "refund"', then: approve, approvers: [finance]}}
tasks:
  t: {{prompt: p, tools: [refund]}}
state: {{use: {store}, path: state.db, record: true{postgres}}}
"""

STORES = ["memory", "sqlite", "postgres"]
FINANCE = ph.Principal("fiona", ("finance",))
BAD_RUN = "run_\udcff"

Call = Callable[[ph.Harness, ph.RunResult, Path], Awaitable[Any]]
Lookup = Callable[[ph.Harness, str, Path], Awaitable[Any]]


def write_spec(request: pytest.FixtureRequest, root: Path, store: str) -> Path:
    """A spec on `store` whose one task stops at an approval; on postgres, a fresh schema."""
    module = f"ids_tools_{uuid.uuid4().hex[:12]}"
    (root / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.syspath_prepend(str(root))
    postgres = ""
    if store == "postgres":
        monkeypatch.setenv("HARNESS_TEST_DSN", request.getfixturevalue("pg_dsn"))
        schema = request.getfixturevalue("pg_schema")
        postgres = f", dsn_env: HARNESS_TEST_DSN, schema: {schema}"
    spec = root / "harness.yaml"
    spec.write_text(SPEC.format(module=module, store=store, postgres=postgres), encoding="utf-8")
    return spec


@pytest.fixture(params=STORES)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return write_spec(request, tmp_path, request.param)


async def stream(harness: ph.Harness, run_id: str) -> list[ph.Event]:
    return [event async for event in harness.stream(run_id)]


async def handle_events(harness: ph.Harness, run_id: str) -> list[ph.Event]:
    handle = await harness.submit("t", "go", principal="ann")
    await handle.result()
    handle.run_id = run_id  # the handle's events, of a run id no store can hold
    return [event async for event in handle.events()]


# -- lookups: a run id no store can hold names no run --------------------------------------------

LOOKUPS: dict[str, Lookup] = {
    "result": lambda h, bad, tmp: h.result(bad),
    "approve": lambda h, bad, tmp: h.approve(bad, "apr_1", "approve", approver=FINANCE),
    "decline": lambda h, bad, tmp: h.approve(bad, "apr_1", "decline", approver=FINANCE),
    "resolve": lambda h, bad, tmp: h.resolve(bad, "exk_1", abort=True),
    "resume": lambda h, bad, tmp: h.resume(bad),
    "pause": lambda h, bad, tmp: h.pause(bad),
    "cancel": lambda h, bad, tmp: h.cancel(bad),
    "recording": lambda h, bad, tmp: h.recording(bad),
    "replay": lambda h, bad, tmp: h.replay(bad),
    "export .hx": lambda h, bad, tmp: h.export(bad, tmp / "run.hx"),
    "export .yaml": lambda h, bad, tmp: h.export(bad, tmp / "run.yaml"),
    "stream": lambda h, bad, tmp: stream(h, bad),
    "handle.events": lambda h, bad, tmp: handle_events(h, bad),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("bad", [BAD_RUN, "run_\x00"], ids=["surrogate", "NUL"])
@pytest.mark.parametrize("call", list(LOOKUPS))
async def test_a_run_id_no_store_can_hold_is_an_unknown_run(
    spec: Path, tmp_path: Path, call: str, bad: str
) -> None:
    async with ph.load(spec) as harness:
        run = await harness.run("t", "go", principal="ann")
        before = await snapshot(harness, run)
        with pytest.raises(UnknownRun) as caught:
            await LOOKUPS[call](harness, bad, tmp_path)
        assert caught.value.run_id == bad
        assert ascii(bad) in str(caught.value)  # shown escaped
        if call != "handle.events":  # that one starts a run of its own first
            assert await snapshot(harness, run) == before
    assert not (tmp_path / "run.hx").exists() and not (tmp_path / "run.yaml").exists()


FILTERS: dict[str, Call] = {
    "runs(task=)": lambda h, run, tmp: h.runs(task="t\udcff"),
    "runs(tenant=)": lambda h, run, tmp: h.runs(tenant="acme\udcff"),
    "samples(task=)": lambda h, run, tmp: h.samples(task="t\udcff"),
    "samples(grader=)": lambda h, run, tmp: h.samples(grader="g\udcff"),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("call", list(FILTERS))
async def test_a_filter_no_store_can_hold_matches_nothing(
    spec: Path, tmp_path: Path, call: str
) -> None:
    async with ph.load(spec) as harness:
        run = await harness.run("t", "go", principal="ann")
        assert await FILTERS[call](harness, run, tmp_path) == []
        assert [r.run_id for r in await harness.runs()] == [run.run_id]


@pytest.mark.asyncio
async def test_an_approval_id_no_store_can_hold_is_an_unknown_approval(spec: Path) -> None:
    async with ph.load(spec) as harness:
        run = await harness.run("t", "go", principal="ann")
        before = await snapshot(harness, run)
        with pytest.raises(ResolutionError, match=r"has no approval 'apr_\\udcff'"):
            await harness.approve(run.run_id, "apr_\udcff", "approve", approver=FINANCE)
        assert await snapshot(harness, run) == before


# -- writes: a value no store can hold is refused before anything is written ---------------------

STARTS: dict[str, tuple[dict[str, Any], str]] = {
    "session_id": ({"session_id": "ses_\udcff"}, "session_id 'ses_\\udcff'"),
    "tenant": ({"tenant": "acme\udcff"}, "tenant 'acme\\udcff'"),
    "idempotency_key": ({"idempotency_key": "k-\udcff"}, "idempotency_key 'k-\\udcff'"),
    "label key": ({"labels": {"te\udcffam": "desk"}}, "a label key 'te\\udcffam'"),
    "label value": ({"labels": {"team": "d\udcffesk"}}, "labels['team'] 'd\\udcffesk'"),
    "input": ({"input": "Refund \udcff"}, "input 'Refund \\udcff'"),
    "principal id": ({"principal": "ann\udcff"}, "principal id 'ann\\udcff'"),
    "principal role": (
        {"principal": ph.Principal("ann", ("clerk\udcff",))},
        "principal role 'clerk\\udcff'",
    ),
    "principal tenant": (
        {"principal": ph.Principal("ann", (), "acme\udcff")},
        "principal tenant 'acme\\udcff'",
    ),
}
"""The keyword arguments of a start, and how the refusal names the value."""


def at(message: str) -> str:
    """The character the surrogate is at, in a value shown as `message` shows it."""
    shown = message.split(" '", 1)[1]
    return str(shown.index("\\udcff"))


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["run", "submit"])
@pytest.mark.parametrize("argument", list(STARTS))
async def test_a_start_with_text_no_store_can_hold_is_refused_and_writes_nothing(
    spec: Path, argument: str, how: str
) -> None:
    given, shown = STARTS[argument]
    kwargs: dict[str, Any] = {"input": "go", "principal": "ann", **given}
    async with ph.load(spec) as harness:
        run = await harness.run("t", "go", principal="ann", session_id="ses_ok")
        before = await snapshot(harness, run)
        with pytest.raises(StoreError) as caught:
            if how == "run":
                await harness.run("t", **kwargs)
            else:
                await harness.submit("t", **kwargs)
        message = str(caught.value)
        expected = f"{shown} is not valid UTF-8 text (a lone surrogate at character {at(shown)})"
        assert message.startswith(expected), message
        assert "nothing was written" in message
        assert message.isascii()
        assert await snapshot(harness, run) == before
        # the store is untouched and still works: a good run after the refusal
        after = await harness.run("t", "go", principal="ann", session_id="ses_ok")
        assert after.status is ph.RunStatus.AWAITING_APPROVAL


ANSWERS: dict[str, tuple[Call, str]] = {
    "approver id": (
        lambda h, run, tmp: h.approve(
            run.run_id, approval_of(run), "approve", approver=ph.Principal("fi\udcff", ("finance",))
        ),
        "approver id 'fi\\udcff'",
    ),
    "approver role": (
        lambda h, run, tmp: h.approve(
            run.run_id, approval_of(run), "decline", approver=ph.Principal("fiona", ("fin\udcff",))
        ),
        "approver role 'fin\\udcff'",
    ),
    "approver tenant": (
        lambda h, run, tmp: h.approve(
            run.run_id,
            approval_of(run),
            "approve",
            approver=ph.Principal("fiona", ("finance",), "a\udcff"),
        ),
        "approver tenant 'a\\udcff'",
    ),
    "reason": (
        lambda h, run, tmp: h.approve(
            run.run_id, approval_of(run), "decline", approver=FINANCE, reason="no \udcff"
        ),
        "reason 'no \\udcff'",
    ),
    "resolver": (
        lambda h, run, tmp: h.resolve(run.run_id, "exk_1", abort=True, resolver="op\udcff"),
        "resolver id 'op\\udcff'",
    ),
}


def approval_of(run: ph.RunResult) -> str:
    assert run.approval is not None
    return run.approval.approval_id


@pytest.mark.asyncio
@pytest.mark.parametrize("argument", list(ANSWERS))
async def test_an_answer_with_text_no_store_can_hold_is_refused_and_writes_nothing(
    spec: Path, tmp_path: Path, argument: str
) -> None:
    call, shown = ANSWERS[argument]
    async with ph.load(spec) as harness:
        run = await harness.run("t", "go", principal="ann")
        before = await snapshot(harness, run)
        with pytest.raises(StoreError) as caught:
            await call(harness, run, tmp_path)
        expected = f"{shown} is not valid UTF-8 text (a lone surrogate at character {at(shown)})"
        assert str(caught.value).startswith(expected), str(caught.value)
        assert await snapshot(harness, run) == before
        # the approval is still open and takes a good answer
        done = await harness.approve(run.run_id, approval_of(run), "approve", approver=FINANCE)
        assert done.status is ph.RunStatus.COMPLETED


def test_a_long_input_is_shown_around_its_surrogate() -> None:
    from pytest_harness.runtime.arguments import check_text

    with pytest.raises(StoreError) as caught:
        check_text("x" * 500 + "\udcff" + "y" * 500, "input")
    message = str(caught.value)
    assert message.startswith(
        "input ...'" + "x" * 20 + "\\udcff" + "y" * 19 + "'... (1001 characters) is not valid "
        "UTF-8 text (a lone surrogate at character 500)"
    ), message


async def snapshot(harness: ph.Harness, run: ph.RunResult) -> Any:
    """What the store holds: its runs, and the events, approvals and journal of `run`."""
    store = harness.store
    return (
        [(r.run_id, r.session_id, r.status) for r in await harness.runs()],
        [(e.cursor, e.kind) for e in await store.events(run.run_id)],
        [(a.approval_id, a.status) for a in await store.approvals(run.run_id)],
        len(await store.journal(run.run_id)),
    )


# -- any text as a run id: only the project's own errors ---------------------------------------

ANY_TEXT = st.one_of(
    st.text(),  # no surrogates: hypothesis leaves out category Cs unless asked
    st.text(st.characters(exclude_categories=())),
    st.text(st.characters(exclude_categories=())).map(lambda text: "run_" + text),
)


@pytest.fixture(params=STORES)
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ph.Harness, Any]]:
    """A harness on one store with one run in it, and a function running a coroutine."""
    spec = write_spec(request, tmp_path, request.param)
    loop = asyncio.new_event_loop()
    harness = ph.load(spec)
    try:
        loop.run_until_complete(harness.run("t", "go", principal="ann"))
        yield harness, loop.run_until_complete
    finally:
        try:
            loop.run_until_complete(harness.aclose())
        finally:
            loop.close()


def test_any_text_as_a_run_id_is_found_or_an_unknown_run(opened: tuple[ph.Harness, Any]) -> None:
    harness, run = opened

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(run_id=ANY_TEXT)
    @example(run_id="run_\udcff")
    @example(run_id="\ud800")
    @example(run_id="run_\x00")  # no text with NUL on Postgres: no run id has one either
    @example(run_id="")
    def check(run_id: str) -> None:
        with pytest.raises(UnknownRun) as caught:  # no run id the harness makes is arbitrary
            run(harness.result(run_id))
        assert caught.value.run_id == run_id
        try:
            listed = run(harness.runs(task=run_id))
        except HarnessError:  # a typed error: Postgres refuses text with NUL (StoreError)
            return
        assert all(r.task == run_id for r in listed)

    check()
