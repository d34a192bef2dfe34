"""The `harness_checkpoint` hook: one call after each committed boundary, never before it.

A small plugin package (`probe_plugin`, with a `.dist-info` that advertises it under the
`pytest_harness` entry-point group) is put on the `PYTHONPATH` of real worker processes, so it
is discovered exactly as an installed plugin is. At every call it reads the run's row from the
SQLite file through a connection of its own: what the hook was told must already be committed.
A second plugin of the same package raises at every call, and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.hookspecs import hookimpl
from pytest_harness.plugins import plugin_manager
from pytest_harness.runtime.boundaries import Boundary

PROBE = textwrap.dedent(
    """
    import json, os, sqlite3
    from contextlib import closing

    from pytest_harness.hookspecs import hookimpl


    @hookimpl
    def harness_checkpoint(session_id, run_id, status, phase):
        with closing(sqlite3.connect(os.environ["PROBE_DB"])) as conn:
            row = conn.execute(
                "SELECT session_id, status, state FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        state = json.loads(row[2])
        line = {
            "run_id": run_id,
            "session_id": session_id,
            "status": status,
            "phase": phase,
            "committed_session": row[0],
            "committed_status": row[1],
            "committed_calls": [c["status"] for c in state["calls"]],
            "pid": os.getpid(),
        }
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\\n")
    """
)

RAISER = textwrap.dedent(
    """
    from pytest_harness.hookspecs import hookimpl


    @hookimpl
    def harness_checkpoint(phase):
        raise RuntimeError(f"the metrics exporter is down ({phase})")
    """
)

ENTRY_POINTS = "[pytest_harness]\nprobe = probe_plugin\nraiser = probe_raiser\n"
METADATA = "Metadata-Version: 2.1\nName: probe-plugin\nVersion: 1.0\n"

TOOLS = textwrap.dedent(
    '''
    def lookup(order_id: str) -> dict:
        """Look an order up."""
        return {"order_id": order_id, "total": 250}


    def refund(order_id: str, amount: int) -> dict:
        """Refund an order."""
        return {"refunded": amount}
    '''
)

SPEC = """
version: 1
name: hooked
models:
  default:
    use: scripted
    retries: 2
    first_event_timeout: 5s
    script:
      - {error: rate_limit}
      - {call: lookup, args: {order_id: A-1}}
      - {call: refund, args: {order_id: A-1, amount: 250}}
      - {say: refunded}
tools:
  lookup: {call: "hooktools:lookup", replay: safe}
  refund: {call: "hooktools:refund", replay: idempotent}
rules:
  - {id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}
tasks:
  t: {prompt: p, tools: [lookup, refund]}
state: {use: sqlite, path: state.db, lease: 5s}
"""

WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    import pytest_harness as ph


    async def main(command, *args):
        async with ph.load(os.path.join(os.getcwd(), "harness.yaml")) as harness:
            if command == "run":
                result = await harness.run("t", "refund A-1", principal="ann")
            else:
                waiting = await harness.result(args[0])
                result = await harness.approve(
                    args[0], waiting.approval.approval_id, "approve",
                    approver=ph.Principal("fiona", ("finance",)),
                )
            print(json.dumps({"run_id": result.run_id, "session_id": result.session_id,
                              "status": result.status.value, "output": result.output}))


    asyncio.run(main(*sys.argv[1:]))
    """
)

RUNNING = "running"
EXPECTED_RUN = [
    (Boundary.RUN_STARTED, RUNNING, []),
    (Boundary.MODEL_STARTED, RUNNING, []),  # turn 1: a 429
    (Boundary.MODEL_FAILED, RUNNING, []),
    (Boundary.MODEL_STARTED, RUNNING, []),  # turn 2: lookup
    (Boundary.TOOL_DISPATCHED, RUNNING, ["dispatched"]),
    (Boundary.TOOL_RETURNED, RUNNING, ["done"]),
    (Boundary.MODEL_STARTED, RUNNING, []),  # turn 3: refund, which needs an approval
    (Boundary.APPROVAL_REQUESTED, "awaiting_approval", ["planned"]),
]
EXPECTED_APPROVE = [
    (Boundary.TOOL_DISPATCHED, RUNNING, ["dispatched"]),
    (Boundary.TOOL_RETURNED, RUNNING, ["done"]),
    (Boundary.MODEL_STARTED, RUNNING, []),  # turn 4: the answer
    (Boundary.RUN_ENDED, "completed", []),
]


def install_probe(site: Path) -> None:
    """Write the plugin package and its distribution metadata, as pip would install them."""
    site.mkdir()
    (site / "probe_plugin.py").write_text(PROBE, encoding="utf-8")
    (site / "probe_raiser.py").write_text(RAISER, encoding="utf-8")
    info = site / "probe_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA, encoding="utf-8")
    (info / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    (info / "RECORD").write_text("", encoding="utf-8")


def test_hook_calls_match_the_committed_boundaries_one_to_one(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "harness.yaml").write_text(SPEC, encoding="utf-8")
    (app / "hooktools.py").write_text(TOOLS, encoding="utf-8")
    (app / "worker.py").write_text(WORKER, encoding="utf-8")
    install_probe(tmp_path / "site")
    log = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(app)]),
        "PROBE_DB": str(app / "state.db"),
        "PROBE_LOG": str(log),
    }

    def worker(*args: str) -> tuple[dict[str, Any], str]:
        proc = subprocess.run(
            [sys.executable, str(app / "worker.py"), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=app,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.splitlines()[-1]), proc.stderr

    waiting, run_stderr = worker("run")
    assert waiting["status"] == "awaiting_approval"
    done, approve_stderr = worker("approve", waiting["run_id"])
    assert done["status"] == "completed" and done["output"] == "refunded"

    calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    expected = EXPECTED_RUN + EXPECTED_APPROVE
    assert [(c["phase"], c["status"], c["committed_calls"]) for c in calls] == [
        (phase.value, status, committed) for phase, status, committed in expected
    ]
    # Each call came after its commit: the store already said what the hook was told.
    for call in calls:
        assert call["run_id"] == waiting["run_id"]
        assert call["session_id"] == call["committed_session"] == waiting["session_id"]
        assert call["committed_status"] == call["status"]
    pids = [c["pid"] for c in calls]
    assert len(set(pids[: len(EXPECTED_RUN)])) == 1 and len(set(pids)) == 2  # two processes
    # The raising plugin was logged at every boundary and changed nothing.
    logged = "harness_checkpoint hook of plugin 'raiser' raised at "
    assert run_stderr.count(logged) == len(EXPECTED_RUN)
    assert approve_stderr.count(logged) == len(EXPECTED_APPROVE)
    assert "RuntimeError: the metrics exporter is down (run.started)" in run_stderr
    assert "harness_checkpoint hook of plugin 'raiser' raised at run.started" in run_stderr
    print(
        f"\n{len(calls)} hook calls for {len(expected)} committed boundaries of run "
        f"{waiting['run_id']} ({len(EXPECTED_RUN)} in the first process, "
        f"{len(EXPECTED_APPROVE)} in the approver's)"
    )


class Recorder:
    """An in-process plugin: the calls it got, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    @hookimpl
    def harness_checkpoint(self, run_id: str, status: str, phase: str) -> None:
        self.calls.append((run_id, phase, status))


class Raiser:
    @hookimpl
    def harness_checkpoint(self, phase: str) -> None:
        raise RuntimeError(f"boom at {phase}")


@pytest.fixture
def recorder() -> Any:
    pm = plugin_manager()
    raiser, rec = Raiser(), Recorder()
    pm.register(rec, name="test-recorder")
    pm.register(raiser, name="test-raiser")  # registered last, so called first (as in pluggy)
    yield rec
    pm.unregister(rec)
    pm.unregister(raiser)


@pytest.mark.asyncio
async def test_a_raising_hook_is_logged_and_the_run_is_unchanged(
    app, write_file, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    write_file(
        "streamer_hook.py",
        """
        import asyncio

        async def answer(request):
            request.on_text("The reply starts")
            await asyncio.sleep(0.05)
            return "The reply starts and ends"
        """,
    )
    app.write(
        """
models:
  default: {use: function, call: "streamer_hook:answer", first_event_timeout: 1s}
tasks:
  t: {prompt: p}
""",
        base=False,
    )
    sys.path.insert(0, str(app.root))
    try:
        async with ph.load(app.spec) as harness:
            with caplog.at_level(logging.ERROR, logger="pytest_harness.plugins"):
                result = await harness.run("t", "hi", principal="ann")
    finally:
        sys.path.remove(str(app.root))
        sys.modules.pop("streamer_hook", None)
    assert result.ok and result.output == "The reply starts and ends"
    assert [c[1:] for c in recorder.calls if c[0] == result.run_id] == [
        ("run.started", "running"),
        ("model.started", "running"),
        ("model.first_event", "running"),
        ("run.ended", "completed"),
    ]
    failures = [r for r in caplog.records if "boom at" in (r.exc_text or "")]
    assert [r.getMessage().split(" raised at ")[1].split(" ")[0] for r in failures] == [
        "run.started",
        "model.started",
        "model.first_event",
        "run.ended",
    ]


@pytest.mark.asyncio
async def test_the_hook_sees_a_pause_and_a_resume(app, recorder: Recorder) -> None:
    app.write(
        f"""
models:
  default:
    use: scripted
    script: [{{call: delete_account, args: {{user: bob}}}}, {{say: gone}}]
tools:
  delete_account: {{call: "{app.module}:delete_account"}}
rules:
  - {{id: R2, when: 'tool == "delete_account"', then: approve, approvers: [ops]}}
tasks:
  t: {{prompt: p, tools: [delete_account]}}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("t", "delete bob", principal="ann")
        assert waiting.approval is not None
        paused = await harness.pause(waiting.run_id)
        still = await harness.approve(
            waiting.run_id,
            waiting.approval.approval_id,
            "approve",
            approver=ph.Principal("olga", ("ops",)),
        )
        done = await harness.resume(waiting.run_id)
    assert paused.status is still.status is ph.RunStatus.PAUSED
    assert done.ok and done.output == "gone"
    assert [c[1:] for c in recorder.calls if c[0] == waiting.run_id] == [
        ("run.started", "running"),
        ("approval.requested", "awaiting_approval"),
        ("run.paused", "paused"),  # the answer itself is the approval's write, not the run's
        ("tool.dispatched", "running"),
        ("tool.returned", "running"),
        ("run.ended", "completed"),
    ]


@pytest.mark.asyncio
async def test_a_replay_tells_the_hook_nothing(app, recorder: Recorder) -> None:
    app.write(
        """
models:
  default: {use: scripted, script: [{say: hello}]}
tasks:
  t: {prompt: p}
""",
        base=False,
    )
    async with ph.load(app.spec, record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        told = list(recorder.calls)
        report = await harness.replay(await ph.Recording.from_store(harness.store, result.run_id))
    assert report.same
    assert [c[1] for c in told] == ["run.started", "model.started", "run.ended"]
    assert recorder.calls == told  # the replay's private run is not one of the app's runs


@pytest.mark.asyncio
async def test_the_hook_sees_an_interrupted_call_and_its_resolution(
    app, recorder: Recorder
) -> None:
    """A drive stopped inside a `manual` tool (its task cancelled, as a dying worker's would
    be) leaves the call uncertain; the resumed run surfaces it, `resolve()` settles it."""
    app.write(
        f"""
models:
  default:
    use: scripted
    script: [{{call: slow, args: {{seconds: 30}}}}, {{say: settled}}]
tools:
  slow: {{call: "{app.module}:slow"}}
tasks:
  t: {{prompt: p, tools: [slow]}}
state: {{use: sqlite, path: state.db}}
""",
        base=False,
    )
    async with ph.load(app.spec) as harness:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(harness.run("t", "go", principal="ann"), 0.5)
        run_id = recorder.calls[0][0]
        uncertain = await harness.resume(run_id)
        assert uncertain.status is ph.RunStatus.AWAITING_RESOLUTION
        done = await harness.resolve(run_id, uncertain.pending[0].execution_key, result="slept")
    assert done.ok and done.output == "settled"
    assert [c[1:] for c in recorder.calls if c[0] == run_id] == [
        ("run.started", "running"),
        ("tool.dispatched", "running"),
        ("tool.interrupted", "awaiting_resolution"),
        ("tool.resolved", "running"),
        ("run.ended", "completed"),
    ]
