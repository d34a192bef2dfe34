"""The live-model gate on Temporal: evaluated by the worker that calls the provider.

The run loop runs in the workflow, where nothing may depend on the worker's process (its
`HARNESS_ALLOW_LIVE`): a worker that blocks live models refuses the `harness_model` activity
instead, and a history that holds another worker's live call replays on it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.temporal.client import connect
from tests.model_server import KEY, KEY_ENV, ModelServer, Reply, openai_body
from tests.temporal.helpers import WorkerProcess, temporal_execution, write_app

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


def _spec(folder: Path, url: str, execution: str = "") -> Path:
    """A refund task whose scripted model fails once, then answers; its fallback is live."""
    return write_app(
        folder,
        f"""\
            version: 1
            name: tlive
            models:
              main:
                use: scripted
                retries: 0
                fallback: [live]
                script:
                  - error: server
                  - say: "Refunded."
              live:
                use: openai
                model: gpt-test
                base_url: {url}/v1
                api_key_env: {KEY_ENV}
                retries: 0
            tools:
              refund: {{call: "ttools:refund", replay: idempotent}}
            rules:
              - id: big-refund
                when: tool == "refund" && args.amount > 100
                then: approve
                approvers: [finance]
            tasks:
              refunds: {{model: main, prompt: "Desk.", tools: [refund]}}
            state: {{use: memory, record: true, lease: 2s}}
            {execution}
            """,
    )


def _env(allow_live: bool) -> dict[str, str]:
    """A worker's environment: the model key, live calls allowed or not, no proxy."""
    return {
        KEY_ENV: KEY,
        "HARNESS_ALLOW_LIVE": "1" if allow_live else "0",
        "NO_PROXY": "127.0.0.1,localhost",
    }


def _decisions(result: ph.RunResult) -> list[tuple[Any, ...]]:
    return [(d.step, d.kind, d.key, d.detail) for d in result.trace]


async def _journal(harness: ph.Harness, run_id: str) -> list[dict[str, Any]]:
    """The journal the run's workflow holds."""
    client = await connect(harness.spec)
    snap = await client.get_workflow_handle(run_id).query("snapshot")
    return list(snap["journal"])


async def test_a_blocked_live_fallback_fails_the_run_as_locally(
    tmp_path: Path,
    temporal_server: str,
    server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = _spec(tmp_path / "local", server.url)
    remote = _spec(tmp_path / "remote", server.url, temporal_execution(temporal_server))
    monkeypatch.setenv("EFFECTS", str(tmp_path / "local" / "effects"))
    monkeypatch.syspath_prepend(str(tmp_path / "local"))
    async with ph.load(local) as harness:
        with ph.allow_live_models(False):
            here = await harness.run("refunds", "refund A-1", principal="ann")
        here_journal = [(e.kind, e.payload) for e in await harness.store.journal(here.run_id)]
    with WorkerProcess(remote, env=_env(allow_live=False)):
        async with ph.load(remote) as harness:
            there = await harness.run("refunds", "refund A-1", principal="ann")
            recording = await harness.recording(there.run_id)
            there_journal = [
                (e["kind"], e["payload"]) for e in await _journal(harness, there.run_id)
            ]
    async with ph.load(local) as harness:  # its recording, with the refused attempt, replays
        replayed = await harness.replay(recording)
    assert here.status is ph.RunStatus.FAILED
    assert here.error is not None and here.error["type"] == "LiveModelBlocked"
    assert "model 'live' uses provider 'openai'" in here.error["message"]
    assert (there.status, there.error) == (here.status, here.error)
    assert _decisions(there) == _decisions(here)
    assert server.received == []  # neither run reached the provider
    # the one difference: on Temporal the fallback's attempt started before its worker refused
    started, failed = [j for j in there_journal if j[1].get("model") == "live"]
    assert started[0] == "model.started"
    assert failed == (
        "model.failed",
        {"model": "live", "exception": "LiveModelBlocked", "message": here.error["message"]},
    )
    # the rest is the local run's journal (but for its spec's digest: another file)
    kinds = ["run.started", "model.started", "model.failed", "event", "event", "checkpoint"]
    assert [kind for kind, _ in here_journal] == kinds  # main's failed attempt; the end
    assert [j for j in there_journal if j not in (started, failed)][1:] == here_journal[1:]
    assert replayed.same and replayed.model_answers_used == (2, 2)


async def test_a_history_with_a_live_call_replays_on_a_worker_that_blocks_live_models(
    tmp_path: Path, temporal_server: str, server: ModelServer
) -> None:
    spec = _spec(tmp_path, server.url, temporal_execution(temporal_server))
    refund = ("call_1", "refund", '{"order_id": "A-1", "amount": 250}')
    server.reply(Reply(json=openai_body(None, (refund,))))
    first = WorkerProcess(spec, env=_env(allow_live=True))
    second = None
    try:
        async with ph.load(spec) as harness:
            waiting = await harness.run("refunds", "refund A-1", principal="ann")
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL, waiting.error
            assert waiting.approval is not None
            first.kill()  # the run's history, with the live attempt, is all that is left of it
            second = WorkerProcess(spec, env=_env(allow_live=False))
            started = time.monotonic()
            approver = ph.Principal("fin", roles=("finance",))
            try:  # a workflow task that no longer replays leaves the update waiting: bounded
                done = await asyncio.wait_for(
                    harness.approve(
                        waiting.run_id, waiting.approval.approval_id, "approve", approver=approver
                    ),
                    timeout=30,
                )
            except TimeoutError:
                raise AssertionError(
                    f"the run did not go on after {time.monotonic() - started:.0f}s "
                    "(its history did not replay on the second worker)"
                ) from None
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert done.status is ph.RunStatus.COMPLETED, done.error
    assert done.output == "Refunded."
    assert len(server.received) == 1  # the first worker's live call, not asked again
    assert [(d.kind, d.key, d.detail.get("error")) for d in done.trace] == [
        ("model", "main", "server"),
        ("model", "live", None),
        ("rule", "big-refund", None),
        ("approval", "refund", None),
        ("tool", "refund", None),
        ("model", "main", None),
        ("output", "output", None),
    ]
    calls = (tmp_path / "effects" / "calls.log").read_text().split()
    assert calls[0] == "refund" and calls[3] == str(second.proc.pid)  # run on the second worker


@pytest.mark.parametrize(
    ("details", "rebuilt"),
    [
        (("openai", "live", None), True),
        (("openai", "live", "record it first"), True),
        (("openai", "live"), False),  # another version's failure: named as it came
        (("openai", 7, None), False),
        (("openai", "live", ["not", "a", "hint"]), False),
    ],
)
async def test_a_refusal_is_rebuilt_only_from_well_formed_details(
    details: tuple[Any, ...], rebuilt: bool
) -> None:
    from temporalio.exceptions import ApplicationError

    from pytest_harness.errors import LiveModelBlocked
    from pytest_harness.temporal.dispatch import _blocked

    cause = ApplicationError("refused", *details, type="LiveModelBlocked")
    blocked = _blocked(cause)
    if not rebuilt:
        assert blocked is None
        return
    assert isinstance(blocked, LiveModelBlocked)
    assert (blocked.provider, blocked.model, blocked.hint) == details
