"""`evals.online` in harness.yaml: what loads, and each bad input's `SpecError`."""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.spec.loader import load_spec
from tests.evals.conftest import EvalsApp


def test_a_spec_with_graders_loads(evals_app: EvalsApp) -> None:
    spec = load_spec(
        evals_app.write(
            """
            - {id: polite, check: regex, pattern: '(?i)thank'}
            - {id: judged, check: model, model: judge, prompt: Score it., pass_at: 0.7}
            - {id: shouting, on: trace, check: callable, call: "{module}:shouting", tasks: [orders]}
            """,
            sample=0.2,
        )
    )
    online = spec.document.evals.online
    assert online.sample == 0.2
    assert [g.id for g in online.graders] == ["polite", "judged", "shouting"]
    assert online.graders[0].pass_at == 0.5 and online.graders[1].pass_at == 0.7
    assert online.graders[2].on.value == "trace"


def test_graders_do_not_change_the_spec_digest(evals_app: EvalsApp) -> None:
    one = load_spec(evals_app.write("- {id: polite, check: regex, pattern: thanks}"))
    two = load_spec(evals_app.write("- {id: other, check: max_length, max: 3}"))
    assert one.digest == two.digest


@pytest.mark.parametrize(
    ("graders", "key", "message"),
    [
        (
            "- {id: polite, check: regexp, pattern: thanks}",
            "evals.online.graders[0].check",
            "unknown grader check 'regexp' (did you mean 'regex'?)",
        ),
        (
            "- {id: judged, check: model, model: jugde, prompt: Score it.}",
            "evals.online.graders[0].model",
            "unknown judge model 'jugde' (did you mean 'judge'?)",
        ),
        (
            "- {id: judged, check: model, prompt: Score it.}",
            "evals.online.graders[0]",
            "a model grader needs `model`",
        ),
        (
            "- {id: judged, check: model, model: judge}",
            "evals.online.graders[0]",
            "a model grader needs `prompt`",
        ),
        (
            "- {id: polite, check: regex, pattern: thanks}\n"
            "- {id: judged, check: model, model: judge, prompt: x, pass_at: 1.5}",
            "evals.online.graders[1].pass_at",
            "less than or equal to 1",
        ),
        (
            "- {id: judged, check: model, model: judge, prompt: x, pass_at: -0.1}",
            "evals.online.graders[0].pass_at",
            "greater than or equal to 0",
        ),
        (
            "- {id: polite, check: regex, pattern: thanks, colour: red}",
            "evals.online.graders[0].colour",
            "unknown key 'colour'",
        ),
        (
            "- {id: polite, check: regex, pattern: thanks}\n"
            "- {id: polite, check: max_length, max: 3}",
            "evals.online.graders[1].id",
            "duplicate grader id 'polite'",
        ),
        (
            "- {id: c, check: cel, when: 'text.size() >'}",
            "evals.online.graders[0].when",
            "CEL syntax error",
        ),
        (
            "- {id: c, check: cel, when: 'txt.size() > 3'}",
            "evals.online.graders[0].when",
            "unknown variable 'txt' in grader c (did you mean 'text'?)",
        ),
        (
            "- {id: f, check: callable}",
            "evals.online.graders[0]",
            "a callable grader needs `call: module:function`",
        ),
        (
            "- {id: polite, check: regex, pattern: thanks, tasks: [ordres]}",
            "evals.online.graders[0].tasks[0]",
            "unknown task 'ordres' (did you mean 'orders'?)",
        ),
        (
            "- {id: polite, check: regex, pattern: thanks, on: input}",
            "evals.online.graders[0].on",
            "expected 'output' or 'trace'",
        ),
    ],
)
def test_bad_graders_are_spec_errors_naming_the_key(
    evals_app: EvalsApp, graders: str, key: str, message: str
) -> None:
    path = evals_app.write(graders)
    with pytest.raises(ph.SpecError) as info:
        load_spec(path)
    error = info.value
    assert error.key == key
    assert message in str(error)
    assert error.line is not None and f"harness.yaml:{error.line} {key}: " in str(error)


def test_a_sample_share_outside_0_to_1_is_a_spec_error(evals_app: EvalsApp) -> None:
    path = evals_app.write("- {id: polite, check: regex, pattern: thanks}", sample=1.5)
    with pytest.raises(ph.SpecError) as info:
        load_spec(path)
    assert info.value.key == "evals.online.sample"


@pytest.mark.parametrize(
    ("graders", "key", "message"),
    [
        ("- {id: r, check: regex}", "evals.online.graders[0]", "a regex grader needs `pattern`"),
        ("- {id: r, check: regex, pattern: '(('}", "evals.online.graders[0].pattern", "bad regex"),
        ("- {id: m, check: max_length}", "evals.online.graders[0]", "needs `max`"),
        (
            "- {id: j, check: json_schema, schema: {type: 12}}",
            "evals.online.graders[0].schema",
            "invalid JSON schema",
        ),
        (
            "- {id: f, check: callable, call: '{module}:missing'}",
            "evals.online.graders[0].call",
            "has no attribute 'missing'",
        ),
    ],
)
def test_bad_check_parameters_fail_at_load(
    evals_app: EvalsApp, graders: str, key: str, message: str
) -> None:
    path = evals_app.write(graders)
    with pytest.raises(ph.SpecError) as info:
        ph.load(path)
    assert info.value.key == key
    assert message in str(info.value)
