"""The spec loader and its YAML reader: valid specs, overlays, baselines and every error kind."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from pytest_harness.errors import SpecError
from pytest_harness.spec import Effect, ReplayPolicy, Spec, load_spec
from pytest_harness.spec.yamlio import MAX_ALIAS_NODES, parse_yaml, read_yaml

SPEC = textwrap.dedent(
    """\
    version: 1
    name: shop-desk

    models:
      default:
        use: openai
        model: gpt-4.1-mini
        api_key_env: OPENAI_API_KEY
        base_url: null
        price: {input_per_mtok: 0.40, output_per_mtok: 1.60}
        retries: 2
        fallback: [backup]
      backup:
        use: scripted
        script:
          - say: "Sorry, try again later."

    tools:
      lookup_order:
        call: shop.tools:lookup_order
        replay: safe
      refund:
        call: shop.tools:refund
        replay: idempotent
        timeout: 20s

    rules:
      - id: R1
        when: tool == "refund" && args.amount > 100
        then: approve
        approvers: [finance]
      - id: R2
        when: tool == "delete_account"
        then: deny

    guards:
      - id: G1
        on: output
        check: regex
        pattern: '\\b\\d{16}\\b'
        action: redact
      - id: G2
        on: tool_result
        check: cel
        when: text.contains("secret") && tool == "lookup_order"
        tools: [lookup_order]
        action: block

    tasks:
      orders:
        model: default
        prompt: |
          You are the order desk of a shop. Look orders up before acting on them.
        tools: [lookup_order, refund]
        rules: [R1, R2]
        guards: [G1]
        budget: {steps: 8, tokens: 20000, usd: 0.50, tool_calls: 10}
        deadline: 60s

    state:
      use: sqlite
      path: .harness/state.db
      record: true
      lease: 30s
      synchronous: full

    environments:
      offline:
        models:
          default:
            use: scripted
            script: fixtures/orders.script.yaml
      ci:
        state:
          use: memory
    """
)

MINIMAL = textwrap.dedent(
    """\
    version: 1
    name: tiny
    models:
      default:
        use: scripted
        script: [{say: hi}]
    tasks:
      chat:
        prompt: Be brief.
    """
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_ENV", raising=False)


def write(text: str, name: str = "harness.yaml") -> Path:
    path = Path.cwd() / name
    path.write_text(text, encoding="utf-8")
    return path


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """The 1-based line of the `nth` line of `text` that contains `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[nth - 1]


def load_error(text: str, **kwargs: object) -> SpecError:
    write(text)
    with pytest.raises(SpecError) as info:
        load_spec("harness.yaml", **kwargs)  # type: ignore[arg-type]
    return info.value


# --- valid specs ------------------------------------------------------------------------------


def test_the_design_example_loads() -> None:
    write(SPEC)
    spec = load_spec("harness.yaml")
    doc = spec.document
    assert isinstance(spec, Spec)
    assert spec.name == "shop-desk"
    assert spec.env is None
    assert spec.path == Path.cwd() / "harness.yaml"
    assert doc.models["default"].use == "openai"
    assert doc.models["default"].fallback == ("backup",)
    assert doc.models["backup"].script == [{"say": "Sorry, try again later."}]
    assert doc.tools["refund"].replay is ReplayPolicy.IDEMPOTENT
    assert doc.tools["refund"].timeout == 20.0
    assert doc.tasks["orders"].deadline == 60.0
    assert doc.state.lease == 30.0
    assert doc.state.record is True
    assert doc.guards[0].pattern == r"\b\d{16}\b"
    assert [r.id for r in spec.rules_for("orders")] == ["R1", "R2"]
    assert spec.rules_for("orders")[0].then is Effect.APPROVE
    assert [g.id for g in spec.guards_for("orders")] == ["G1"]
    assert set(spec.rule_programs) == {"R1", "R2"}
    assert set(spec.guard_programs) == {"G2"}
    assert spec.rule_programs["R1"].evaluate({"tool": "refund", "args": {"amount": 250}}) is True
    assert re.fullmatch(r"[0-9a-f]{64}", spec.digest)
    assert spec.baseline_rules == () and spec.baseline_path is None


def test_locations_point_at_keys_and_list_items() -> None:
    write(SPEC)
    spec = load_spec("harness.yaml")
    tools_line = line_of(SPEC, "tools: [lookup_order, refund]")
    assert spec.locations[("tasks", "orders", "tools")] == ("harness.yaml", tools_line)
    assert spec.locations[("tasks", "orders", "tools", 1)] == ("harness.yaml", tools_line)
    assert spec.locations[("rules", 1)] == ("harness.yaml", line_of(SPEC, "id: R2"))
    assert spec.locations[("rules", 1, "when")] == ("harness.yaml", line_of(SPEC, "delete_acc"))
    assert spec.locate(("tasks", "orders", "budget", "steps")) == (
        "harness.yaml",
        line_of(SPEC, "budget:"),
    )


def test_scripted_model_with_inline_script_loads() -> None:
    text = edit(SPEC, "    use: openai\n", "    use: scripted\n    script:\n      - say: hi\n")
    write(text)
    spec = load_spec("harness.yaml")
    assert spec.document.models["default"].use == "scripted"
    assert spec.document.models["default"].script == [{"say": "hi"}]
    assert spec.locations[("models", "default", "script", 0, "say")][1] == line_of(
        text, "- say: hi"
    )


def test_minimal_spec_takes_the_defaults() -> None:
    write(MINIMAL)
    spec = load_spec(Path("harness.yaml"))
    task = spec.task("chat")
    assert task.model == "default" and task.tools == () and task.rules is None
    assert spec.document.state.use == "memory"
    assert spec.document.state.record is False
    assert spec.rules_for("chat") == ()


def test_guard_key_on_is_a_string_not_a_yaml_boolean() -> None:
    write(SPEC)
    assert load_spec("harness.yaml").document.guards[0].on.value == "output"


def test_loading_a_hundred_line_spec_is_quick() -> None:
    import time

    write(SPEC)
    load_spec("harness.yaml")  # warm: plugins and the CEL extension load once per process
    start = time.perf_counter()
    for _ in range(10):
        load_spec("harness.yaml")
    assert (time.perf_counter() - start) / 10 < 0.1


# --- environments -----------------------------------------------------------------------------


def test_environment_overlay_merges_and_takes_its_lines() -> None:
    write(SPEC)
    spec = load_spec("harness.yaml", env="offline")
    model = spec.document.models["default"]
    assert spec.env == "offline"
    assert model.use == "scripted"
    assert model.script == "fixtures/orders.script.yaml"
    assert model.model == "gpt-4.1-mini"  # untouched keys stay
    assert model.fallback == ("backup",)
    use_lines = [i for i, line in enumerate(SPEC.splitlines(), 1) if "use: scripted" in line]
    assert spec.locations[("models", "default", "use")] == ("harness.yaml", use_lines[-1])
    assert spec.locations[("models", "default", "script")] == (
        "harness.yaml",
        line_of(SPEC, "script: fixtures/orders.script.yaml"),
    )
    assert spec.locations[("models", "default", "model")] == (
        "harness.yaml",
        line_of(SPEC, "model: gpt-4.1-mini"),
    )


def test_environment_from_harness_env(monkeypatch: pytest.MonkeyPatch) -> None:
    write(SPEC)
    monkeypatch.setenv("HARNESS_ENV", "ci")
    spec = load_spec("harness.yaml")
    assert spec.env == "ci"
    assert spec.document.state.use == "memory"
    assert spec.document.state.path == ".harness/state.db"  # merged, not replaced
    assert load_spec("harness.yaml", env="").env is None  # env="" opts out
    assert load_spec("harness.yaml", env="offline").env == "offline"  # the argument wins


def test_empty_harness_env_means_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    write(SPEC)
    monkeypatch.setenv("HARNESS_ENV", "")
    assert load_spec("harness.yaml").env is None


def test_environment_lists_replace_instead_of_merging() -> None:
    text = SPEC + "  lean:\n    tasks:\n      orders:\n        tools: [lookup_order]\n"
    write(text)
    spec = load_spec("harness.yaml", env="lean")
    assert spec.task("orders").tools == ("lookup_order",)
    assert spec.task("orders").prompt.startswith("You are the order desk")
    assert spec.locations[("tasks", "orders", "tools", 0)][1] == len(text.splitlines())


def test_unknown_environment_suggests_the_closest() -> None:
    err = load_error(SPEC, env="ofline")
    assert str(err).startswith(
        f"harness.yaml:{line_of(SPEC, 'environments:')} environments: "
        "unknown environment 'ofline' (did you mean 'offline'?)"
    )
    assert err.key == "environments"


def test_unknown_environment_from_harness_env_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_ENV", "prod")
    err = load_error(SPEC)
    assert "unknown environment 'prod' (known: ci, offline)" in str(err)
    assert "HARNESS_ENV='prod'" in str(err)


def test_environment_when_the_spec_has_none() -> None:
    err = load_error(MINIMAL, env="offline")
    assert "unknown environment 'offline'; this file defines no `environments`" in str(err)


def test_environment_cannot_replace_the_baseline() -> None:
    text = SPEC + "  loose:\n    baseline: other.yaml\n"
    err = load_error(text, env="loose")
    assert str(err).startswith(
        f"harness.yaml:{line_of(text, 'baseline: other.yaml')} environments.loose.baseline: "
        "an environment cannot set `baseline`"
    )


def test_error_in_an_overlay_points_at_the_overlay() -> None:
    text = SPEC + "  broken:\n    tools:\n      refund:\n        replay: sometimes\n"
    err = load_error(text, env="broken")
    assert str(err).startswith(
        f"harness.yaml:{line_of(text, 'replay: sometimes')} tools.refund.replay: "
        "expected 'manual', 'safe' or 'idempotent', got 'sometimes'"
    )


# --- schema errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30s", 30.0), ("5m", 300.0), ("2h", 7200.0), ("12", 12.0), ("1.5", 1.5), ("250ms", 0.25)],
)
def test_durations(value: str, seconds: float) -> None:
    write(edit(SPEC, "deadline: 60s", f"deadline: {value}"))
    assert load_spec("harness.yaml").task("orders").deadline == seconds


def test_bad_duration_names_the_value_and_the_line() -> None:
    text = edit(SPEC, "deadline: 60s", "deadline: bad")
    err = load_error(text)
    assert str(err).startswith(
        f"harness.yaml:{line_of(text, 'deadline: bad')} tasks.orders.deadline: "
    )
    assert "a duration must be like 30s, 5m, 2h or a number of seconds, not 'bad'" in str(err)
    assert err.line == line_of(text, "deadline: bad")
    assert err.key == "tasks.orders.deadline"


@pytest.mark.parametrize(
    ("old", "new", "needle", "expected"),
    [
        pytest.param(
            "    tools: [lookup_order, refund]",
            "    tool: [lookup_order, refund]",
            "tool: [",
            "tasks.orders.tool: unknown key 'tool' (did you mean 'tools'?)",
            id="unknown-task-key",
        ),
        pytest.param(
            "models:\n",
            "modles:\n",
            "modles:",
            "modles: unknown key 'modles' (did you mean 'models'?)",
            id="unknown-top-level-key",
        ),
        pytest.param(
            "    replay: safe",
            "    replay: sfe",
            "replay: sfe",
            "tools.lookup_order.replay: expected 'manual', 'safe' or 'idempotent', got 'sfe' "
            "(did you mean 'safe'?)",
            id="bad-enum",
        ),
        pytest.param(
            "budget: {steps: 8,",
            "budget: {steps: 0,",
            "budget:",
            "tasks.orders.budget.steps: expected a value greater than or equal to 1, got 0",
            id="out-of-range",
        ),
        pytest.param(
            "    retries: 2",
            "    retries: many",
            "retries: many",
            "models.default.retries: expected an integer, unable to parse string as an integer, "
            "got 'many'",
            id="not-an-integer",
        ),
        pytest.param(
            "version: 1",
            "version: 2",
            "version: 2",
            "version: expected 1, got 2",
            id="version",
        ),
        pytest.param(
            "    prompt: |\n"
            "      You are the order desk of a shop. Look orders up before acting on them.\n",
            "",
            "  orders:",
            "tasks.orders: missing required key 'prompt'",
            id="missing-key",
        ),
        pytest.param(
            '      - say: "Sorry, try again later."',
            "      7",
            "    script:",
            "models.backup.script: expected a string, a list or a mapping, got 7",
            id="union",
        ),
        pytest.param(
            "  synchronous: full",
            "  synchronous: sometimes",
            "synchronous: sometimes",
            "state.synchronous: expected 'full' or 'normal', got 'sometimes'",
            id="literal",
        ),
        pytest.param(
            "  backup:\n    use: scripted\n",
            "  backup: 7\n  spare:\n    use: scripted\n",
            "backup: 7",
            "models.backup: expected a mapping, got 7",
            id="mapping-expected",
        ),
        pytest.param(
            "    approvers: [finance]",
            "    approvers: finance",
            "approvers: finance",
            "rules[0].approvers: expected a list, got 'finance'",
            id="list-expected",
        ),
    ],
)
def test_schema_errors_name_line_key_and_value(
    old: str, new: str, needle: str, expected: str
) -> None:
    text = edit(SPEC, old, new)
    err = load_error(text)
    assert str(err) == f"harness.yaml:{line_of(text, needle)} {expected}"


def test_several_schema_errors_report_the_first_in_the_file() -> None:
    text = edit(SPEC, "    replay: safe", "    replay: sfe")
    text = edit(text, "deadline: 60s", "deadline: soon")
    text = edit(text, "  lease: 30s", "  lease: never")
    err = load_error(text)
    assert str(err).startswith(f"harness.yaml:{line_of(text, 'replay: sfe')} tools.lookup_order")
    assert str(err).endswith("(and 2 more)")


def test_top_level_must_be_a_mapping() -> None:
    err = load_error("- version: 1\n")
    assert str(err).startswith("harness.yaml:1: the top level must be a mapping")
    assert "not a list" in str(err)


def test_empty_file_is_an_error() -> None:
    err = load_error("# nothing here\n")
    assert "the top level must be a mapping" in str(err) and "not null" in str(err)


def test_a_misspelt_key_is_reported_rather_than_the_missing_one() -> None:
    text = edit(SPEC, "    then: deny", "    than: deny")
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'than: deny')} rules[1].than: "
        "unknown key 'than' (did you mean 'then'?) (and 1 more)"
    )


# --- cross-references -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "needle", "expected"),
    [
        pytest.param(
            "tools: [lookup_order, refund]",
            "tools: [lookup_order, refnd]",
            "refnd",
            "tasks.orders.tools[1]: unknown tool 'refnd' (did you mean 'refund'?)",
            id="task-tool",
        ),
        pytest.param(
            "    model: default",
            "    model: defualt",
            "model: defualt",
            "tasks.orders.model: unknown model 'defualt' (did you mean 'default'?)",
            id="task-model",
        ),
        pytest.param(
            "    rules: [R1, R2]",
            "    rules: [R1, R3]",
            "rules: [R1, R3]",
            "tasks.orders.rules[1]: unknown rule 'R3' (known: R1, R2)",
            id="task-rule",
        ),
        pytest.param(
            "    guards: [G1]",
            "    guards: [G1, X9]",
            "guards: [G1, X9]",
            "tasks.orders.guards[1]: unknown guard 'X9' (known: G1, G2)",
            id="task-guard",
        ),
        pytest.param(
            "fallback: [backup]",
            "fallback: [backup, bakup]",
            "fallback:",
            "models.default.fallback[1]: unknown model 'bakup' (did you mean 'backup'?)",
            id="fallback-unknown",
        ),
        pytest.param(
            "fallback: [backup]",
            "fallback: [default]",
            "fallback:",
            "models.default.fallback[0]: model 'default' cannot fall back to itself",
            id="fallback-self",
        ),
        pytest.param(
            "  - id: R2",
            "  - id: R1",
            "  - id: R1",
            "rules[1].id: duplicate rule id 'R1' (first at harness.yaml:",
            id="duplicate-rule",
        ),
        pytest.param(
            "  - id: G2",
            "  - id: G1",
            "  - id: G1",
            "guards[1].id: duplicate guard id 'G1' (first at harness.yaml:",
            id="duplicate-guard",
        ),
        pytest.param(
            "    tools: [lookup_order]\n",
            "    tools: [lookup_ordr]\n",
            "tools: [lookup_ordr]",
            "guards[1].tools[0]: unknown tool 'lookup_ordr' (did you mean 'lookup_order'?)",
            id="guard-tool",
        ),
        pytest.param(
            "use: openai",
            "use: opnai",
            "use: opnai",
            "models.default.use: unknown model provider 'opnai' (did you mean 'openai'?)",
            id="provider",
        ),
        pytest.param(
            "use: sqlite",
            "use: sqllite",
            "use: sqllite",
            "state.use: unknown store 'sqllite' (did you mean 'sqlite'?)",
            id="store",
        ),
        pytest.param(
            "check: regex",
            "check: regx",
            "check: regx",
            "guards[0].check: unknown guard check 'regx' (did you mean 'regex'?)",
            id="guard-check",
        ),
    ],
)
def test_cross_reference_errors(old: str, new: str, needle: str, expected: str) -> None:
    text = edit(SPEC, old, new)
    err = load_error(text)
    nth = 2 if needle == "  - id: R1" or needle == "  - id: G1" else 1
    assert str(err).startswith(f"harness.yaml:{line_of(text, needle, nth)} {expected}")


def test_duplicate_id_names_the_first_line() -> None:
    text = edit(SPEC, "  - id: R2", "  - id: R1")
    err = load_error(text)
    assert f"(first at harness.yaml:{line_of(text, '- id: R1')})" in str(err)


def test_guard_check_may_be_a_callable() -> None:
    write(edit(SPEC, "check: regex", "check: shop.guards:no_cards"))
    assert load_spec("harness.yaml").document.guards[0].check == "shop.guards:no_cards"


def test_task_without_any_model_defined() -> None:
    text = "version: 1\nname: bare\ntasks:\n  chat:\n    prompt: hi\n"
    err = load_error(text)
    assert str(err).startswith(
        "harness.yaml:4 tasks.chat.model: unknown model 'default': this spec defines no models"
    )


# --- CEL --------------------------------------------------------------------------------------


def test_cel_syntax_error_names_the_column() -> None:
    text = edit(SPEC, 'when: tool == "delete_account"', "when: tool ==== 1")
    err = load_error(text)
    assert str(err).startswith(
        f"harness.yaml:{line_of(text, 'tool ==== 1')} rules[1].when: CEL syntax error at column 8: "
    )
    assert "extraneous input '=='" in str(err)


def test_cel_unknown_variable_suggests_the_closest() -> None:
    text = edit(SPEC, 'when: tool == "refund"', 'when: tol == "refund"')
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'tol ==')} rules[0].when: "
        "unknown variable 'tol' in rule R1 (did you mean 'tool'?)"
    )


def test_cel_guard_variables_are_checked() -> None:
    text = edit(SPEC, 'when: text.contains("secret")', 'when: txt.contains("secret")')
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'txt.contains')} guards[1].when: "
        "unknown variable 'txt' in guard G2 (did you mean 'text'?)"
    )


def test_guard_only_variables_are_not_rule_variables() -> None:
    text = edit(SPEC, 'when: tool == "delete_account"', 'when: text == "x"')
    err = load_error(text)
    assert "unknown variable 'text' in rule R2" in str(err)


def test_cel_guard_needs_when() -> None:
    text = edit(SPEC, '    when: text.contains("secret") && tool == "lookup_order"\n', "")
    err = load_error(text)
    assert str(err).startswith(
        f"harness.yaml:{line_of(text, 'id: G2')} guards[1]: a cel guard needs `when`"
    )


def test_comprehension_variables_are_not_unknown() -> None:
    text = edit(
        SPEC,
        'when: tool == "delete_account"',
        "when: args.items.exists(item, item.price > 100) && [1, 2].all(n, n < step)",
    )
    write(text)
    program = load_spec("harness.yaml").rule_programs["R2"]
    assert program.evaluate({"args": {"items": [{"price": 150}]}, "step": 3, "tool": "x"}) is True


# --- baseline ---------------------------------------------------------------------------------

BASELINE = textwrap.dedent(
    """\
    locks:
      state.record: false
    rules:
      - id: ORG1
        when: tool == "wire_money"
        then: deny
    guards:
      - id: ORG-G1
        on: output
        check: contains
        text: internal-only
        action: block
    """
)


def with_baseline(text: str) -> str:
    return edit(text, "name: shop-desk\n", "name: shop-desk\nbaseline: org-baseline.yaml\n")


def test_baseline_lock_conflict_names_the_baseline() -> None:
    write(BASELINE, "org-baseline.yaml")
    text = with_baseline(SPEC)
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'record: true')} state.record: locked to false by "
        "org-baseline.yaml (locks.state.record); this file sets true"
    )


def test_baseline_lock_conflict_from_an_environment() -> None:
    write(BASELINE, "org-baseline.yaml")
    text = (
        with_baseline(edit(SPEC, "  record: true\n", ""))
        + "  rec:\n    state:\n      record: true\n"
    )
    err = load_error(text, env="rec")
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'record: true')} state.record: locked to false by "
        "org-baseline.yaml (locks.state.record); environment 'rec' sets true"
    )
    err = load_error(text)  # every environment is checked, chosen or not
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'record: true')} environments.rec.state.record: locked to "
        "false by org-baseline.yaml (locks.state.record); environment 'rec' sets true"
    )


def test_baseline_lock_applies_when_absent_and_rules_are_prepended() -> None:
    write(BASELINE, "org-baseline.yaml")
    text = with_baseline(edit(SPEC, "  record: true\n", ""))
    write(text)
    spec = load_spec("harness.yaml")
    assert spec.document.state.record is False
    assert spec.locations[("state", "record")] == ("org-baseline.yaml", 2)
    assert [r.id for r in spec.rules_for("orders")] == ["ORG1", "R1", "R2"]
    assert [g.id for g in spec.guards_for("orders")] == ["ORG-G1", "G1"]
    assert spec.baseline_path == Path.cwd() / "org-baseline.yaml"
    assert set(spec.rule_programs) == {"ORG1", "R1", "R2"}
    assert spec.locations[("baseline", "rules", 0)] == ("org-baseline.yaml", 4)
    assert spec.locations[("baseline", "rules", 0, "when")] == ("org-baseline.yaml", 5)
    assert spec.locations[("baseline", "guards", 0, "text")] == ("org-baseline.yaml", 11)
    assert spec.locations[("baseline", "locks", "state.record")] == ("org-baseline.yaml", 2)
    assert spec.locations[("baseline",)] == ("harness.yaml", 3)


def test_baseline_lock_creates_the_missing_mapping() -> None:
    write("locks:\n  state.record: true\n", "org-baseline.yaml")
    write(edit(MINIMAL, "name: tiny\n", "name: tiny\nbaseline: org-baseline.yaml\n"))
    assert load_spec("harness.yaml").document.state.record is True


def test_baseline_lock_with_the_same_value_is_fine() -> None:
    write("locks:\n  state.record: true\n  models.default.retries: 2\n", "org-baseline.yaml")
    write(with_baseline(SPEC))
    assert load_spec("harness.yaml").document.state.record is True


def test_record_argument() -> None:
    write(MINIMAL)
    assert load_spec("harness.yaml", record=True).document.state.record is True
    write(SPEC)
    assert load_spec("harness.yaml", record=False).document.state.record is False


def test_record_true_against_a_lock() -> None:
    write(BASELINE, "org-baseline.yaml")
    write(with_baseline(edit(SPEC, "  record: true\n", "")))
    assert load_spec("harness.yaml", record=False).document.state.record is False
    with pytest.raises(SpecError) as info:
        load_spec("harness.yaml", record=True)
    assert str(info.value) == (
        "org-baseline.yaml:2 locks.state.record: record=True was asked for, but "
        "org-baseline.yaml locks state.record to false (locks.state.record)"
    )


def test_baseline_unknown_key() -> None:
    write("locks: {}\npolicies: []\n", "org-baseline.yaml")
    err = load_error(with_baseline(SPEC))
    assert (
        str(err)
        == "org-baseline.yaml:2 policies: unknown key 'policies' (known: guards, locks, rules)"
    )


def test_baseline_unknown_key_suggests() -> None:
    write("lock:\n  state.record: false\n", "org-baseline.yaml")
    err = load_error(with_baseline(SPEC))
    assert str(err) == "org-baseline.yaml:1 lock: unknown key 'lock' (did you mean 'locks'?)"


def test_baseline_rule_errors_point_into_the_baseline() -> None:
    write(edit(BASELINE, 'tool == "wire_money"', 'tool === "wire_money"'), "org-baseline.yaml")
    err = load_error(with_baseline(edit(SPEC, "  record: true\n", "")))
    assert str(err).startswith("org-baseline.yaml:5 rules[0].when: CEL syntax error at column")
    assert err.file == "org-baseline.yaml"


def test_rule_id_unique_across_baseline_and_spec() -> None:
    write(edit(BASELINE, "id: ORG1", "id: R2"), "org-baseline.yaml")
    text = with_baseline(edit(SPEC, "  record: true\n", ""))
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'id: R2')} rules[1].id: duplicate rule id 'R2' "
        "(first at org-baseline.yaml:4)"
    )


def test_task_naming_a_baseline_rule() -> None:
    write(BASELINE, "org-baseline.yaml")
    text = with_baseline(
        edit(edit(SPEC, "  record: true\n", ""), "rules: [R1, R2]", "rules: [ORG1]")
    )
    err = load_error(text)
    assert "tasks.orders.rules[0]: rule 'ORG1' comes from the baseline" in str(err)


def test_missing_baseline_points_at_the_baseline_key() -> None:
    text = with_baseline(SPEC)
    err = load_error(text)
    assert str(err).startswith("harness.yaml:3 baseline: baseline file not found: ")
    assert str(Path.cwd() / "org-baseline.yaml") in str(err)


def test_baseline_path_is_relative_to_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "org-baseline.yaml").write_text(BASELINE, encoding="utf-8")
    (tmp_path / "app" / "harness.yaml").write_text(with_baseline(SPEC), encoding="utf-8")
    err = load_error_at(tmp_path / "app" / "harness.yaml")
    assert str(err).startswith(f"{Path('app') / 'harness.yaml'}:")
    assert f"by {Path('app') / 'org-baseline.yaml'} (locks.state.record)" in str(err)


def load_error_at(path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value


def test_baseline_must_be_a_mapping() -> None:
    write("- 1\n", "org-baseline.yaml")
    err = load_error(with_baseline(SPEC))
    assert str(err).startswith("org-baseline.yaml:1: a baseline must be a mapping")


def test_bad_lock_key() -> None:
    write("locks:\n  'state..record': false\n", "org-baseline.yaml")
    err = load_error(with_baseline(SPEC))
    assert str(err).startswith("org-baseline.yaml:2 locks.state..record: a lock key must be")


# --- digest -----------------------------------------------------------------------------------


def digest_of(text: str, **kwargs: object) -> str:
    write(text)
    return load_spec("harness.yaml", **kwargs).digest  # type: ignore[arg-type]


def test_digest_is_stable_across_key_order() -> None:
    reordered = textwrap.dedent(
        """\
        tasks:
          chat:
            prompt: Be brief.
        models:
          default:
            script: [{say: hi}]
            use: scripted
        name: tiny
        version: 1
        """
    )
    assert digest_of(MINIMAL) == digest_of(reordered)


def test_digest_ignores_environments_that_do_not_change_the_effective_doc() -> None:
    plain = digest_of(MINIMAL)
    with_envs = MINIMAL + "environments:\n  other:\n    name: renamed\n  same:\n    name: tiny\n"
    assert digest_of(with_envs) == plain
    assert digest_of(with_envs, env="same") == plain
    assert digest_of(with_envs, env="other") != plain


def test_digest_leaves_out_values_equal_to_their_defaults() -> None:
    """A key written at its default (or a new optional key) does not change the digest."""
    plain = digest_of(MINIMAL)
    explicit = edit(
        MINIMAL, "use: scripted", "use: scripted\n    on_truncation: fail\n    retries: 2"
    )
    assert digest_of(explicit) == plain
    assert (
        digest_of(edit(MINIMAL, "use: scripted", "use: scripted\n    on_truncation: accept"))
        != plain
    )


def test_digest_changes_with_content_and_baseline() -> None:
    plain = digest_of(SPEC)
    assert digest_of(edit(SPEC, "Look orders up", "Look orders up first")) != plain
    write(BASELINE, "org-baseline.yaml")
    base_text = with_baseline(edit(SPEC, "  record: true\n", ""))
    first = digest_of(base_text)
    write(edit(BASELINE, 'tool == "wire_money"', 'tool == "wire_funds"'), "org-baseline.yaml")
    assert digest_of(base_text) != first


# --- YAML reading -----------------------------------------------------------------------------


def test_duplicate_keys_are_rejected() -> None:
    text = edit(SPEC, "    replay: safe\n", "    replay: safe\n    replay: manual\n")
    err = load_error(text)
    assert str(err) == (
        f"harness.yaml:{line_of(text, 'replay: manual')} tools.lookup_order.replay: "
        f"duplicate key 'replay' (first at line {line_of(text, 'replay: safe')})"
    )


def test_oversized_file_is_rejected() -> None:
    path = write("name: x\n" + "# padding\n" * 200)
    with pytest.raises(SpecError, match=r"the file is 2008 bytes, over the cap of 1000 bytes"):
        read_yaml(path, max_bytes=1000)
    write(MINIMAL + "#" * 1_048_576 + "\n")
    with pytest.raises(
        SpecError, match=r"^harness.yaml: the file is \d+ bytes, over the cap of 1048576"
    ):
        load_spec("harness.yaml")


def test_a_file_that_grew_after_its_size_was_taken_is_read_whole_up_to_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read is sized by `fstat`; what a file holds past that size is read on, to the cap."""
    import os

    real_fstat = os.fstat

    def small(fd: int) -> os.stat_result:
        found = real_fstat(fd)
        return os.stat_result((found.st_mode, *found[1:6], 3, *found[7:]))  # st_size 3

    path = write("name: x\n" + "# padding\n" * 200)
    monkeypatch.setattr(os, "fstat", small)
    assert read_yaml(path).data == {"name": "x"}
    with pytest.raises(SpecError, match=r"the file is \d+ bytes, over the cap of 1000 bytes"):
        read_yaml(path, max_bytes=1000)
    monkeypatch.setattr(os, "fstat", real_fstat)
    assert read_yaml(path, max_bytes=2008).data == {"name": "x"}  # exactly at the cap


def test_yaml_syntax_error_names_the_line() -> None:
    err = load_error("version: 1\nname: x\ntasks: [a, b\nmodels: {}\n")
    assert str(err).startswith("harness.yaml:4: invalid YAML: did not find expected ',' or ']'")
    assert err.line == 4


def test_tab_indentation_is_a_yaml_error() -> None:
    err = load_error("version: 1\ntasks:\n\tchat: {}\n")
    assert str(err).startswith("harness.yaml:3: invalid YAML:")


def test_billion_laughs_is_bounded() -> None:
    bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for name, prev in zip("bcdefghi", "abcdefgh", strict=True):
        bomb.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    err = load_error("\n".join(bomb) + "\n")
    assert "alias expansion exceeds the limit of" in str(err)
    assert str(MAX_ALIAS_NODES) in str(err)


def test_modest_aliases_are_fine() -> None:
    doc = parse_yaml("base: &b {use: scripted}\nmodels:\n  a: *b\n  b: *b\n", file="x.yaml")
    assert doc.data["models"] == {"a": {"use": "scripted"}, "b": {"use": "scripted"}}
    assert doc.data["models"]["a"] is not doc.data["models"]["b"]  # copies, not shared objects
    assert doc.lines[("models", "b", "use")] == 1


def test_merge_keys_work_and_explicit_keys_win() -> None:
    text = "base: &b {use: scripted, retries: 1}\nm:\n  <<: *b\n  retries: 3\n"
    doc = parse_yaml(text, file="x.yaml")
    assert doc.data["m"] == {"use": "scripted", "retries": 3}
    assert doc.lines[("m", "retries")] == 4
    assert doc.lines[("m", "use")] == 1


def test_recursive_alias_is_rejected() -> None:
    with pytest.raises(SpecError, match="recursive alias"):
        parse_yaml("a: &a [1, *a]\n", file="x.yaml")


def test_unsafe_tags_are_rejected() -> None:
    with pytest.raises(
        SpecError, match=r"^x.yaml:2 b: invalid value: could not determine a constructor"
    ):
        parse_yaml("a: 1\nb: !!python/name:os.system ''\n", file="x.yaml")
    with pytest.raises(SpecError, match=r"^x.yaml:1 b: unsupported YAML tag .*python/object/apply"):
        parse_yaml("b: !!python/object/apply:os.system ['true']\n", file="x.yaml")
    with pytest.raises(SpecError, match="unsupported YAML tag"):
        parse_yaml("a: !!set {x, y}\n", file="x.yaml")


def test_not_utf8_is_rejected() -> None:
    Path("harness.yaml").write_bytes(b"version: 1\nname: caf\xe9\n")
    with pytest.raises(SpecError) as info:
        load_spec("harness.yaml")
    assert str(info.value) == "harness.yaml:2: the file is not UTF-8 text: byte 0xe9 at offset 20"


def test_utf8_bom_is_accepted() -> None:
    Path("harness.yaml").write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_spec("harness.yaml").name == "tiny"


def test_missing_file_names_the_path() -> None:
    with pytest.raises(SpecError) as info:
        load_spec("nope.yaml")
    assert str(info.value) == f"nope.yaml: file not found: {Path.cwd() / 'nope.yaml'}"


def test_file_outside_the_cwd_is_shown_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(edit(SPEC, "deadline: 60s", "deadline: bad"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    err = load_error_at(path)
    assert err.file == str(path)


def test_yaml_keys_become_strings_and_lines_are_recorded() -> None:
    doc = parse_yaml("1: one\non: yes\nlist:\n  - a\n  - {b: 2}\n", file="x.yaml")
    assert doc.data == {"1": "one", "on": True, "list": ["a", {"b": 2}]}
    assert doc.lines == {
        (): 1,
        ("1",): 1,
        ("on",): 2,
        ("list",): 3,
        ("list", 0): 4,
        ("list", 1): 5,
        ("list", 1, "b"): 5,
    }
    assert doc.line(("list", 1, "b", "deeper")) == 5
    assert str(doc.error("bad", ("list", 0))) == "x.yaml:4 list[0]: bad"


def test_mapping_keys_must_be_plain_values() -> None:
    with pytest.raises(SpecError, match="a mapping key must be a plain value"):
        parse_yaml("? [a, b]\n: c\n", file="x.yaml")


def test_several_documents_are_rejected() -> None:
    with pytest.raises(
        SpecError,
        match=r"^x.yaml:2: invalid YAML: expected a single document in the stream, but found",
    ):
        parse_yaml("a: 1\n---\nb: 2\n", file="x.yaml")


def test_deep_nesting_is_bounded() -> None:
    with pytest.raises(SpecError, match="nested deeper than"):
        parse_yaml("a: " + "[" * 300 + "]" * 300 + "\n", file="x.yaml")
