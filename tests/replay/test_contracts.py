"""Replay applies today's tool contracts, runs safe tools on request, explains request drift,
and reads golden files of format @1 (migrated) as well as @2."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.errors import HarnessError
from pytest_harness.recording.model import Recording

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
V1 = Path(__file__).parent / "golden_v1"

SPEC = """
rules: []
guards: []
tasks:
  orders:
    prompt: |
      You are the order desk.
      Look orders up first.
    tools: [lookup_order, refund]
state: {record: true}
"""

SCRIPT = (
    "[{call: lookup_order, args: {order_id: A-1}}, "
    "{call: refund, args: {order_id: A-1, amount: 20}}, "
    "{say: 'Refunded A-1.'}]"
)


def write(app, tools_edit: tuple[str, str] | None = None, spec_edit=None) -> None:
    app.write(SPEC)
    price = "price: {input_per_mtok: 0.4, output_per_mtok: 1.6}"
    text = app.spec.read_text().replace("script: []", f"script: {SCRIPT}\n    {price}", 1)
    if spec_edit is not None:
        text = text.replace(*spec_edit)
    app.spec.write_text(text)
    if tools_edit is not None:
        module = app.root / f"{app.module}.py"
        source = module.read_text()
        assert tools_edit[0] in source
        module.write_text(source.replace(*tools_edit))
        # an edit of the same size within the second of the first import's bytecode would be
        # read from that stale .pyc (Python checks the source's size and mtime in seconds)
        shutil.rmtree(module.parent / "__pycache__", ignore_errors=True)


async def record(app, tmp_path) -> Path:
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund A-1", principal="ann")
        assert result.ok
        return await harness.export(result.run_id, tmp_path / "golden.yaml")


async def replay(app, path, **kwargs) -> ph.ReplayReport:
    import sys

    sys.modules.pop(app.module, None)  # read the tools module as it is on disk now
    async with ph.load(app.spec) as harness:
        return await harness.replay(path, **kwargs)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (  # a renamed parameter
            ("def lookup_order(order_id: str)", "def lookup_order(order: str)"),
            "unexpected argument 'order_id' (did you mean 'order'?)",
        ),
        (  # a new required parameter
            (
                "def refund(order_id: str, amount: float)",
                "def refund(order_id: str, amount: float, notify: bool)",
            ),
            "missing required argument 'notify'",
        ),
        (  # a changed type
            ("def lookup_order(order_id: str)", "def lookup_order(order_id: int)"),
            "order_id",
        ),
    ],
)
async def test_a_breaking_tool_change_gets_the_live_outcome(app, tmp_path, edit, problem) -> None:
    write(app)
    golden = await record(app, tmp_path)
    write(app, tools_edit=edit)
    report = await replay(app, golden)
    assert not report.same
    assert "decisions" in report.differences
    [change] = [c for c in report.decisions if c.kind == "tool"]
    assert change.change == "changed"
    assert change.actual is not None and change.actual.detail["outcome"] == "invalid_arguments"
    assert problem in change.actual.detail["error"]
    assert "invalid_arguments" in report.render()


async def test_a_tool_no_longer_in_the_task_gets_the_live_outcome(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    write(app, spec_edit=("tools: [lookup_order, refund]", "tools: [lookup_order]"))
    report = await replay(app, golden)
    assert not report.same
    [change] = [c for c in report.decisions if c.kind == "tool" and c.key == "refund"]
    assert change.actual is not None and change.actual.detail["outcome"] == "unknown"
    assert "tool schemas: refund (removed)" in report.render()


async def test_a_compatible_tool_change_replays_the_same(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    write(
        app,
        tools_edit=(
            "def refund(order_id: str, amount: float)",
            "def refund(order_id: str, amount: float, note: str = '')",
        ),
    )
    report = await replay(app, golden)
    assert report.same
    assert report.model_requests_changed == (3, 3)  # the schema offered to the model changed
    assert "tool schemas: refund" in report.render()


async def test_a_call_rejected_when_recorded_that_today_accepts_never_replays_same(
    app, tmp_path
) -> None:
    """The recorded `invalid_arguments` was the harness's verdict: the tool never ran. Today's
    schema accepts the arguments, so a run today invokes the tool, and the recording has no
    result of it: the replay diverges (it replayed the old rejection, `same`)."""
    script = "[{call: refund, args: {order_id: A-1, amount: 20, note: dup}}, {say: 'Done.'}]"
    app.write(SPEC)
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Refund A-1", principal="ann")
        [call] = result.trace.tool_calls()
        assert call.outcome == "invalid_arguments"
        golden = await harness.export(result.run_id, tmp_path / "golden.yaml")
    assert (await replay(app, golden)).same  # today's schema still rejects it: the same
    module = app.root / f"{app.module}.py"
    source = module.read_text()
    edit = "def refund(order_id: str, amount: float)"
    module.write_text(source.replace(edit, "def refund(order_id: str, amount: float, note='')"))
    shutil.rmtree(module.parent / "__pycache__", ignore_errors=True)
    report = await replay(app, golden)
    assert not report.same and report.failed()
    assert report.diverged is not None and "today's schema accepts" in report.diverged
    assert report.divergence is not None
    assert report.divergence.expected["outcome"] == "invalid_arguments"
    assert "invalid_arguments" in report.render()


async def test_safe_tools_run_under_tools_safe_and_their_new_result_is_drift(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    write(app, tools_edit=('"total": 250.0', '"total": 99.0'))
    assert (await replay(app, golden)).same  # no tool runs: the recorded result answers
    import sys

    report = await replay(app, golden, tools="safe")
    calls = sys.modules[app.module].CALLS
    assert [c[0] for c in calls] == ["lookup_order"]  # refund is idempotent, not safe: not run
    assert not report.same
    [change] = report.decisions
    assert (change.kind, change.key, change.change) == ("tool", "lookup_order", "changed")
    assert [(f.path, f.expected, f.actual) for f in change.fields] == [
        ("result.total", 250.0, 99.0)
    ]
    assert report.model_requests_changed[0] == 2  # the next requests carry today's result
    assert "messages: from request 2" in report.render()


async def test_replay_tools_takes_none_or_safe(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    with pytest.raises(HarnessError, match="tools='all'"):
        await replay(app, golden, tools="all")


async def test_golden_files_are_format_2_with_decimals_and_no_spec_digest(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    text = golden.read_text()
    data = yaml.safe_load(text)
    assert data["format"] == "pytest-harness/recording@2"
    assert "spec_digest" not in data
    assert data["system"] == "You are the order desk.\nLook orders up first.\n"
    assert [t["name"] for t in data["tool_schemas"]] == ["lookup_order", "refund"]
    for turn in data["model_turns"]:
        assert sorted(turn["request"]) == ["messages", "system", "tools"]
    assert "e-0" not in text and "e+" not in text
    assert data["outcome"]["usage"]["usd"] > 0
    usd_line = next(line for line in text.splitlines() if "usd:" in line)
    assert usd_line.strip().startswith("usd: 0.0")


async def test_a_changed_prompt_is_explained_with_a_diff(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    write(app, spec_edit=("Look orders up first.", "Always look orders up first."))
    report = await replay(app, golden)
    assert report.same and not report.failed() and report.failed({"requests"})
    assert report.requests_explained == ("system prompt: 1 line changed",)
    rendered = report.render()
    assert "  model requests changed: 3 of 3 (system prompt: 1 line changed)" in rendered
    assert "    -Look orders up first." in rendered
    assert "    +Always look orders up first." in rendered
    assert report.to_dict()["model_requests_changed"]["parts"] == ["system prompt: 1 line changed"]


SCRIPTED = "    use: scripted\n"


def declared(extra: str) -> tuple[str, str]:
    """A spec edit adding `extra` lines to the default model's declaration."""
    return SCRIPTED, SCRIPTED + "".join(f"    {line}\n" for line in extra.splitlines())


async def test_golden_files_keep_each_models_declaration(app, tmp_path) -> None:
    write(app, spec_edit=declared("model: m-1\noptions: {temperature: 0}"))
    golden = await record(app, tmp_path)
    data = yaml.safe_load(golden.read_text())
    assert data["models"] == {
        "default": {"use": "scripted", "model": "m-1", "options": {"temperature": 0}}
    }
    assert list(data).index("models") == list(data).index("tool_schemas") + 1
    assert Recording.load(golden).models == data["models"]
    # written in one key order, whatever order they were read in (a Temporal journal's sorted)
    shuffled = replace(
        Recording.load(golden), models={"default": dict(sorted(data["models"]["default"].items()))}
    )
    assert list(shuffled.to_dict()["models"]["default"]) == ["use", "model", "options"]


async def test_a_swapped_model_is_request_drift_naming_both(app, tmp_path) -> None:
    write(app, spec_edit=declared("model: m-1"))
    golden = await record(app, tmp_path)
    write(app, spec_edit=declared("model: m-2"))
    report = await replay(app, golden)
    assert report.same and not report.failed() and report.failed({"requests"})
    assert report.model_requests_changed == (3, 3)
    assert report.requests_explained == ("model default: m-1 → m-2",)
    assert "model requests changed: 3 of 3 (model default: m-1 → m-2)" in report.render()
    write(app, spec_edit=declared("model: m-1"))  # back as recorded: nothing changed
    assert (await replay(app, golden)).model_requests_changed == (0, 3)


async def test_changed_model_options_are_request_drift_naming_them(app, tmp_path) -> None:
    write(app, spec_edit=declared("options: {temperature: 0, top_p: 1}"))
    golden = await record(app, tmp_path)
    write(app, spec_edit=declared("options: {temperature: 0.7, seed: 7, top_p: 1}"))
    report = await replay(app, golden)
    assert report.same and report.failed({"requests"})
    assert report.requests_explained == (
        "model default: options seed (unset) → 7, temperature 0 → 0.7",
    )
    write(app)  # no options at all
    report = await replay(app, golden)
    assert report.requests_explained == (
        "model default: options temperature 0 → (unset), top_p 1 → (unset)",
    )


ENVIRONMENTS = """
environments:
  offline:
    models:
      default: {use: scripted, options: {seed: 1}}
"""


async def replay_in(app, path, env: str) -> ph.ReplayReport:
    async with ph.load(app.spec, env=env) as harness:
        return await harness.replay(path)


async def test_what_an_environment_sets_is_left_out_of_the_declaration(app, tmp_path) -> None:
    """A golden recorded with no environment replays under one that sets `use` and `options`
    (a test marked env="none", a gate on `offline`) without a change, and the other way round;
    a model swapped in the spec itself is seen under either."""
    write(app, spec_edit=declared("model: m-1\noptions: {temperature: 0}"))
    app.spec.write_text(app.spec.read_text() + ENVIRONMENTS)
    plain = await record(app, tmp_path)
    async with ph.load(app.spec, env="offline") as harness:
        result = await harness.run("orders", "Refund A-1", principal="ann")
        offline = await harness.export(result.run_id, tmp_path / "offline.yaml")
    assert yaml.safe_load(offline.read_text())["models"] == {
        "default": {
            "use": "(environment)",
            "model": "m-1",
            "options": {"temperature": 0, "seed": "(environment)"},
        }
    }
    for golden in (plain, offline):
        for env in ("offline", ""):
            assert (await replay_in(app, golden, env)).model_requests_changed == (0, 3)
    app.spec.write_text(app.spec.read_text().replace("model: m-1", "model: m-2"))
    for golden in (plain, offline):
        for env in ("offline", ""):
            report = await replay_in(app, golden, env)
            assert report.requests_explained == ("model default: m-1 → m-2",), (golden, env)


async def test_options_an_environment_pins_leave_the_others_compared(app, tmp_path) -> None:
    """A CI environment pinning `temperature`: a change to another option is still seen."""
    write(app, spec_edit=declared("options: {max_tokens: 100, temperature: 0.7}"))
    overlay = "environments:\n  ci:\n    models:\n      default: {options: {temperature: 0}}\n"
    app.spec.write_text(app.spec.read_text() + overlay)
    async with ph.load(app.spec, env="ci") as harness:
        result = await harness.run("orders", "Refund A-1", principal="ann")
        golden = await harness.export(result.run_id, tmp_path / "ci.yaml")
    options = yaml.safe_load(golden.read_text())["models"]["default"]["options"]
    assert options == {"max_tokens": 100, "temperature": "(environment)"}
    for env in ("ci", ""):
        assert (await replay_in(app, golden, env)).model_requests_changed == (0, 3)
    app.spec.write_text(app.spec.read_text().replace("max_tokens: 100", "max_tokens: 4000"))
    for env in ("ci", ""):
        report = await replay_in(app, golden, env)
        assert report.requests_explained == ("model default: options max_tokens 100 → 4000",)


async def test_each_run_starts_with_its_own_copy_of_the_declarations(app) -> None:
    """A store may keep the payload objects it is given: none is the plan's own."""
    from pytest_harness.principal import Principal
    from pytest_harness.runtime.journal import started_payload

    write(app, spec_edit=declared("options: {stop: [END]}"))
    async with ph.load(app.spec) as harness:
        plan = harness.plans.tasks["orders"]
        payloads = [
            started_payload(
                harness.spec, plan, "hi", Principal("ann"), None, {}, None, [], given_labels=None
            )
            for _ in range(2)
        ]
    first, second = (p["models"]["default"] for p in payloads)
    assert first == second == plan.declared["default"]
    assert first["options"]["stop"] is not plan.declared["default"]["options"]["stop"]
    first["options"]["stop"].append("changed")
    assert plan.declared["default"]["options"]["stop"] == second["options"]["stop"] == ["END"]


async def test_a_model_named_like_a_credential_keeps_its_declaration(app, tmp_path) -> None:
    """Names are not redacted (a key `token` would hide the whole declaration); values are."""
    secret = "AKIA" + "IOSFODNN7EXAMPLE"
    app.write(SPEC)
    text = app.spec.read_text().replace("  default:\n", "  token:\n", 1)
    text = text.replace("script: []", f"script: {SCRIPT}\n    model: {secret}", 1)
    app.spec.write_text(
        text.replace(
            "tools: [lookup_order, refund]", "model: token\n    tools: [lookup_order, refund]"
        )
    )
    golden = await record(app, tmp_path)
    models = yaml.safe_load(golden.read_text())["models"]
    assert list(models) == ["token"] and models["token"]["use"] == "scripted"
    assert secret not in golden.read_text()
    report = await replay(app, golden)
    assert report.model_requests_changed == (0, 3), report.requests_explained
    async with ph.load(app.spec) as harness:  # by run id: the stored recording, unredacted
        result = await harness.run("orders", "Refund A-1", principal="ann")
        assert (await harness.replay(result.run_id)).same


async def test_options_json_cannot_hold_are_kept_as_text(app, tmp_path) -> None:
    """A YAML date or a non-finite number in options: the run records, and compares equal."""
    write(app, spec_edit=declared("options: {since: 2024-01-01, top: .inf, n: [1, 2.5]}"))
    golden = await record(app, tmp_path)
    options = yaml.safe_load(golden.read_text())["models"]["default"]["options"]
    assert options == {"since": "2024-01-01", "top": "inf", "n": [1, 2.5]}
    assert (await replay(app, golden)).model_requests_changed == (0, 3)


async def test_a_golden_without_declarations_is_compared_without_them(app, tmp_path) -> None:
    """Files recorded before declarations were kept: a swapped model is not seen (documented)."""
    write(app, spec_edit=declared("model: m-1"))
    golden = await record(app, tmp_path)
    data = yaml.safe_load(golden.read_text())
    del data["models"]
    golden.write_text(yaml.safe_dump(data, sort_keys=False))
    assert Recording.load(golden).models is None
    write(app, spec_edit=declared("model: m-2"))
    report = await replay(app, golden)
    assert report.model_requests_changed == (0, 3) and not report.failed({"requests"})


async def test_a_secret_in_model_options_is_redacted_and_compares_equal(app, tmp_path) -> None:
    secret = "sk-proj-" + "a1B2" * 12
    write(app, spec_edit=declared(f"options: {{user: {secret}}}"))
    golden = await record(app, tmp_path)
    text = golden.read_text()
    assert secret not in text and "[REDACTED]" in text
    report = await replay(app, golden)
    assert report.model_requests_changed == (0, 3)


# -- format @1 -------------------------------------------------------------------------------


def shop_v1_files() -> list[Path]:
    """Copies of four of the shop's @1 files (kept @1 here), and those of `recordings/` still @1."""
    committed = [
        p
        for p in sorted((ROOT / "recordings" / "test_shop").glob("*.yaml"))
        if p.read_text(encoding="utf-8").startswith("format: pytest-harness/recording@1\n")
    ]
    return sorted(V1.glob("*.yaml")) + committed


async def test_the_shops_format_1_files_migrate_and_replay_the_same(tmp_path) -> None:
    files = shop_v1_files()
    assert len(files) >= 4
    for path in files:
        assert path.read_text().startswith("format: pytest-harness/recording@1\n")
    spec = ROOT / "fixtures" / "shop" / "harness.yaml"
    async with ph.load(spec, env="offline", store="memory") as harness:
        for index, path in enumerate(files):
            recording = Recording.load(path)
            assert recording.spec_digest == ""  # dropped by the migration
            assert recording.system is None and all(t.parts is None for t in recording.model_turns)
            report = await harness.replay(path)
            assert report.same, report.render()
            # whole-request digests still compare: nothing changed in the requests either
            assert report.model_requests_changed[0] == 0, report.render()
            # rewritten, a migrated file is @2 and loads back as the same run
            copy = tmp_path / f"{index}-{path.name}"
            recording.save(copy)
            text = copy.read_text()
            assert text.startswith("format: pytest-harness/recording@2\n")
            assert "spec_digest" not in text and "request_digest" not in text
            again = Recording.load(copy)
            assert again.trace == recording.trace
            assert again.model_turns == tuple(
                t.__class__(model=t.model, digest=t.digest, answer=t.answer)
                for t in recording.model_turns
            )
            assert (await harness.replay(copy)).same


async def test_a_format_1_file_with_a_changed_prompt_says_the_part_is_unknown(tmp_path) -> None:
    shop = tmp_path / "shop"
    shutil.copytree(ROOT / "fixtures" / "shop", shop, ignore=shutil.ignore_patterns("__pycache__"))
    spec = shop / "harness.yaml"
    spec.write_text(spec.read_text().replace("Look orders up", "Always look orders up"))
    golden = V1 / "test_card_numbers_are_redacted.yaml"
    async with ph.load(spec, env="offline", store="memory") as harness:
        report = await harness.replay(golden)
    assert report.same
    changed, total = report.model_requests_changed
    assert changed == total > 0
    assert "which part is unknown: the recording (format @1)" in report.render()


async def test_the_replay_report_shows_a_cel_error_whole(app, tmp_path) -> None:
    write(app)
    golden = await record(app, tmp_path)
    rule = (
        'rules:\n  - id: typed\n    when: tool == "refund" && args.amount > "lots"\n'
        "    then: deny\n"
    )
    write(app, spec_edit=("rules: []\n", rule))
    report = await replay(app, golden)
    assert not report.same
    rendered = report.render()
    [added] = [c for c in report.decisions if c.kind == "rule"]
    error = added.actual.detail["error"]
    assert len(error) > 100 and f"error: {error}" in rendered
    assert "\\'" not in rendered and '\\"' not in rendered
