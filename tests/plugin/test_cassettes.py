"""Cassettes: a live model answers from the test's golden files (DESIGN §7.1).

A fake OpenAI-compatible server on 127.0.0.1 stands in for the live model: the tests record
with it up, then every later run passes with it down; a change that alters the calls fails
with the divergence and the command that re-records the test.
"""

from __future__ import annotations

import pytest

from .conftest import Project
from .fake_openai import FakeOpenAI

LIVE_SPEC = """
version: 1
name: cassette-shop
models:
  default:
    use: openai
    model: fake-1
    base_url: {url}
    api_key_env: PH_FAKE_OPENAI_KEY
    retries: 0
    timeout: 10s
tools:
  lookup_order: {{call: "{mod}:lookup_order", replay: safe}}
  refund: {{call: "{mod}:refund", replay: idempotent}}
rules:
  - id: R1
    when: tool == "refund" && args.amount > 100
    then: approve
    approvers: [finance]
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund]
environments:
  offline:
    models:
      default: {{use: scripted, script: [{{say: scripted offline}}]}}
"""

TESTS = """
import pytest
import pytest_harness as ph

pytestmark = pytest.mark.harness(env="none")
FIONA = ph.Principal("fiona", ("finance",))


def test_small_refund(harness):
    result = harness.run("orders", "Refund $30 on A-1", principal="ann")
    assert result.ok, result.error
    assert result.output == 'Done: {"order_id":"A-1","amount":30.0}'
    assert [c.name for c in result.trace.tool_calls()] == ["lookup_order", "refund"]


def test_big_refund_in_a_session(harness):
    waiting = harness.run("orders", "Refund $250 on A-2", principal="ann")
    assert waiting.status == "awaiting_approval"
    done = harness.approve(waiting.run_id, waiting.approval.approval_id, "approve", approver=FIONA)
    assert done.ok
    again = harness.run("orders", "Status of A-2?", principal="ann", session_id=done.session_id)
    # the session's history reaches the model: its last tool result is the refund
    assert again.output == 'Done: {"order_id":"A-2","amount":250.0}'


@pytest.mark.asyncio
async def test_async_lookup(aharness):
    result = await aharness.run("orders", "Where is A-3?", principal="ann")
    assert result.output == 'Done: {"order_id":"A-3","total":250.0}'
"""

FILES = [
    "test_live/test_async_lookup.yaml",
    "test_live/test_big_refund_in_a_session-2.yaml",
    "test_live/test_big_refund_in_a_session.yaml",
    "test_live/test_small_refund.yaml",
]


@pytest.fixture
def live(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("PH_FAKE_OPENAI_KEY", "sk-fake")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    project.tests(TESTS, name="test_live")
    return project


def write_live_spec(project: Project, url: str) -> None:
    project.spec.write_text(LIVE_SPEC.format(url=url, mod=project.module), encoding="utf-8")


def record(project: Project, workers: int = 0) -> FakeOpenAI:
    with FakeOpenAI() as server:
        write_live_spec(project, server.url)
        result = project.run("--record-recordings=new", "--harness-allow-live", workers=workers)
        result.assert_outcomes(passed=3)
    return server


def test_mode_none_never_calls_out_even_with_live_calls_allowed(live: Project) -> None:
    with FakeOpenAI() as server:
        write_live_spec(live, server.url)
        result = live.run("-k", "small", "--harness-allow-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*LiveModelBlocked: live model blocked: model 'default' uses provider 'openai'*; "
            "test_live.py::test_small_refund has no golden file "
            "(recordings/test_live/test_small_refund.yaml) to answer from; record it once with "
            "the live model: pytest --record-recordings=new --harness-allow-live "
            "test_live.py::test_small_refund"
        ]
    )
    assert server.requests == 0
    assert not live.recordings.exists()


def test_record_once_then_answer_from_the_golden_files_with_the_server_down(
    live: Project, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no golden files, no live calls: the test is told the command that records it
    write_live_spec(live, "http://127.0.0.1:9/v1")
    result = live.run("-k", "small", workers=workers)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*LiveModelBlocked: live model blocked: model 'default' uses provider 'openai', and "
            "live calls are not allowed here; test_live.py::test_small_refund has no golden file "
            "(recordings/test_live/test_small_refund.yaml) to answer from; record it once with "
            "the live model: pytest --record-recordings=new --harness-allow-live "
            "test_live.py::test_small_refund"
        ]
    )
    # recording needs the live model, so --harness-allow-live
    result = live.run("--record-recordings=new", "-k", "small", workers=workers)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*live calls are not allowed here; --record-recordings=new calls the live model to "
            "write recordings/test_live/test_small_refund.yaml, which needs --harness-allow-live:"
            " pytest --record-recordings=new --harness-allow-live test_live.py::test_small_refund"
        ]
    )
    assert not live.recordings.exists()

    server = record(live, workers)
    assert sorted(live.goldens()) == FILES
    assert server.requests == 9  # 3 + (2 + 1 after the approval) + 1 + 2
    goldens = live.goldens()

    # the server is down: every later run answers from the golden files, strict CI included
    monkeypatch.setenv("CI", "true")
    result = live.run(workers=workers)
    result.assert_outcomes(passed=3)
    assert live.goldens() == goldens
    result = live.run("--record-recordings=new", "--harness-allow-live", workers=workers)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*0 written, 0 unchanged, 4 kept (already there)*"])
    result = live.run("--replay-recordings", workers=workers)
    result.assert_outcomes(passed=4)
    # --record-recordings=all calls the live model again: with it down, the runs fail
    result = live.run("--record-recordings=all", "--harness-allow-live", "-k", "small")
    result.assert_outcomes(failed=1)
    assert live.goldens() == goldens


def test_harness_env_none_on_the_command_line(live: Project) -> None:
    record(live)
    live.tests(TESTS.replace('pytestmark = pytest.mark.harness(env="none")', ""), "test_live")
    live.run("-k", "small").assert_outcomes(failed=1)  # offline: the scripted model answers
    live.run("-k", "small", "--harness-env=none").assert_outcomes(passed=1)


def test_a_change_that_alters_the_calls_fails_with_the_divergence(live: Project) -> None:
    record(live)
    # the test now makes a second run, which has no golden file
    live.tests(
        TESTS.replace(
            "\n\n\ndef test_big_refund_in_a_session",
            '\n    harness.run("orders", "Refund $30 on A-1", principal="ann")'
            "\n\n\ndef test_big_refund_in_a_session",
        ),
        "test_live",
    )
    result = live.run("-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_live.py::test_small_refund made run 2 but has 1 golden file "
            "(recordings/test_live/test_small_refund-2.yaml is missing); the test now makes more "
            "runs than were recorded: check the change, then re-record with: pytest "
            "--record-recordings=all --harness-allow-live test_live.py::test_small_refund"
        ]
    )
    # a tool renamed: the recorded answers call a tool the task no longer offers
    live.tests(TESTS, "test_live")
    text = live.spec.read_text().replace("lookup_order", "find_order")
    live.spec.write_text(text.replace(f"{live.module}:find_order", f"{live.module}:lookup_order"))
    result = live.run("-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_live.py::test_small_refund: turn 1 of recordings/test_live/"
            "test_small_refund.yaml calls tool 'lookup_order', which run 1 (task 'orders') no "
            "longer offers (tools: find_order, refund); the run no longer matches its golden "
            "file: check the change, then re-record with: pytest --record-recordings=all "
            "--harness-allow-live test_live.py::test_small_refund"
        ]
    )


def test_a_run_past_the_end_of_its_file_fails_even_when_the_test_catches_it(
    live: Project,
) -> None:
    record(live)
    golden = live.recordings / "test_live" / "test_small_refund.yaml"
    text = golden.read_text()
    start = text.index("model_turns:")
    end = text.index("\n- model:", text.index("\n- model:", start) + 1)  # keep the first turn
    golden.write_text(text[:end] + "\n" + text[text.index("tool_results:") :])
    live.tests(
        TESTS.replace(
            '    result = harness.run("orders", "Refund $30 on A-1", principal="ann")\n',
            "    try:\n"
            '        result = harness.run("orders", "Refund $30 on A-1", principal="ann")\n'
            "    except ph.ReplayDiverged:\n"
            "        return\n",
        ),
        "test_live",
    )
    result = live.run("-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_live.py::test_small_refund: run 1 asked model 'default' for a turn past the "
            "end of recordings/test_live/test_small_refund.yaml (1 recorded turn used; last "
            "request: *); the run no longer matches its golden file: check the change, then "
            "re-record with: pytest --record-recordings=all --harness-allow-live "
            "test_live.py::test_small_refund"
        ]
    )


def test_bad_golden_files_name_the_file_and_the_fix(live: Project) -> None:
    record(live)
    folder = live.recordings / "test_live"
    (folder / "test_small_refund.yaml").write_text("format: pytest-harness/recording@2\ntask: [\n")
    big = folder / "test_big_refund_in_a_session.yaml"
    big.write_text(big.read_text().replace("task: orders", "task: returns"))
    result = live.run("-k", "small or big")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*cannot answer test_live.py::test_small_refund from its golden file: bad recording "
            "file recordings/test_live/test_small_refund.yaml:3: invalid YAML*; fix the file, or "
            "delete it and record it again with: pytest --record-recordings=new "
            "--harness-allow-live test_live.py::test_small_refund",
            "*recordings/test_live/test_big_refund_in_a_session.yaml was recorded for task "
            "'returns', but run 1 of test_live.py::test_big_refund_in_a_session is task 'orders' "
            "(a golden file of another test or spec?); re-record it with: pytest "
            "--record-recordings=all --harness-allow-live "
            "test_live.py::test_big_refund_in_a_session",
        ]
    )
