"""Every environment is checked at load, chosen or not (DESIGN §3).

"Unknown keys are errors, not ignored" and a locked key set to another value is a `SpecError`
naming the baseline: for each environment's overlay too, so CI that loads `offline` sees the
typo in `production`. The dry run of an environment reads no environment variable, opens no
connection, imports no provider SDK, and a spec taken from the spec cache is not checked again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_harness.errors import SpecError
from pytest_harness.spec import build
from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.loader import load_spec

SPEC = textwrap.dedent(
    """\
    version: 1
    name: shop-desk

    models:
      default:
        use: openai
        model: gpt-4.1-mini
        api_key_env: OPENAI_API_KEY

    tools:
      lookup_order:
        call: shop.tools:lookup_order
      refund:
        call: shop.tools:refund

    rules:
      - id: R1
        when: tool == "refund" && args.amount > 100
        then: approve
        approvers: [finance]

    tasks:
      orders:
        prompt: Look orders up before acting on them.
        tools: [lookup_order, refund]
        rules: [R1]

    state:
      use: sqlite

    environments:
      offline:
        models:
          default:
            use: scripted
            script: orders.script.yaml
    """
)

BASELINE = "locks:\n  state.record: false\n"


@pytest.fixture(autouse=True)
def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_ENV", raising=False)
    monkeypatch.setenv(spec_cache.DISABLE, "1")


def with_env(name: str, overlay: str, text: str = SPEC) -> str:
    """`text` with one more environment, `overlay` its body (YAML, indented by the caller)."""
    return text + f"  {name}:\n" + textwrap.indent(textwrap.dedent(overlay), "    ")


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def load_error(text: str, **kwargs: Any) -> SpecError:
    Path("harness.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec("harness.yaml", **kwargs)
    return info.value


@pytest.mark.parametrize("env", [None, "offline"])
def test_an_unknown_key_in_an_environment_not_chosen(env: str | None) -> None:
    text = with_env("production", "models:\n  default:\n    temprature: 1\n")
    err = load_error(text, env=env or "")
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'temprature')} "
        "environments.production.models.default.temprature: unknown key 'temprature' (known: "
        "api_key_env, base_url, call, fallback, first_event_timeout, model, on_truncation, "
        "options, price, retries, retry_budget, script, timeout, use)"
    )
    assert err.key == "environments.production.models.default.temprature"


@pytest.mark.parametrize("env", [None, "offline"])
def test_an_unknown_tool_in_an_environment_not_chosen(env: str | None) -> None:
    text = with_env("production", "tasks:\n  orders:\n    tools: [refnd]\n")
    err = load_error(text, env=env or "")
    assert str(err) == (
        f"harness.yaml:{line_of(text, '[refnd]')} environments.production.tasks.orders.tools[0]: "
        "unknown tool 'refnd' (did you mean 'refund'?)"
    )


@pytest.mark.parametrize("env", [None, "offline"])
def test_a_locked_key_set_by_an_environment_not_chosen(env: str | None) -> None:
    Path("org-baseline.yaml").write_text(BASELINE, encoding="utf-8")
    text = with_env(
        "production",
        "state:\n  record: true\n",
        SPEC.replace("name: shop-desk\n", "name: shop-desk\nbaseline: org-baseline.yaml\n"),
    )
    err = load_error(text, env=env or "")
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'record: true')} environments.production.state.record: "
        "locked to false by org-baseline.yaml (locks.state.record); "
        "environment 'production' sets true"
    )


def test_a_wrong_value_and_a_bad_condition_name_the_environment() -> None:
    text = with_env("production", "state:\n  lease: soon\n")
    err = load_error(text)
    assert err.key == "environments.production.state.lease"
    assert err.line == line_of(text, "lease: soon")
    assert "'soon'" in err.reason
    text = with_env("strict", "rules:\n  - {id: R1, when: 'tool ==', then: deny}\n")
    err = load_error(text)
    assert err.key == "environments.strict.rules[0].when"
    assert err.reason.startswith("CEL syntax error")


def test_an_error_the_overlay_causes_elsewhere_says_which_environment() -> None:
    """An overlay that drops rule R1 breaks the task naming it: the task's line, and the env."""
    text = with_env("lean", "rules: []\n")
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'rules: [R1]')} tasks.orders.rules[0]: "
        "unknown rule 'R1' (with environment 'lean')"
    )


def test_an_environment_cannot_set_the_baseline_even_when_not_chosen() -> None:
    text = with_env("loose", "baseline: other.yaml\n")
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'other.yaml')} environments.loose.baseline: "
        "an environment cannot set `baseline`"
    )


def test_the_chosen_environment_is_reported_as_before() -> None:
    """The chosen environment is checked first and its errors read as they did."""
    text = with_env("broken", "tools:\n  refund:\n    replay: sometimes\n")
    text = with_env("other", "models:\n  default:\n    temprature: 1\n", text)
    err = load_error(text, env="broken")
    assert str(err).startswith(f"harness.yaml:{line_of(text, 'sometimes')} tools.refund.replay: ")


def test_a_live_environment_needs_no_key_no_network_and_no_sdk(tmp_path: Path) -> None:
    """Loading `offline` checks `production` (openai, anthropic) without its keys or SDKs."""
    text = with_env(
        "production",
        """\
        models:
          default:
            use: openai
            base_url: https://example.invalid/v1
            api_key_env: OPENAI_API_KEY_THAT_IS_NOT_SET
          judge:
            use: anthropic
            model: claude-sonnet-4-0
            api_key_env: ANTHROPIC_API_KEY_THAT_IS_NOT_SET
        state:
          use: sqlite
          path: /nonexistent/dir/state.db
        """,
    )
    Path("harness.yaml").write_text(text, encoding="utf-8")
    probe = (
        "import socket, sys\n"
        "def no(*a, **k): raise AssertionError('network')\n"
        "socket.socket.connect = no\n"
        "socket.create_connection = no\n"
        "socket.getaddrinfo = no\n"
        "from pytest_harness.spec.loader import load_spec\n"
        "for env in ('offline', '', 'production'):\n"
        "    load_spec('harness.yaml', env=env)\n"
        "sdks = {'openai', 'anthropic', 'httpx', 'psycopg', 'temporalio'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & sdks))\n"
    )
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if not k.endswith("API_KEY") and k != "HARNESS_ENV"
    }
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, spec_cache.DISABLE: "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_spec_from_the_cache_checks_no_environment_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(spec_cache.DISABLE)
    text = with_env("production", "models:\n  default:\n    retries: 0\n")
    text = with_env("ci", "state:\n  use: memory\n", text)
    Path("harness.yaml").write_text(text, encoding="utf-8")
    checked: list[str] = []
    real = build._check_environment

    def spy(data: dict[str, Any], env: str, *rest: Any) -> None:
        checked.append(env)
        real(data, env, *rest)

    monkeypatch.setattr(build, "_check_environment", spy)
    load_spec("harness.yaml", env="offline")
    assert checked == ["production", "ci"]  # the chosen one is the spec itself
    load_spec("harness.yaml", env="offline")
    load_spec("harness.yaml")
    assert checked == ["production", "ci", "offline", "production", "ci"]
    load_spec("harness.yaml")
    assert len(checked) == 5


def test_an_edit_skips_the_other_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mutate` edits the effective document only; the others were checked with the spec."""
    text = with_env("production", "models:\n  default:\n    retries: 0\n")
    Path("harness.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setattr(build, "_check_environment", lambda *a: pytest.fail("checked again"))
    spec = load_spec("harness.yaml", env="offline", edit=lambda data: None)
    assert spec.env == "offline"


def test_the_examples_and_fixtures_still_load() -> None:
    root = Path(__file__).resolve().parents[2]
    specs = [
        p
        for folder in ("examples", "fixtures", "recordings")
        if (root / folder).is_dir()
        for p in sorted((root / folder).rglob("*.yaml"))
        if ".harness" not in p.parts and _is_spec(p)
    ]
    assert specs
    for path in specs:
        load_spec(path, env="")


def _is_spec(path: Path) -> bool:
    head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    return head.startswith("version: 1") or ("\nversion: 1\n" in head and "\ntasks:" in head)


# -- property: loading with no environment fails exactly when loading some environment fails --

_KEYS = st.sampled_from(
    [
        "models", "default", "use", "scripted", "retries", "temprature", "script", "tasks",
        "orders", "tools", "prompt", "rules", "state", "record", "lease", "name", "timeout",
        "refund", "lookup_order", "call", "replay", "guards", "budget", "steps", "environments",
        "on_truncation", "R1", "when",
    ]
)  # fmt: skip
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=40)
    | st.sampled_from(["scripted", "openai", "30s", "soon", "refund", "refnd", "R1", "tool == 1"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)
_OVERLAYS = st.one_of(
    st.sampled_from(
        [
            {"models": {"default": {"retries": 0}}},
            {"state": {"use": "memory"}},
            {"tasks": {"orders": {"tools": ["refund"]}}},
            {"models": {"default": {"use": "scripted", "script": [{"say": "hi"}]}}},
            {"rules": []},
        ]
    ),
    st.dictionaries(_KEYS, _VALUES, max_size=3),
)


def _outcome(env: str) -> SpecError | None:
    try:
        load_spec("harness.yaml", env=env)
    except SpecError as exc:
        return exc
    return None


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(overlay=_OVERLAYS, baseline=st.booleans())
def test_no_environment_fails_exactly_when_an_environment_fails(
    overlay: dict[str, Any], baseline: bool
) -> None:
    """The dry run of `x` is the load of `x`: same verdict, same line, its error naming `x`."""
    text = SPEC.replace("state:\n  use: sqlite\n", "state:\n  use: sqlite\n  record: false\n")
    if baseline:
        Path("org-baseline.yaml").write_text(BASELINE, encoding="utf-8")
        text = text.replace("name: shop-desk\n", "name: shop-desk\nbaseline: org-baseline.yaml\n")
    text = text.replace("environments:\n", "environments:\n  x: " + json.dumps(overlay) + "\n")
    Path("harness.yaml").write_text(text, encoding="utf-8")
    chosen = _outcome("x")
    unchosen = _outcome("")
    assert (chosen is None) == (unchosen is None)
    assert _outcome("offline") is None or unchosen is not None
    if chosen is None or unchosen is None:
        return
    assert (unchosen.file, unchosen.line) == (chosen.file, chosen.line)
    named = (unchosen.key or "").startswith("environments.x")
    assert unchosen.reason == chosen.reason + ("" if named else " (with environment 'x')")
