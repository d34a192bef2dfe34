"""The command a blocked recording suggests keeps the record mode the user asked for."""

from __future__ import annotations

import pytest

from .conftest import Project
from .fake_openai import FakeOpenAI
from .test_cassettes import TESTS, record, write_live_spec

NODE = "test_live.py::test_small_refund"


@pytest.fixture
def live(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("PH_FAKE_OPENAI_KEY", "sk-fake")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    project.tests(TESTS, name="test_live")
    return project


def test_record_all_without_live_calls_suggests_record_all(live: Project) -> None:
    record(live)
    golden = "recordings/test_live/test_small_refund.yaml"
    result = live.run("--record-recordings=all", "-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*live calls are not allowed here; --record-recordings=all calls the live model to "
            f"write {golden}, which needs --harness-allow-live: pytest --record-recordings=all "
            f"--harness-allow-live {NODE}"
        ]
    )
    # the mode matters: `new` keeps the golden file there and never calls the live model
    with FakeOpenAI() as server:
        write_live_spec(live, server.url)
        live.run("--record-recordings=new", "--harness-allow-live", NODE).assert_outcomes(passed=1)
        assert server.requests == 0
        live.run("--record-recordings=all", "--harness-allow-live", NODE).assert_outcomes(passed=1)
        assert server.requests == 3


def test_record_new_without_live_calls_still_suggests_record_new(live: Project) -> None:
    write_live_spec(live, "http://127.0.0.1:9/v1")
    result = live.run("--record-recordings=new", "-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*--record-recordings=new calls the live model to write "
            "recordings/test_live/test_small_refund.yaml, which needs --harness-allow-live: "
            f"pytest --record-recordings=new --harness-allow-live {NODE}"
        ]
    )
