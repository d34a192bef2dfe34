"""The fixtures, the marker, `scripted`, live-model blocking and the assertion helpers."""

from __future__ import annotations

import asyncio

import pytest

import pytest_harness as ph
from pytest_harness.testing import SyncHarness, assert_trace, call, calls, fail, say

from .conftest import Project


def test_sync_fixture_runs_approves_and_reads_back(project: Project) -> None:
    project.tests(
        """
        import pytest_harness as ph

        def test_it(harness):
            waiting = harness.run("orders", "Refund $250 on A-1", principal="ann")
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
            assert waiting.approval.rule_id == "R1"
            fiona = ph.Principal("fiona", ("finance",))
            done = harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=fiona
            )
            assert done.ok and harness.result(done.run_id) == done
            assert [r.run_id for r in harness.runs()] == [done.run_id]
            assert harness.store.kind == "memory"  # attributes pass through

        def test_each_test_gets_a_fresh_store(harness):
            assert harness.runs() == []
        """
    )
    project.run().assert_outcomes(passed=2)


def test_aharness_under_pytest_asyncio_and_anyio(project: Project) -> None:
    project.tests(
        """
        import pytest

        @pytest.mark.asyncio
        async def test_asyncio(aharness):
            result = await aharness.run("orders", "Refund $30 on A-1", principal="ann")
            assert result.ok

        @pytest.mark.asyncio(loop_scope="module")
        async def test_asyncio_module_loop(aharness, scripted):
            scripted("orders", [{"say": "hi"}])
            assert (await aharness.run("orders", "x", principal="ann")).output == "hi"

        @pytest.mark.anyio
        async def test_anyio(aharness):
            handle = await aharness.submit("orders", "Delete it", principal="ann")
            assert (await handle.result()).ok

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        def test_sync_test_is_told_to_use_harness(aharness):
            pass
        """
    )
    result = project.run("--record-recordings=all")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*the aharness fixture is for async tests*use `harness`"])
    assert sorted(project.goldens()) == [
        "test_desk/test_anyio.yaml",
        "test_desk/test_asyncio.yaml",
        "test_desk/test_asyncio_module_loop.yaml",
    ]


def test_the_sync_facade_refuses_a_running_loop(project: Project) -> None:
    project.tests(
        """
        import pytest

        @pytest.mark.asyncio
        async def test_it(harness):
            with pytest.raises(RuntimeError, match="use the `aharness` fixture"):
                harness.run("orders", "Refund $30 on A-1", principal="ann")
        """
    )
    project.run().assert_outcomes(passed=1)


def test_factory_marker_and_precedence(project: Project) -> None:
    other = project.path / "other"
    other.mkdir()
    (other / "spec.yaml").write_text(
        project.spec.read_text().replace("name: mini-shop", "name: other-shop")
        + "environments:\n  calm: {}\n"
    )
    project.tests(
        """
        import pytest

        def test_ini_spec(harness):
            assert harness.spec.name == "mini-shop" and harness.spec.env is None

        @pytest.mark.harness(spec="other/spec.yaml", env="calm")
        def test_marker_wins(harness):
            assert harness.spec.name == "other-shop" and harness.spec.env == "calm"

        @pytest.mark.harness(store="sqlite")
        def test_factory(harness_factory, harness):
            more = harness_factory(spec="other/spec.yaml", store="memory")
            assert more.spec.name == "other-shop" and more.store.kind == "memory"
            assert harness.store.kind == "sqlite"  # the marker's store, fresh for this test
            assert more.run("orders", "Delete it", principal="ann").ok

        @pytest.mark.harness(colour="red")
        def test_unknown_marker_keyword(harness):
            pass
        """
    )
    result = project.run()
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.harness got unknown keyword 'colour'; "
            "it accepts spec, env, store, allow_live"
        ]
    )
    result = project.run("--harness-spec=other/spec.yaml", "-k", "ini_spec")
    result.assert_outcomes(failed=1)  # the command line beat the ini
    result.stdout.fnmatch_lines(["*'other-shop' == 'mini-shop'*"])


def test_a_spec_that_does_not_load_is_an_error(project: Project) -> None:
    project.tests(
        """
        import pytest

        @pytest.mark.harness(spec="missing.yaml")
        def test_it(harness):
            pass

        @pytest.mark.harness(env="prod")
        def test_env(harness):
            pass
        """
    )
    result = project.run()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*pytest-harness: cannot load missing.yaml: *file not found*",
            "*pytest-harness: cannot load harness.yaml: *unknown environment 'prod'*",
        ]
    )


def test_scripted_turns_for_a_task_or_a_model(project: Project) -> None:
    project.tests(
        """
        import pytest
        import pytest_harness as ph
        from pytest_harness.testing import assert_trace, call, fail, say

        def test_task(harness, scripted):
            scripted("orders", [call("lookup_order", order_id="A-9"), say("A-9 is fine.")])
            result = harness.run("orders", "anything", principal="ann")
            assert result.output == "A-9 is fine."
            assert_trace(result, tools=["lookup_order"])

        def test_model_then_later_harness(scripted, harness_factory):
            scripted("default", [fail("rate_limit"), ph.testing.say("after a retry")])
            result = harness_factory().run("orders", "anything", principal="ann")
            assert result.output == "after a retry"

        def test_unknown_name(harness, scripted):
            with pytest.raises(ValueError, match="no task or model of that name .tasks: orders"):
                scripted("desk", [say("x")])

        def test_bad_turn(scripted):
            with pytest.raises(ph.SpecError, match="a turn needs one of"):
                scripted("orders", [{}])
        """
    )
    project.run().assert_outcomes(passed=4)


LIVE_SPEC_TAIL = """
  live:
    use: openai
    model: gpt-4.1-mini
    api_key_env: HARNESS_TEST_NO_SUCH_KEY
    retries: 0
"""

LIVE_TESTS = """
import pytest
import pytest_harness as ph

def test_blocked(harness):
    with pytest.raises(ph.LiveModelBlocked, match="--harness-allow-live"):
        harness.run("chat", "hello", principal="ann")

@pytest.mark.harness(allow_live=True)
def test_allowed_by_marker(harness):
    result = harness.run("chat", "hello", principal="ann")
    assert result.failed and "HARNESS_TEST_NO_SUCH_KEY" in result.error["message"]

@pytest.mark.harness(allow_live=True)
class TestAllowedForTheClass:
    @pytest.mark.harness(env="offline")
    def test_closer_marker_without_allow_live(self, harness):
        assert harness.run("chat", "hello", principal="ann").failed
"""


def live_project(project: Project) -> None:
    text = project.spec.read_text()
    text = text.replace("models:\n", "models:\n" + LIVE_SPEC_TAIL.lstrip("\n"), 1)
    text += "  chat:\n    model: live\n    prompt: Chat.\n"
    project.spec.write_text(text)
    project.tests(LIVE_TESTS)


def test_live_models_are_blocked_unless_allowed(project: Project) -> None:
    live_project(project)
    # record mode `none` never calls out, allowed or not: without a golden file, refused
    result = project.run()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E*LiveModelBlocked: *; test_desk.py::test_allowed_by_marker has no golden file*",
            "E*LiveModelBlocked: *; test_desk.py::TestAllowedForTheClass::"
            "test_closer_marker_without_allow_live has no golden file*",
        ]
    )
    # recording calls the live model where the marker or the option allows it
    project.run("--record-recordings=new").assert_outcomes(passed=3)
    result = project.run("--record-recordings=new", "--harness-allow-live", "-k", "blocked")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*DID NOT RAISE*"])
    with ph.allow_live_models(False), pytest.raises(ph.LiveModelBlocked):
        raise ph.LiveModelBlocked("openai", "live")  # the outer session is untouched


def test_assert_trace_and_result_comparison_explain_themselves(project: Project) -> None:
    project.tests(
        """
        from pytest_harness.testing import assert_trace

        def test_trace(harness):
            result = harness.run("orders", "Refund $30 on A-1", principal="ann")
            assert_trace(
                result, status="failed", fired=["R1"], not_fired=["G1"], tools=["refund"]
            )

        def test_results(harness):
            a = harness.run("orders", "Refund $30 on A-1", principal="ann")
            b = harness.run("orders", "Refund $250 on A-1", principal="ann")
            assert a == b
        """
    )
    result = project.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E*AssertionError: run run_* (orders, completed) did not match:",
            "E*  status: expected failed, got completed",
            "E*  expected 'R1' to fire; it did not (fired: none)",
            "E*  tools: expected ?refund?, got ?lookup_order, refund?",
            "E*trace:",
            "E*  step 1 model default → call lookup_order",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E*AssertionError: assert RunResult(orders, completed) == RunResult(orders, "
            "awaiting_approval)",
            "E*status: completed != awaiting_approval",
            "E*output: 'Refunded $30.' != None",
            "E*trace (- only on the right, + only on the left, ~ changed):",
            "E*- step 2 rule R1 → approve (tool refund)",
        ]
    )


# -- the helpers, without pytest's fixtures ---------------------------------------------------


def test_turn_builders() -> None:
    assert call("refund", order_id="A-1", amount=5) == {
        "call": "refund",
        "args": {"order_id": "A-1", "amount": 5},
    }
    assert call("x", name="y") == {"call": "x", "args": {"name": "y"}}
    assert say("hi", usage=(3, 4)) == {
        "say": "hi",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    assert calls(call("a"), call("b", x=1)) == {
        "calls": [{"name": "a", "args": {}}, {"name": "b", "args": {"x": 1}}]
    }
    assert fail("timeout") == {"error": "timeout"}
    with pytest.raises(ValueError, match="choose from rate_limit, server, timeout, refusal"):
        fail("boom")
    with pytest.raises(ValueError, match=r"calls\(\) takes call"):
        calls(say("x"))


def test_sync_harness_works_without_pytest_fixtures(project: Project) -> None:
    with SyncHarness.load(project.spec) as harness:
        handle = harness.submit("orders", "Refund $30 on A-1", principal="ann")
        result = handle.result()
        assert handle.done() and result.ok
        assert_trace(result, tools=["lookup_order", "refund"], not_fired=["R1"])
        report = harness.replay(result.run_id) if harness.record else None
        assert report is None
        assert harness.result(result.run_id) == result
    with pytest.raises(ph.HarnessError, match="is closed"):
        harness.runs()
    with pytest.raises(ValueError, match=r"unknown run status 'done' \(valid: running"):
        assert_trace(result, status="done")


def test_sync_harness_inside_a_loop_says_what_to_use(project: Project) -> None:
    harness = SyncHarness.load(project.spec)

    async def inside() -> None:
        harness.runs()

    with pytest.raises(RuntimeError, match="aharness"):
        asyncio.run(inside())
    harness.close()
    harness.close()  # idempotent


def test_a_failed_tests_teardown_stops_its_submitted_runs(project: Project) -> None:
    """The runs a failed test submitted are cancelled at teardown, not waited for: a run
    that never ends (a hung tool) would hold the session until pytest-timeout killed it."""
    (project.path / "hangtools.py").write_text(
        "import asyncio\n\n\nasync def hang(x: str) -> str:\n"
        '    """Never returns."""\n    await asyncio.Event().wait()\n    return x\n'
    )
    project.change_spec("tools:\n", 'tools:\n  hang: {call: "hangtools:hang"}\n')
    project.change_spec("delete_account]", "delete_account, hang]")
    project.change_spec(
        '        - input: "Card*"',
        '        - input: "Hang*"\n          turns:\n            - {call: hang, args: {x: y}}\n'
        '        - input: "Card*"',
    )
    project.tests(
        """
        import pytest

        def test_sync(harness):
            harness.submit("orders", "Hang on", principal="ann")
            assert False, "failed while its run hangs"

        @pytest.mark.harness(store="sqlite")
        def test_sync_sqlite(harness):
            handle = harness.submit("orders", "Hang on", principal="ann")
            assert not handle.done()
            pytest.skip("skipped while its run hangs")

        @pytest.mark.asyncio
        async def test_async(aharness):
            await aharness.submit("orders", "Hang on", principal="ann")
            assert False, "failed while its run hangs"
        """
    )
    result = project.run("--timeout=60")
    result.assert_outcomes(failed=2, skipped=1)
    assert "Timeout" not in result.stdout.str()
